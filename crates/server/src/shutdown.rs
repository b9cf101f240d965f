//! Graceful shutdown. The order matters: stop accepting, let in-flight
//! requests finish, then shut the broker down, which makes long-polling
//! lease calls return empty lists so the HTTP server can drain.
//!
//! Waiting lease calls are deliberately not counted as in flight: they would
//! otherwise hold shutdown for up to `wait_ms`, and they can only end by the
//! broker's shutdown. Everything else is counted by [`enter`].

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::MatchedPath;
use delayd_core::Broker;
use tokio::sync::Notify;

use crate::routes::LEASE_ROUTE;

/// How long shutdown waits for in-flight requests before shutting the
/// broker down anyway (api.md: the process exits within 10 seconds).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(7);

/// Counts requests in flight (other than lease calls).
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Resolves once nothing is in flight.
    pub async fn idle(&self) {
        loop {
            // Register interest before checking, so a decrement between the
            // check and the await cannot be missed.
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Decrements on drop, so a request whose future is cancelled (client gone)
/// still leaves the count.
pub(crate) struct Guard(Arc<InFlight>);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Counts a request in flight until the returned guard is dropped (also
/// when its future is cancelled); lease calls are not counted (see the
/// module doc).
pub(crate) fn enter(in_flight: &Arc<InFlight>, route: Option<&MatchedPath>) -> Option<Guard> {
    if route.is_some_and(|p| p.as_str() == LEASE_ROUTE) {
        return None;
    }
    in_flight.count.fetch_add(1, Ordering::SeqCst);
    Some(Guard(Arc::clone(in_flight)))
}

/// After `signal`: waits for in-flight requests (at most [`DRAIN_TIMEOUT`]),
/// then shuts the broker down. Returns the future the accept loop
/// ([`crate::serve_http`]) stops on: it resolves as soon as the signal
/// fires, so the listener stops accepting at once.
pub fn orchestrate(
    signal: impl Future<Output = ()> + Send + 'static,
    in_flight: Arc<InFlight>,
    broker: Arc<dyn Broker>,
) -> (
    impl Future<Output = ()> + Send + 'static,
    tokio::task::JoinHandle<()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        signal.await;
        tracing::info!("shutting down: no new connections, draining requests");
        let _ = stop_tx.send(());
        if tokio::time::timeout(DRAIN_TIMEOUT, in_flight.idle())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = in_flight.count(),
                "requests still running at drain timeout"
            );
        }
        if let Err(err) = broker.shutdown().await {
            tracing::error!(%err, "broker shutdown failed");
        }
    });
    let stop = async move {
        let _ = stop_rx.await;
    };
    (stop, task)
}
