//! Worker commands: `reserve` (with its timeout and `DEADLINE_SOON`),
//! `reserve-job`, `delete`, `release`, `bury`, `touch`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use delayd_core::metric::{self, Stage};
use delayd_core::{BrokerError, Delivery, LeaseRequest, MessageState, Nack, QueueName, Via};

use crate::reply;
use crate::shared::{error_reply, Held, Session, Shared};
use crate::tubes::Ref;

/// The last second of a TTR is a safety margin: a worker holding a job that
/// close to its deadline gets `DEADLINE_SOON` rather than waiting.
const SAFETY_MARGIN_MS: u64 = 1000;

/// A `reserve` without timeout waits in slices of this length, so that a
/// watched tube whose queue is created meanwhile is seen (brokers do not
/// wake lease calls for queues that did not exist when the call began).
const WAIT_SLICE: Duration = Duration::from_secs(1);

/// Why a waiting `reserve` was cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// The client sent EOF (or the socket failed).
    HalfClosed,
    /// The server is shutting down.
    Stopping,
}

/// How a reserve ended when it was not interrupted.
enum Reserved {
    /// One job per pipelined `reserve` answered (at least one).
    Jobs(Vec<Delivery>),
    DeadlineSoon,
    TimedOut,
}

/// Counts the connection as waiting (server-wide and per watched tube)
/// for exactly as long as it lives, however the wait ends.
struct WaitingGuard {
    shared: Arc<Shared>,
    tubes: Vec<QueueName>,
}

impl WaitingGuard {
    fn new(shared: Arc<Shared>, tubes: Vec<QueueName>) -> Self {
        shared
            .counters
            .current_waiting
            .fetch_add(1, Ordering::Relaxed);
        for tube in &tubes {
            shared.tubes.add(tube, Ref::Waiting);
        }
        Self { shared, tubes }
    }
}

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        let counters = &self.shared.counters;
        counters.current_waiting.fetch_sub(1, Ordering::Relaxed);
        for tube in &self.tubes {
            self.shared.tubes.remove(tube, Ref::Waiting);
        }
    }
}

impl Session {
    pub(crate) fn mark_worker(&mut self) {
        if !self.worker {
            self.worker = true;
            let workers = &self.shared.counters.current_workers;
            workers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets reservations whose TTR has passed: the broker has taken the
    /// job back, so this connection no longer owns it (beanstalkd likewise).
    fn forget_expired(&mut self) {
        let now = self.now_ms();
        self.held.retain(|_, held| held.lease_until > now);
    }

    /// When the soonest held reservation enters its safety margin (epoch ms).
    fn deadline_soon_at(&self) -> Option<u64> {
        let soonest = self.held.values().map(|h| h.lease_until).min()?;
        Some(soonest.saturating_sub(SAFETY_MARGIN_MS))
    }

    /// `count` pipelined `reserve`s (or `reserve-with-timeout`s with the
    /// same timeout), waiting until a job comes or `interrupted` completes.
    /// One broker lease serves as many of them as jobs are ready (at least
    /// the first). Returns how many of the reserves were answered (at least
    /// one), or `None` when the connection must close without a reply (the
    /// server is stopping).
    pub(crate) async fn reserve(
        &mut self,
        timeout_secs: Option<u32>,
        count: u32,
        interrupted: impl Future<Output = Interrupt>,
        out: &mut Vec<u8>,
    ) -> Option<u32> {
        self.mark_worker();
        self.forget_expired();
        let _waiting = WaitingGuard::new(Arc::clone(&self.shared), self.watching.clone());
        tokio::pin!(interrupted);
        let outcome = tokio::select! {
            // Interruptions first: during shutdown, jobs other connections
            // give back must not be handed to one that is closing too.
            biased;
            interrupt = &mut interrupted => match interrupt {
                // beanstalkd answers a reserve on a half-closed connection
                // with TIMED_OUT.
                Interrupt::HalfClosed => Ok(Reserved::TimedOut),
                Interrupt::Stopping => return None,
            },
            outcome = self.wait_for_job(timeout_secs, count) => outcome,
        };
        match outcome {
            Ok(Reserved::Jobs(deliveries)) => {
                let answered = deliveries.len() as u32;
                for delivery in deliveries {
                    self.hand_out(delivery, out);
                }
                return Some(answered);
            }
            Ok(Reserved::DeadlineSoon) => reply::line(out, "DEADLINE_SOON"),
            Ok(Reserved::TimedOut) => reply::line(out, "TIMED_OUT"),
            Err(error) => reply::line(out, error_reply(&error)),
        }
        Some(1)
    }

    async fn wait_for_job(
        &self,
        timeout_secs: Option<u32>,
        count: u32,
    ) -> Result<Reserved, BrokerError> {
        let started = tokio::time::Instant::now();
        let timeout = timeout_secs.map(|s| Duration::from_secs(u64::from(s)));
        let margin_at = self.deadline_soon_at();
        loop {
            let now = self.now_ms();
            let to_margin = margin_at.map(|at| Duration::from_millis(at.saturating_sub(now)));
            let remaining = timeout.map(|t| t.saturating_sub(started.elapsed()));
            let wait = [Some(WAIT_SLICE), to_margin, remaining]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(WAIT_SLICE);
            let request = LeaseRequest {
                max: count.clamp(1, delayd_core::MAX_BATCH as u32),
                wait_ms: wait.as_millis() as u64,
                lease_ms: None,
            };
            let broker = &self.shared.broker;
            let leased = broker
                .lease_via(&self.watching, request, Via::Beanstalk)
                .await?;
            if !leased.is_empty() {
                return Ok(Reserved::Jobs(leased));
            }
            if margin_at.is_some_and(|at| self.now_ms() >= at) {
                return Ok(Reserved::DeadlineSoon);
            }
            if timeout.is_some_and(|t| started.elapsed() >= t) {
                return Ok(Reserved::TimedOut);
            }
        }
    }

    pub(crate) fn hand_out(&mut self, delivery: Delivery, out: &mut Vec<u8>) {
        reply::job(out, "RESERVED", delivery.seq, &delivery.payload);
        metric::record_lateness(Stage::Answered, self.now_ms(), delivery.deliver_at);
        let held = Held {
            queue: delivery.queue,
            id: delivery.id,
            lease: delivery.lease_id,
            lease_until: delivery.lease_until,
        };
        self.held.insert(delivery.seq, held);
    }

    /// `reserve-job <id>`: reserves that job if it is not reserved already.
    pub(crate) async fn reserve_job(
        &mut self,
        seq: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        self.mark_worker();
        let broker = Arc::clone(&self.shared.broker);
        let message = match broker.get_by_seq(seq).await? {
            Some(m) if m.state != MessageState::Leased => m,
            _ => {
                reply::line(out, "NOT_FOUND");
                return Ok(());
            }
        };
        let delivery = broker
            .lease_message(&message.queue, &message.id, None)
            .await?;
        self.hand_out(delivery, out);
        Ok(())
    }

    /// Takes a held reservation out of the map if it is still live.
    fn take_held(&mut self, seq: u64) -> Option<Held> {
        self.forget_expired();
        self.held.remove(&seq)
    }

    /// `delete <id>`: a job this connection reserved, or any job that is
    /// ready, delayed or buried. A job reserved by another connection is
    /// `NOT_FOUND`, as in beanstalkd.
    pub(crate) async fn delete(&mut self, seq: u64, out: &mut Vec<u8>) -> Result<(), BrokerError> {
        let broker = Arc::clone(&self.shared.broker);
        let queue = if let Some(held) = self.take_held(seq) {
            broker.ack(&held.queue, &held.id, &held.lease).await?;
            held.queue
        } else {
            let message = match broker.get_by_seq(seq).await? {
                Some(m) if m.state != MessageState::Leased => m,
                _ => {
                    reply::line(out, "NOT_FOUND");
                    return Ok(());
                }
            };
            broker.cancel(&message.queue, &message.id).await?;
            message.queue
        };
        self.shared.tubes.count(&queue, |t| t.cmd_delete += 1);
        reply::line(out, "DELETED");
        Ok(())
    }

    /// `release <id> <pri> <delay>`: back to ready (or delayed). Never
    /// buries, and does not count towards the queue's `max_attempts`.
    pub(crate) async fn release(
        &mut self,
        seq: u64,
        pri: u32,
        delay: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let Some(held) = self.take_held(seq) else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let nack = Nack {
            defer: false,
            delay_ms: Some(u64::from(delay) * 1000),
            priority: Some(pri),
            may_die: false,
            error: None,
            push: None,
        };
        let broker = &self.shared.broker;
        broker
            .nack(&held.queue, &held.id, &held.lease, nack)
            .await?;
        reply::line(out, "RELEASED");
        Ok(())
    }

    /// `bury <id> <pri>`: the reserved job goes to the dead letters.
    pub(crate) async fn bury(
        &mut self,
        seq: u64,
        pri: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let Some(held) = self.take_held(seq) else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let broker = &self.shared.broker;
        broker
            .bury(&held.queue, &held.id, &held.lease, Some(pri))
            .await?;
        reply::line(out, "BURIED");
        Ok(())
    }

    /// `touch <id>`: the TTR starts again from now.
    pub(crate) async fn touch(&mut self, seq: u64, out: &mut Vec<u8>) -> Result<(), BrokerError> {
        let Some(held) = self.take_held(seq) else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let broker = Arc::clone(&self.shared.broker);
        let lease_until = broker
            .extend(&held.queue, &held.id, &held.lease, None)
            .await?;
        self.held.insert(
            seq,
            Held {
                lease_until,
                ..held
            },
        );
        reply::line(out, "TOUCHED");
        Ok(())
    }
}
