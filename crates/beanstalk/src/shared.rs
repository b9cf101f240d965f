//! What every command handler builds on, so the handler files (`session`,
//! `put`, `pipeline`, `jobs`, `inspect`) import from here and never from
//! each other: the listener's settings, the state all connections share,
//! one connection's state ([`Session`], to which each handler file adds its
//! commands as methods), the jobs a connection holds, and how a broker
//! error is answered.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use delayd_core::{
    Broker, BrokerError, Clock, LeaseId, MessageId, Nack, QueueConfigPatch, QueueName, RetryPolicy,
};

use crate::proto::{Command, DEFAULT_MAX_JOB_SIZE};
use crate::stats::Counters;
use crate::tubes::{Ref, Tubes};

/// Listener settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BeanstalkConfig {
    /// Largest job body accepted, in bytes (beanstalkd's `-z`); larger
    /// `put`s get `JOB_TOO_BIG`.
    pub max_job_size: usize,
    /// Open connections beyond this are closed as soon as accepted. Idle
    /// connections are never closed to make room: beanstalkd workers keep
    /// theirs open on purpose (a `reserve` may wait for hours).
    pub max_connections: usize,
}

impl Default for BeanstalkConfig {
    fn default() -> Self {
        Self {
            max_job_size: DEFAULT_MAX_JOB_SIZE,
            max_connections: 10_000,
        }
    }
}

/// State every connection shares.
pub(crate) struct Shared {
    pub broker: Arc<dyn Broker>,
    pub clock: Arc<dyn Clock>,
    pub config: BeanstalkConfig,
    pub default_tube: QueueName,
    pub tubes: Tubes,
    pub counters: Counters,
    pub draining: AtomicBool,
    pub started: Instant,
    /// beanstalkd's `id`: random per process start.
    pub instance_id: String,
    pub hostname: String,
    pub os: String,
}

/// A job this connection has reserved. beanstalkd only lets the reserving
/// connection delete, release, bury or touch it; the lease id proves it to
/// the broker.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub queue: QueueName,
    pub id: MessageId,
    pub lease: LeaseId,
    /// Epoch ms; after it the lease is gone (the broker re-queues the job).
    pub lease_until: u64,
}

pub(crate) struct Session {
    pub shared: Arc<Shared>,
    pub using: QueueName,
    /// In the order watched; never empty.
    pub watching: Vec<QueueName>,
    /// Reserved jobs by job id (`seq`).
    pub held: HashMap<u64, Held>,
    /// Tubes whose queue this connection created or put into: puts into
    /// them need no queue creation and can be pipelined.
    pub known_tubes: HashSet<QueueName>,
    pub producer: bool,
    pub worker: bool,
}

impl Session {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let default = shared.default_tube.clone();
        shared.tubes.add(&default, Ref::Using);
        shared.tubes.add(&default, Ref::Watching);
        Self {
            shared,
            using: default.clone(),
            watching: vec![default],
            held: HashMap::new(),
            known_tubes: HashSet::new(),
            producer: false,
            worker: false,
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    /// Counts a command that runs in a pipelined segment (see
    /// `crate::pipeline`) rather than through `execute` (see `session`).
    pub(crate) fn count_command(&self, command: &Command) {
        self.shared.counters.count_command(command);
    }

    /// Gives back every job still reserved (beanstalkd does this when a
    /// connection closes): ready again at once, priority kept, no attempt
    /// counted against it.
    pub(crate) async fn release_all(&mut self) {
        for (_, held) in self.held.drain() {
            release_held(self.shared.broker.as_ref(), held).await;
        }
    }
}

async fn release_held(broker: &dyn delayd_core::Broker, held: Held) {
    let nack = Nack {
        defer: false,
        delay_ms: Some(0),
        priority: None,
        may_die: false,
        error: None,
        push: None,
    };
    if let Err(error) = broker.nack(&held.queue, &held.id, &held.lease, nack).await {
        tracing::debug!(queue = %held.queue, id = %held.id, %error, "releasing a closed connection's job");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let tubes = &self.shared.tubes;
        tubes.remove(&self.using, Ref::Using);
        for queue in &self.watching {
            tubes.remove(queue, Ref::Watching);
        }
        let counters = &self.shared.counters;
        if self.producer {
            counters.current_producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            counters.current_workers.fetch_sub(1, Ordering::Relaxed);
        }
        // Normally empty: the connection calls `release_all` before it
        // ends. If it was cancelled instead, release in the background.
        if self.held.is_empty() {
            return;
        }
        let held: Vec<Held> = self.held.drain().map(|(_, h)| h).collect();
        let broker = Arc::clone(&self.shared.broker);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for h in held {
                    release_held(broker.as_ref(), h).await;
                }
            });
        }
    }
}

/// Creates a tube's queue the way beanstalkd treats jobs: never dead-lettered
/// implicitly (`max_attempts: 0`) and a timed-out job is ready again at once
/// (zero backoff), as beanstalkd puts it straight back in the ready queue.
/// Public for `delayd import beanstalkd-binlog`, which makes tubes' queues
/// exactly as this listener does.
pub async fn create_queue(
    broker: &dyn delayd_core::Broker,
    queue: &QueueName,
) -> Result<(), BrokerError> {
    let patch = QueueConfigPatch {
        max_attempts: Some(0),
        retry: Some(RetryPolicy {
            initial_ms: 0,
            max_ms: 0,
            multiplier: 1.0,
        }),
        ..QueueConfigPatch::default()
    };
    broker.put_queue(queue, patch).await.map(|_| ())
}

/// The reply for a broker error: a job or tube that is gone (or not in the
/// right state, or leased by someone else) is `NOT_FOUND`, as in beanstalkd;
/// a value the broker refuses (a delay beyond the server's `--max-delay`)
/// is `BAD_FORMAT`; a store failure is `INTERNAL_ERROR`; a store short of
/// disk space is `OUT_OF_MEMORY`, beanstalkd's reply when it cannot take a
/// job for lack of room.
pub(crate) fn error_reply(error: &BrokerError) -> &'static str {
    match error {
        BrokerError::QueueNotFound(_)
        | BrokerError::MessageNotFound { .. }
        | BrokerError::ScheduleNotFound { .. }
        | BrokerError::LeaseMismatch { .. }
        | BrokerError::InvalidState { .. } => "NOT_FOUND",
        BrokerError::InvalidArgument(_) => {
            tracing::debug!(%error, "beanstalkd command refused by the broker");
            "BAD_FORMAT"
        }
        BrokerError::Unavailable { .. } => {
            tracing::warn!(%error, "beanstalkd command failed in the broker");
            "INTERNAL_ERROR"
        }
        BrokerError::InsufficientStorage(_) => {
            tracing::debug!(%error, "beanstalkd command refused: store short of space");
            "OUT_OF_MEMORY"
        }
    }
}
