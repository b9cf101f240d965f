//! The `Broker` trait: everything api.md can ask of a backend. The HTTP API,
//! the beanstalkd listener and the push dispatcher talk only to this trait;
//! LocalBroker and RedisBroker implement it, and the conformance suite
//! (`testkit` feature) holds both to the same semantics.

use std::collections::VecDeque;

use async_trait::async_trait;

use crate::error::BrokerResult;
use crate::events::{History, Via};
use crate::flow::{FlowKey, KeyInfo};
use crate::message::{
    Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest, LeaseRequest, ListQuery, Message,
    Nack, Redrive, Reschedule,
};
use crate::model::{LeaseId, MessageId, QueueConfigPatch, QueueInfo, QueueName};
use crate::pipeline::{PipelinedCall, PipelinedResult};
use crate::recurring::{ScheduleDefinition, ScheduleId, ScheduleRecord};

/// What applied calls wait for before their answers may be seen (see
/// [`Broker::pipeline_applied`]).
pub type Settling =
    std::pin::Pin<Box<dyn std::future::Future<Output = BrokerResult<()>> + Send + 'static>>;

/// Most items one batch call takes: enqueue batches, lease `max`, and
/// [`Broker::ack_many`] (api.md: "up to 1000").
pub const MAX_BATCH: usize = 1000;

/// The latest `deliver_at` any broker accepts (about the year 33658, far
/// beyond any `--max-delay`): below 2^53, so JSON numbers and the Redis
/// backend's Lua doubles hold it exactly.
pub const MAX_DELIVER_AT: u64 = 999_999_999_999_999;

/// How many scheduled messages the default [`Broker::due_histogram`] reads
/// at most.
pub const HISTOGRAM_SCAN_LIMIT: usize = 200_000;

/// Scheduled messages counted by due-time bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueHistogram {
    pub counts: Vec<u64>,
    /// True when the broker stopped counting early (the counts are a lower
    /// bound).
    pub truncated: bool,
}

/// Whether `PUT /v1/queues/{queue}` created the queue or updated it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    Created,
    Updated,
}

/// A message broker. Every method is atomic: it either happens whole or
/// returns an error and changes nothing. A method that changes state returns
/// only once the change is as durable as the broker's durability setting
/// promises.
#[async_trait]
pub trait Broker: Send + Sync + 'static {
    // ----- queues -----

    /// Creates the queue (defaults patched by `patch`) or merges `patch`
    /// into its config. The resulting config is validated first.
    async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)>;

    async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo>;

    /// All queues, by name.
    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>>;

    /// Deletes the queue and all its messages; their ids become free and
    /// their leases invalid. Lease calls waiting on it return empty.
    async fn delete_queue(&self, queue: &QueueName) -> BrokerResult<()>;

    /// Stops leasing (and pushing) from the queue, until `until` (epoch ms)
    /// or, when `None`, until [`resume`](Self::resume). Enqueueing and
    /// scheduling go on.
    async fn pause(&self, queue: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo>;

    async fn resume(&self, queue: &QueueName) -> BrokerResult<QueueInfo>;

    // ----- messages -----

    /// Enqueues messages in one durable step (one group commit). Each item
    /// succeeds or fails on its own; results are in input order. An id that
    /// is live in the queue (any state) yields `created: false` and changes
    /// nothing.
    async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>>;

    async fn get(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message>;

    /// A message by its `seq`, in whatever queue (beanstalkd job ids).
    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>>;

    /// Removes a live message in any state; a leased message's lease
    /// becomes invalid. Its id is free again.
    async fn cancel(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<()>;

    /// Changes when (and/or at which priority) a scheduled or ready message
    /// is delivered. Leased and dead messages: `InvalidState`.
    async fn reschedule(
        &self,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
    ) -> BrokerResult<Message>;

    /// Lists messages of one state, in that state's order (see [`ListQuery`]).
    async fn list(&self, queue: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>>;

    // ----- consuming -----

    /// Leases up to `max` ready messages from all of `queues` together, in
    /// (priority, deliver_at, seq) order. Answers at once when any are ready; otherwise waits until
    /// one becomes ready, `wait_ms` passes, or the broker shuts down (then
    /// an empty list). Paused and unknown queues give nothing (unknown
    /// queues are not created). An HTTP lease: [`lease_via`](Self::lease_via)
    /// with [`Via::Http`].
    async fn lease(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
    ) -> BrokerResult<Vec<Delivery>> {
        self.lease_via(queues, request, Via::Http).await
    }

    /// [`lease`](Self::lease) for the frontend `via`, which each delivery's
    /// `leased` event names (api.md, "Message history").
    async fn lease_via(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>>;

    /// The history of a live or retained message (api.md, "Message
    /// history"): its last [`crate::HISTORY_LEN`] events, oldest first, and
    /// how many older ones were dropped. Any other id: `MessageNotFound`.
    async fn events(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History>;

    /// Leases one specific message that is scheduled, ready or dead
    /// (beanstalkd `reserve-job`; its event names [`Via::Beanstalk`]).
    /// Leased: `InvalidState`.
    async fn lease_message(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<Delivery>;

    /// Finishes a delivery: the message is gone and its id free.
    async fn ack(&self, queue: &QueueName, id: &MessageId, lease: &LeaseId) -> BrokerResult<()>;

    /// Finishes many deliveries of one queue in one durable step (one group
    /// commit where the backend can). Each item is acked exactly as
    /// [`ack`](Self::ack) would ack it and fails on its own; results are in
    /// input order. More than [`MAX_BATCH`] items is `InvalidArgument` and
    /// acks nothing. On an unknown queue every item is `MessageNotFound`.
    ///
    /// The default acks one by one; backends override it to commit once.
    async fn ack_many(
        &self,
        queue: &QueueName,
        acks: Vec<(MessageId, LeaseId)>,
    ) -> BrokerResult<Vec<BrokerResult<()>>> {
        check_ack_batch(&acks)?;
        let mut results = Vec::with_capacity(acks.len());
        for (id, lease) in &acks {
            results.push(self.ack(queue, id, lease).await);
        }
        Ok(results)
    }

    /// Fails a delivery: the message is scheduled again (after `delay_ms`,
    /// else the backoff), or dies if it may and is out of attempts.
    async fn nack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()>;

    /// Moves a leased message to `dead` now (beanstalkd `bury`), optionally
    /// with a new priority.
    async fn bury(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        priority: Option<u32>,
    ) -> BrokerResult<()>;

    /// Sets `lease_until = now + lease_ms` (the message's or queue's lease
    /// length when `None`) and returns it.
    async fn extend(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<u64>;

    /// Runs `calls` in order, each exactly as its own method would (a lease
    /// takes what is ready and never waits), and returns their results in
    /// order; when it returns, all of them are as durable as the broker's
    /// durability setting promises. It stops after a lease that leased
    /// fewer than its `max` (called one by one, what follows would run only
    /// after that lease had waited): the results
    /// are then shorter than `calls`, and the calls after it did not run.
    ///
    /// The default calls the methods one by one; a backend that can
    /// overrides it to apply them together and commit once.
    async fn pipeline(&self, calls: &mut VecDeque<PipelinedCall>) -> Vec<PipelinedResult> {
        let mut results = Vec::with_capacity(calls.len());
        while let Some(call) = calls.pop_front() {
            let (result, stop) = crate::pipeline::run_call(self, call).await;
            results.push(result);
            if stop {
                break;
            }
        }
        results
    }

    /// [`pipeline`](Self::pipeline), answered as soon as the calls are
    /// applied: their results, and what those results wait for before a
    /// client may see any of them (the commit that makes them as durable as
    /// `pipeline`'s would be on return); `None` when nothing is left to wait
    /// for. A frontend that pipelines (the beanstalkd listener) executes the
    /// commands that follow meanwhile and writes the answers, in order, once
    /// the wait resolves; when it fails, none of these answers may be sent.
    ///
    /// The default runs `pipeline`, durable on return.
    async fn pipeline_applied(
        &self,
        calls: &mut VecDeque<PipelinedCall>,
    ) -> (Vec<PipelinedResult>, Option<Settling>) {
        (self.pipeline(calls).await, None)
    }

    // ----- flow control -----

    /// A flow key's live messages by state and its cooldown. A key with no
    /// live message answers zeros. Unknown queue: `QueueNotFound`.
    async fn key_info(&self, queue: &QueueName, key: &FlowKey) -> BrokerResult<KeyInfo>;

    // ----- dead letters -----

    /// Moves dead messages back to `ready` with attempts reset; returns how
    /// many moved.
    async fn redrive(&self, queue: &QueueName, which: Redrive) -> BrokerResult<u64>;

    /// Counts of scheduled messages by due time: `buckets` equal buckets
    /// covering `[from, to)` (epoch ms); messages due before `from` count in
    /// the first bucket, those due at or after `to` are not counted. For the
    /// dashboard's "what is scheduled when" chart.
    ///
    /// The default pages through [`list`](Self::list) and stops after
    /// [`HISTOGRAM_SCAN_LIMIT`] messages (the answer says whether it was
    /// truncated); backends with a due-time index should override it.
    async fn due_histogram(
        &self,
        queue: &QueueName,
        from: u64,
        to: u64,
        buckets: u32,
    ) -> BrokerResult<DueHistogram> {
        if buckets == 0 || buckets > 10_000 || to <= from {
            return Err(crate::BrokerError::InvalidArgument(
                "histogram needs 1..=10000 buckets and from < to".into(),
            ));
        }
        let mut histogram = DueHistogram {
            counts: vec![0; buckets as usize],
            truncated: false,
        };
        let width = (to - from).div_ceil(u64::from(buckets)).max(1);
        let mut after = None;
        let mut scanned = 0usize;
        loop {
            let page = self
                .list(
                    queue,
                    ListQuery {
                        state: crate::MessageState::Scheduled,
                        after: after.take(),
                        limit: 1_000,
                    },
                )
                .await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            for message in &page {
                if message.deliver_at >= to {
                    // Scheduled messages are listed by deliver_at: done.
                    return Ok(histogram);
                }
                let index = (message.deliver_at.saturating_sub(from) / width) as usize;
                if let Some(count) = histogram.counts.get_mut(index) {
                    *count += 1;
                }
            }
            scanned += page.len();
            if scanned >= HISTOGRAM_SCAN_LIMIT {
                histogram.truncated = true;
                break;
            }
        }
        Ok(histogram)
    }

    // ----- recurring schedules -----

    /// Creates (`Created`) or replaces (`Updated`) a schedule; creates the
    /// queue like an enqueue does (`options.create_queue`). `definition` has
    /// its defaults filled in and `start_at` resolved by the caller. A
    /// definition equal to the current one changes nothing (same revision).
    /// A changed one takes effect from now; `fires` keeps counting.
    async fn put_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        let _ = (queue, id, definition, options);
        Err(schedules_unsupported())
    }

    /// Unknown queue: `QueueNotFound`; unknown schedule: `ScheduleNotFound`.
    async fn get_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        let _ = (queue, id);
        Err(schedules_unsupported())
    }

    /// The queue's schedules, by id. Unknown queue: `QueueNotFound`.
    async fn list_schedules(&self, queue: &QueueName) -> BrokerResult<Vec<ScheduleRecord>> {
        let _ = queue;
        Err(schedules_unsupported())
    }

    /// Deletes the schedule; messages it already enqueued stay.
    async fn delete_schedule(&self, queue: &QueueName, id: &ScheduleId) -> BrokerResult<()> {
        let _ = (queue, id);
        Err(schedules_unsupported())
    }

    /// Pauses (`paused: true`) or resumes the schedule; returns it. Resuming
    /// does not fire the fire times that passed while paused. Already in
    /// that state: unchanged (same revision).
    async fn set_schedule_paused(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
    ) -> BrokerResult<ScheduleRecord> {
        let _ = (queue, id, paused);
        Err(schedules_unsupported())
    }

    /// Enqueues one message now from the template
    /// ([`ScheduleRecord::trigger_request`]); not a fire.
    async fn trigger_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<EnqueueOutcome> {
        let _ = (queue, id);
        Err(schedules_unsupported())
    }

    // ----- lifecycle -----

    /// Whether the store can take writes now (`/readyz`).
    async fn ready(&self) -> BrokerResult<()>;

    /// Stops the broker: waiting lease calls return empty lists, everything
    /// acknowledged is made durable, and later calls fail `Unavailable`.
    async fn shutdown(&self) -> BrokerResult<()>;
}

/// The argument rule of [`Broker::ack_many`]: at most [`MAX_BATCH`] items.
pub fn check_ack_batch(acks: &[(MessageId, LeaseId)]) -> BrokerResult<()> {
    if acks.len() > MAX_BATCH {
        return Err(crate::BrokerError::InvalidArgument(format!(
            "at most {MAX_BATCH} acks per request, got {}",
            acks.len()
        )));
    }
    Ok(())
}

/// The argument rule of a message's due time, in every broker (enqueue
/// and reschedule): at most [`MAX_DELIVER_AT`]. Returns `deliver_at`.
pub fn check_deliver_at(deliver_at: u64) -> BrokerResult<u64> {
    if deliver_at > MAX_DELIVER_AT {
        return Err(crate::BrokerError::InvalidArgument(format!(
            "deliver_at {deliver_at} is too far in the future (at most {MAX_DELIVER_AT})"
        )));
    }
    Ok(deliver_at)
}

fn schedules_unsupported() -> crate::BrokerError {
    crate::BrokerError::unavailable("this backend does not support recurring schedules")
}
