//! What every handler shares.

use std::sync::Arc;

use delayd_core::Broker;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::shutdown::InFlight;
use crate::ServerOptions;
use delayd_push::PushPolicy;

#[derive(Clone)]
pub struct AppState {
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
