//! One queue's worker: leases due messages as push-concurrency permits free
//! up, and runs each delivery as its own task (POST, then ack or nack).
//!
//! Deliveries go through leases exactly as pull consumers do, with a lease
//! of `push.timeout_ms` + [`PushOptions::lease_margin`](crate::PushOptions):
//! if this process dies mid-delivery, the lease expires and the broker hands
//! the message out again (at least once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, BrokerError, Delivery, LeaseRequest, MessageState, Nack, PushFailure, QueueConfig,
    QueueName, RetryPolicy, Via,
};
use reqwest::{Client, Url};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::deliver::{post, Outcome, Target};
use crate::dispatcher::PushOptions;
use crate::metric;
use crate::policy::{PolicyError, PushPolicy};

/// The broker's largest lease batch (api.md: `max` 1..1000).
const MAX_LEASE_BATCH: usize = 1000;
/// Longest a busy worker waits for more free permits before a lease call
/// (see [`QueueWorker::gather_permits`]).
const LEASE_LINGER: Duration = Duration::from_millis(1);
/// Pause after a failed lease call (store down, shutting down), so a broken
/// broker is not spun on.
const LEASE_ERROR_BACKOFF: Duration = Duration::from_millis(200);

/// What every worker shares: built once by the dispatcher.
pub(crate) struct Shared {
    pub broker: Arc<dyn Broker>,
    pub policy: Arc<PushPolicy>,
    pub client: Client,
    pub options: PushOptions,
    pub deliveries: TaskTracker,
    pub hard_stop: CancellationToken,
}

/// A worker for one queue, with that queue's config at start.
pub(crate) struct QueueWorker {
    shared: Arc<Shared>,
    queue: QueueName,
    queues: [QueueName; 1],
    target: Target,
    /// The allowlist's verdict on the URL itself. Names are checked again
    /// at every connection by the resolver; IP literals never reach it, so
    /// this verdict is what stops them (a refusal fails every attempt).
    url_verdict: Result<(), PolicyError>,
    concurrency: usize,
    retry: RetryPolicy,
    /// Whether the queue has `flow`: then a 429, or a 503 with
    /// `Retry-After`, is a deferral rather than a failed attempt (api.md,
    /// "Flow control"). A config change restarts the worker, so this
    /// follows the queue's config.
    flow: bool,
    lease_ms: u64,
}

impl QueueWorker {
    /// `None` when the queue has no push config.
    pub(crate) fn new(shared: Arc<Shared>, queue: QueueName, config: &QueueConfig) -> Option<Self> {
        let push = config.push.as_ref()?;
        let url_verdict = shared.policy.check_url(&push.url);
        let url = match Url::parse(&push.url) {
            Ok(url) => url,
            Err(error) => {
                // Configuration is checked by the API; a stored URL that
                // does not parse still gets its messages failed (and so
                // dead-lettered) rather than stuck.
                tracing::warn!(%queue, %error, "push: invalid url");
                Url::parse("http://invalid.invalid/").ok()?
            }
        };
        let timeout = Duration::from_millis(push.timeout_ms.max(1));
        let headers = crate::credentials::header_map(&push.headers).unwrap_or_else(|error| {
            // Checked at configuration; a stored set that no longer passes
            // is sent without (the target then refuses, and the messages
            // retry and dead-letter visibly).
            tracing::warn!(%queue, %error, "push: credentials not sent");
            reqwest::header::HeaderMap::new()
        });
        let margin = u64::try_from(shared.options.lease_margin.as_millis()).unwrap_or(u64::MAX);
        Some(Self {
            queues: [queue.clone()],
            queue,
            target: Target {
                url,
                timeout,
                secret: push.secret.as_ref().map(|s| s.as_bytes().to_vec()),
                headers,
            },
            url_verdict,
            concurrency: usize::try_from(push.concurrency.max(1)).unwrap_or(usize::MAX),
            retry: config.retry,
            flow: config.flow.is_some(),
            lease_ms: push.timeout_ms.saturating_add(margin),
            shared,
        })
    }

    /// Leases and dispatches until `stop` is cancelled. A lease call is
    /// never abandoned half-way (its messages would wait for their lease to
    /// expire), so stopping takes up to `lease_wait`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let worker = Arc::new(self);
        let permits = Arc::new(Semaphore::new(worker.concurrency));
        while !stop.is_cancelled() {
            let mut held = tokio::select! {
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(permit) => vec![permit],
                    Err(_) => break,
                },
                () = stop.cancelled() => break,
            };
            worker.gather_permits(&permits, &mut held).await;
            match worker.lease(held.len()).await {
                Ok(deliveries) => worker.dispatch(deliveries, &mut held),
                Err(error) => {
                    tracing::warn!(queue = %worker.queue, %error, "push: lease failed");
                    tokio::select! {
                        () = tokio::time::sleep(LEASE_ERROR_BACKOFF) => {}
                        () = stop.cancelled() => break,
                    }
                }
            }
        }
        tracing::info!(queue = %worker.queue, "push: worker stopped");
    }

    /// Adds free permits to `held`, so that one lease call fetches as many
    /// messages as may be sent. While requests are in flight, waits up to
    /// [`LEASE_LINGER`] for a quarter of the permits: without it a busy
    /// queue leases one message per finished request, and a lease call
    /// costs the broker far more than a millisecond costs a busy queue. An
    /// idle queue (nothing in flight) leases at once.
    async fn gather_permits(&self, permits: &Arc<Semaphore>, held: &mut Vec<OwnedSemaphorePermit>) {
        let take_free = |held: &mut Vec<OwnedSemaphorePermit>| {
            while held.len() < MAX_LEASE_BATCH {
                match Arc::clone(permits).try_acquire_owned() {
                    Ok(permit) => held.push(permit),
                    Err(_) => break,
                }
            }
        };
        take_free(held);
        let target = (self.concurrency / 4).clamp(1, MAX_LEASE_BATCH);
        let in_flight = held.len() < self.concurrency;
        if !in_flight || held.len() >= target {
            return;
        }
        let deadline = tokio::time::Instant::now() + LEASE_LINGER;
        while held.len() < target {
            tokio::select! {
                permit = Arc::clone(permits).acquire_owned() => match permit {
                    Ok(permit) => held.push(permit),
                    Err(_) => return,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        take_free(held);
    }

    async fn lease(&self, max: usize) -> Result<Vec<Delivery>, BrokerError> {
        let request = LeaseRequest {
            max: u32::try_from(max).unwrap_or(1),
            wait_ms: u64::try_from(self.shared.options.lease_wait.as_millis()).unwrap_or(1000),
            lease_ms: Some(self.lease_ms),
        };
        let broker = &self.shared.broker;
        broker.lease_via(&self.queues, request, Via::Push).await
    }

    /// Spawns one task per delivery, each holding one permit until its
    /// request is answered and acked or nacked.
    fn dispatch(self: &Arc<Self>, deliveries: Vec<Delivery>, held: &mut Vec<OwnedSemaphorePermit>) {
        for delivery in deliveries {
            let Some(permit) = held.pop() else {
                // The broker returned more than `max`; deliver anyway rather
                // than leave the message leased until it expires.
                tracing::warn!(queue = %self.queue, "push: broker leased more than asked");
                self.spawn_delivery(delivery, None);
                continue;
            };
            self.spawn_delivery(delivery, Some(permit));
        }
    }

    fn spawn_delivery(self: &Arc<Self>, delivery: Delivery, permit: Option<OwnedSemaphorePermit>) {
        let worker = Arc::clone(self);
        let hard_stop = self.shared.hard_stop.clone();
        self.shared.deliveries.spawn(async move {
            tokio::select! {
                () = worker.deliver(delivery) => {}
                // Dropped at shutdown: the lease expires and the message is
                // delivered again later.
                () = hard_stop.cancelled() => {}
            }
            drop(permit);
        });
    }

    async fn deliver(&self, mut delivery: Delivery) {
        let labels = [("queue", self.queue.to_string())];
        let now_ms = self.shared.options.clock.now_ms();
        if delivery.attempt <= 1 {
            let late_ms = now_ms.saturating_sub(delivery.deliver_at);
            metrics::histogram!(metric::PUSH_LATENESS_SECONDS, &labels)
                .record(late_ms as f64 / 1000.0);
        } else {
            metrics::counter!(metric::PUSH_RETRIES_TOTAL, &labels).increment(1);
        }
        let in_flight = InFlight::new(metrics::gauge!(metric::PUSH_IN_FLIGHT, &labels));
        let started = Instant::now();
        let outcome = match &self.url_verdict {
            Ok(()) => {
                let payload = std::mem::take(&mut delivery.payload);
                post(
                    &self.shared.client,
                    &self.target,
                    &delivery,
                    payload,
                    now_ms,
                )
                .await
            }
            Err(refused) => Outcome::Disallowed(refused.clone()),
        };
        drop(in_flight);
        let took = started.elapsed();
        metrics::histogram!(metric::PUSH_LATENCY_SECONDS, &labels).record(took.as_secs_f64());
        let outcome_labels = [
            ("queue", self.queue.to_string()),
            ("outcome", outcome.label().to_owned()),
        ];
        metrics::counter!(metric::PUSH_DELIVERIES_TOTAL, &outcome_labels).increment(1);
        self.settle(delivery, outcome, took).await;
    }

    /// Acks a delivered message; nacks (or, with `flow`, defers) any other
    /// outcome, which the request took `took` to reach: see
    /// [`Self::nack_for`].
    async fn settle(&self, delivery: Delivery, outcome: Outcome, took: Duration) {
        let broker = &self.shared.broker;
        let result = match &outcome {
            Outcome::Delivered => {
                broker
                    .ack(&self.queue, &delivery.id, &delivery.lease_id)
                    .await
            }
            failed => {
                let nack = self.nack_for(failed, took);
                tracing::debug!(queue = %self.queue, id = %delivery.id, attempt = delivery.attempt, outcome = %failed, deferred = nack.defer, "push: attempt failed");
                let result = broker
                    .nack(&self.queue, &delivery.id, &delivery.lease_id, nack)
                    .await;
                if result.is_ok() {
                    self.count_if_dead(&delivery).await;
                }
                result
            }
        };
        match result {
            Ok(()) => {}
            // The lease expired during the request (or the message was
            // cancelled): the broker has already taken it back.
            Err(
                error @ (BrokerError::LeaseMismatch { .. } | BrokerError::MessageNotFound { .. }),
            ) => {
                tracing::info!(queue = %self.queue, id = %delivery.id, %error, outcome = outcome.label(), "push: lease no longer held when settling");
            }
            Err(error) => {
                tracing::warn!(queue = %self.queue, id = %delivery.id, %error, "push: cannot settle delivery; it will be retried when its lease expires");
            }
        }
    }

    /// The nack of an answer other than 2xx: `Retry-After`, capped at the
    /// queue's `retry.max_ms`, else `None` (the broker's backoff, with
    /// jitter for a failed attempt, the nth deferral's for a deferral). On
    /// a queue with `flow`, a 429, or a 503 with `Retry-After`, is a
    /// deferral (the target asked us to slow down: the attempt is given
    /// back and the key cools down); everything else counts towards
    /// `max_attempts`. The nack carries the failure for the message's
    /// history (`push_failed`, or the deferral's reason): the status
    /// (none without an answer) and how long the request took.
    fn nack_for(&self, failed: &Outcome, took: Duration) -> Nack {
        let (status, retry_after) = match failed {
            Outcome::HttpError {
                status,
                retry_after_ms,
                ..
            } => (Some(*status), *retry_after_ms),
            _ => (None, None),
        };
        Nack {
            defer: self.flow && is_pushback(status, retry_after),
            delay_ms: retry_after.map(|ms| delayd_core::flow::retry_after_ms(&self.retry, ms)),
            priority: None,
            may_die: true,
            error: failed.error_text(),
            push: Some(PushFailure {
                status,
                duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// After a nack, whether the message went to `dead` (the broker decides,
    /// using the message's own `max_attempts` we do not see).
    async fn count_if_dead(&self, delivery: &Delivery) {
        if let Ok(message) = self.shared.broker.get(&self.queue, &delivery.id).await {
            if message.state == MessageState::Dead && message.seq == delivery.seq {
                metrics::counter!(
                    metric::PUSH_DEAD_LETTERED_TOTAL,
                    &[("queue", self.queue.to_string())]
                )
                .increment(1);
                tracing::info!(queue = %self.queue, id = %delivery.id, attempts = delivery.attempt, "push: message dead after its last attempt");
            }
        }
    }
}

/// Whether an answer tells the sender to slow down (api.md: a 429, or a
/// 503 with `Retry-After`; a bare 503 is an ordinary failure).
fn is_pushback(status: Option<u16>, retry_after_ms: Option<u64>) -> bool {
    match status {
        Some(429) => true,
        Some(503) => retry_after_ms.is_some(),
        _ => false,
    }
}

/// Counts one request in the in-flight gauge for as long as it lives, so a
/// request dropped at shutdown is uncounted too.
struct InFlight(metrics::Gauge);

impl InFlight {
    fn new(gauge: metrics::Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::is_pushback;

    #[test]
    fn pushback_is_429_or_503_with_retry_after() {
        assert!(is_pushback(Some(429), None));
        assert!(is_pushback(Some(429), Some(1_000)));
        assert!(is_pushback(Some(503), Some(0)));
        assert!(!is_pushback(Some(503), None));
        assert!(!is_pushback(Some(500), Some(1_000)));
        assert!(!is_pushback(None, None));
    }
}
