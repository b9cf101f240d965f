//! `Broker::pipeline`: one client's back-to-back calls applied in one
//! lock hold, each joining the open commit group, with one durability
//! wait for all of them.

use std::sync::Arc;

use delayd_core::{
    check_lease_ms, BrokerError, BrokerResult, EnqueueOptions, EnqueueOutcome, EnqueueRequest,
    LeaseRequest, PipelinedCall, PipelinedResult, QueueConfig, QueueName, Settling, Via,
};

use crate::broker::{Inner, MAX_PENDING_OPS};
use crate::consume::{fill, Leased};
use crate::lock::Site;
use crate::state::{State, Tx};
use crate::store::Store;

impl State {
    /// `Broker::enqueue` under the lock: creates the queue if allowed.
    pub fn enqueue_batch(
        &mut self,
        store: &Store,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        if !self.queues.contains_key(queue) {
            if !options.auto_create {
                return Err(BrokerError::QueueNotFound(queue.clone()));
            }
            self.create_queue(queue, QueueConfig::default(), tx);
        }
        Ok(messages
            .into_iter()
            .map(|req| self.enqueue_one(store, queue, req, now, tx))
            .collect())
    }

    /// A lease that does not wait: what is ready now, as deliveries whose
    /// payloads are read once the lock is released.
    pub fn lease_now(
        &mut self,
        queues: &[QueueName],
        max: u32,
        lease_ms: Option<u64>,
        via: Via,
        now: u64,
        tx: &mut Tx,
    ) -> BrokerResult<Vec<Leased>> {
        let leased = self.lease_ready(queues, max, lease_ms, via, now, tx)?;
        let histogram = delayd_core::metric::Lateness::of(delayd_core::metric::Stage::Leased);
        leased
            .into_iter()
            .map(|(queue, rec)| self.delivery(queue, rec, now, &histogram))
            .collect()
    }

    /// One pipelined call; true when the pipeline stops after it.
    fn run_call(
        &mut self,
        store: &Store,
        call: PipelinedCall,
        now: u64,
        tx: &mut Tx,
    ) -> (Applied, bool) {
        use PipelinedCall as C;
        use PipelinedResult as R;
        let result = match call {
            C::Enqueue {
                queue,
                messages,
                options,
            } => R::Enqueued(self.enqueue_batch(store, &queue, messages, options, now, tx)),
            C::Lease {
                queues,
                max,
                lease_ms,
            } => {
                let request = LeaseRequest {
                    max,
                    wait_ms: 0,
                    lease_ms,
                };
                let leased = request
                    .validate()
                    // Pipelines are beanstalkd connections'.
                    .and_then(|()| self.lease_now(&queues, max, lease_ms, Via::Beanstalk, now, tx));
                let stop = delayd_core::pipeline::stops_after_lease(&leased, max);
                return (Applied::Leased(leased), stop);
            }
            C::Ack { queue, id, lease } => R::Done(self.ack(store, &queue, &id, &lease, now, tx)),
            C::Nack {
                queue,
                id,
                lease,
                nack,
            } => R::Done(self.nack(store, &queue, &id, &lease, nack, now, tx)),
            C::Bury {
                queue,
                id,
                lease,
                priority,
            } => R::Done(self.bury(store, &queue, &id, &lease, priority, now, tx)),
            C::Extend {
                queue,
                id,
                lease,
                lease_ms,
            } => R::Extended(
                check_lease_ms(lease_ms)
                    .and_then(|()| self.extend(store, &queue, &id, &lease, lease_ms, now, tx)),
            ),
        };
        (Applied::Result(result), false)
    }
}

/// A pipelined call's outcome under the lock: a lease's payloads are read
/// after it is released.
enum Applied {
    Result(PipelinedResult),
    Leased(BrokerResult<Vec<Leased>>),
}

impl Applied {
    fn finish(self, store: &Store) -> PipelinedResult {
        match self {
            Applied::Result(result) => result,
            Applied::Leased(leased) => {
                PipelinedResult::Leased(leased.and_then(|leased| fill(store, leased)))
            }
        }
    }
}

/// Every result an error: what each call would have answered on its own
/// when the store refuses writes or the group's fsync failed.
fn all_failed(results: &mut [PipelinedResult], error: &BrokerError) {
    for result in results {
        *result = match result {
            PipelinedResult::Enqueued(_) => PipelinedResult::Enqueued(Err(error.clone())),
            PipelinedResult::Leased(_) => PipelinedResult::Leased(Err(error.clone())),
            PipelinedResult::Done(_) => PipelinedResult::Done(Err(error.clone())),
            PipelinedResult::Extended(_) => PipelinedResult::Extended(Err(error.clone())),
        };
    }
}

/// What a pipeline's applied calls wait for: the commit of their group
/// (a ticket, with the open group's size for backpressure), or the error
/// that refused them.
type Commit = Result<(u64, usize), BrokerError>;

impl Inner {
    pub async fn pipeline(
        &self,
        calls: &mut std::collections::VecDeque<PipelinedCall>,
    ) -> Vec<PipelinedResult> {
        let (mut results, commit) = self.apply_pipeline(calls);
        let failed = match commit {
            Ok((ticket, backlog)) => self.wait_for(ticket, backlog).await.err(),
            Err(error) => Some(error),
        };
        if let Some(error) = failed {
            all_failed(&mut results, &error);
        }
        results
    }

    /// `Broker::pipeline_applied`: the calls applied, and the wait for
    /// their commit (nothing to wait for when none of them needs it).
    pub fn pipeline_applied(
        self: &Arc<Self>,
        calls: &mut std::collections::VecDeque<PipelinedCall>,
    ) -> (Vec<PipelinedResult>, Option<Settling>) {
        let (mut results, commit) = self.apply_pipeline(calls);
        match commit {
            // No call needs a commit and no backpressure applies: what
            // `wait_for` would answer at once.
            Ok((0, backlog)) if backlog <= MAX_PENDING_OPS => (results, None),
            Ok((ticket, backlog)) => {
                let inner = Arc::clone(self);
                let settling: Settling =
                    Box::pin(async move { inner.wait_for(ticket, backlog).await });
                (results, Some(settling))
            }
            Err(error) => {
                all_failed(&mut results, &error);
                (results, None)
            }
        }
    }

    /// Applies `calls` under one state lock hold: their results, and the
    /// commit the caller must wait for before it answers.
    fn apply_pipeline(
        &self,
        calls: &mut std::collections::VecDeque<PipelinedCall>,
    ) -> (Vec<PipelinedResult>, Commit) {
        let mut applied = Vec::with_capacity(calls.len());
        let mut refused = self.check_writable().err();
        // Sampled once, outside the state lock (a stale sample is a statvfs).
        let full = self.disk.check_add().err();
        let mut ticket = 0;
        let backlog = {
            let mut state = self.lock_state(Site::Pipeline);
            let now = self.clock.now_ms();
            if refused.is_none() {
                refused = self.catch_up(&mut state, now).err();
            }
            while let Some(call) = calls.pop_front() {
                if refused.is_some() {
                    // Shapes only: replaced by the error below.
                    let is_lease = matches!(call, PipelinedCall::Lease { .. });
                    applied.push(Applied::Result(placeholder(&call)));
                    if is_lease {
                        break;
                    }
                    continue;
                }
                // Puts add data: refused below the disk reserve, while the
                // pipeline's deletes and other calls go on.
                if let (PipelinedCall::Enqueue { .. }, Some(full)) = (&call, &full) {
                    applied.push(Applied::Result(PipelinedResult::Enqueued(
                        Err(full.clone()),
                    )));
                    continue;
                }
                let mut tx = Tx::default();
                let is_lease = matches!(call, PipelinedCall::Lease { .. });
                let (result, stop) = state.run_call(&self.store, call, now, &mut tx);
                // A lease waits for no fsync of its own (see `lease.rs`).
                let waits = !is_lease || tx.reads_undurable;
                // Each call joins the group on its own, so lease calls
                // waiting elsewhere are served between calls, as they
                // would be between separate calls.
                let joined = self.absorb_locked(&mut state, tx, now);
                if waits {
                    ticket = ticket.max(joined);
                }
                applied.push(result);
                if stop {
                    break;
                }
            }
            state.groups.backlog()
        };
        let results = applied
            .into_iter()
            .map(|applied| applied.finish(&self.store))
            .collect();
        match refused {
            Some(error) => (results, Err(error)),
            None => (results, Ok((ticket, backlog))),
        }
    }
}

fn placeholder(call: &PipelinedCall) -> PipelinedResult {
    match call {
        PipelinedCall::Enqueue { .. } => PipelinedResult::Enqueued(Ok(Vec::new())),
        PipelinedCall::Lease { .. } => PipelinedResult::Leased(Ok(Vec::new())),
        PipelinedCall::Extend { .. } => PipelinedResult::Extended(Ok(0)),
        _ => PipelinedResult::Done(Ok(())),
    }
}
