//! What every handler shares.

use std::sync::Arc;

use delayd_core::Broker;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::shutdown::InFlight;
use crate::ServerOptions;
use delayd_push::PushPolicy;

/// The handlers' state: one `Arc`, because axum clones the state for every
/// request (cloning the fields one by one cost an atomic increment and
/// decrement per field per request: `drop_in_place<AppState>` was 2% of
/// the server's CPU in a `--durability never` profile).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub broker: Arc<dyn Broker>,
    pub options: Arc<ServerOptions>,
    pub push_allow: Arc<PushPolicy>,
    pub metrics: PrometheusHandle,
    /// Requests that must finish before the broker is shut down.
    pub in_flight: Arc<InFlight>,
    /// Queues whose gauges were exported, so a deleted queue's gauges drop
    /// to zero rather than freezing at their last value.
    pub exported_queues: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}
