//! One connection's protocol state (used tube, watch list, the jobs it has
//! reserved) and the dispatch of parsed commands to their handlers. The
//! producer and tube commands live here; worker commands are in
//! [`crate::jobs`], inspection commands in [`crate::inspect`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use delayd_core::{
    BrokerError, LeaseId, MessageId, Nack, QueueConfigPatch, QueueName, RetryPolicy,
};

use crate::proto::Command;
use crate::reply;
use crate::server::Shared;
use crate::tubes::{queue_name, Ref};

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

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// `reserve` (`None`) or `reserve-with-timeout`: the connection waits
    /// for a job while watching its socket (see [`Session::reserve`]).
    Reserve(Option<u32>),
    Quit,
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

    /// Counts a command that runs as part of a pipelined run (see the
    /// server's `Run`) rather than through [`execute`](Self::execute).
    pub(crate) fn count_command(&self, command: &Command) {
        self.shared.counters.count_command(command);
    }

    /// Runs one command, appending its reply to `out`.
    pub(crate) async fn execute(&mut self, command: Command, out: &mut Vec<u8>) -> Flow {
        self.shared.counters.count_command(&command);
        match self.dispatch(command, out).await {
            Ok(flow) => flow,
            Err(error) => {
                reply::line(out, error_reply(&error));
                Flow::Continue
            }
        }
    }

    async fn dispatch(&mut self, command: Command, out: &mut Vec<u8>) -> Result<Flow, BrokerError> {
        use Command as C;
        match command {
            C::Put { .. } => self.put_batch(vec![command], out).await,
            C::Use(tube) => self.use_tube(&tube, out),
            C::Watch(tube) => self.watch(&tube, out),
            C::Ignore(tube) => self.ignore(&tube, out),
            C::ListTubeUsed => reply::line(out, &format!("USING {}", self.using)),
            C::ListTubesWatched => {
                let names = self.watching.iter().map(QueueName::as_str);
                reply::yaml(out, &reply::name_list(names));
            }
            C::Reserve => return Ok(Flow::Reserve(None)),
            C::ReserveWithTimeout(secs) => return Ok(Flow::Reserve(Some(secs))),
            C::ReserveJob(id) => self.reserve_job(id, out).await?,
            C::Delete(id) => self.delete(id, out).await?,
            C::Release { id, pri, delay } => self.release(id, pri, delay, out).await?,
            C::Bury { id, pri } => self.bury(id, pri, out).await?,
            C::Touch(id) => self.touch(id, out).await?,
            C::Peek(id) => self.peek(id, out).await?,
            C::PeekReady => {
                self.peek_state(delayd_core::MessageState::Ready, out)
                    .await?
            }
            C::PeekDelayed => {
                self.peek_state(delayd_core::MessageState::Scheduled, out)
                    .await?
            }
            C::PeekBuried => {
                self.peek_state(delayd_core::MessageState::Dead, out)
                    .await?
            }
            C::Kick(bound) => self.kick(bound, out).await?,
            C::KickJob(id) => self.kick_job(id, out).await?,
            C::StatsJob(id) => self.stats_job(id, out).await?,
            C::StatsTube(tube) => self.stats_tube(&tube, out).await?,
            C::Stats => self.stats(out).await?,
            C::ListTubes => self.list_tubes(out).await?,
            C::PauseTube { tube, delay } => self.pause_tube(&tube, delay, out).await?,
            C::Quit => return Ok(Flow::Quit),
        }
        Ok(Flow::Continue)
    }

    fn use_tube(&mut self, tube: &str, out: &mut Vec<u8>) {
        let Some(queue) = queue_name(tube) else {
            reply::line(out, "BAD_FORMAT");
            return;
        };
        self.shared.tubes.add(&queue, Ref::Using);
        self.shared.tubes.remove(&self.using, Ref::Using);
        reply::line(out, &format!("USING {queue}"));
        self.using = queue;
    }

    fn watch(&mut self, tube: &str, out: &mut Vec<u8>) {
        let Some(queue) = queue_name(tube) else {
            reply::line(out, "BAD_FORMAT");
            return;
        };
        if !self.watching.contains(&queue) {
            self.shared.tubes.add(&queue, Ref::Watching);
            self.watching.push(queue);
        }
        reply::line(out, &format!("WATCHING {}", self.watching.len()));
    }

    fn ignore(&mut self, tube: &str, out: &mut Vec<u8>) {
        // beanstalkd refuses before looking at the name: a connection
        // always watches at least one tube.
        if self.watching.len() < 2 {
            reply::line(out, "NOT_IGNORED");
            return;
        }
        if let Some(at) = self.watching.iter().position(|q| q.as_str() == tube) {
            let queue = self.watching.remove(at);
            self.shared.tubes.remove(&queue, Ref::Watching);
        }
        reply::line(out, &format!("WATCHING {}", self.watching.len()));
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
        delay_ms: Some(0),
        priority: None,
        may_die: false,
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
pub(crate) async fn create_queue(
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
