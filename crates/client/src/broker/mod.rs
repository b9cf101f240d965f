//! [`HttpBroker`]: the `delayd_core::Broker` trait over the HTTP API, so the
//! conformance suite can hold the whole stack (server, wire, broker) to the
//! same rules as a broker called directly.
//!
//! api.md exposes only part of the trait (listing states other than `dead`
//! goes through the dashboard's listing). The rest (`get_by_seq`,
//! `lease_message`, `bury`, multi-queue leases, timed pauses,
//! `Redrive::Oldest`, per-message `lease_ms`, nack with a priority or that
//! may not kill) answers
//! `InvalidArgument("not available over HTTP: ...")`.
//!
//! Enqueue without auto-create is emulated by checking that the queue
//! exists first; a queue deleted between the check and the enqueue is then
//! created after all. Tests and tools accept that race; a server started
//! with `--no-auto-create` has none.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use delayd_core::{
    Broker, BrokerError, BrokerResult, Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest,
    FlowKey, History, KeyInfo, LeaseId, LeaseRequest, ListQuery, Message, MessageId, MessageState,
    Nack, QueueConfigPatch, QueueInfo, QueueName, Redrive, Reschedule, Schedule,
    ScheduleDefinition, ScheduleId, ScheduleRecord, Upsert, Via,
};

use crate::client::Client;
use crate::wire::{self, AckItem, LeaseOptions};

mod convert;
mod schedules;

use convert::{
    not_available, schedule_fields, to_delivery, to_history, to_key_info, to_message,
    to_new_message, to_outcome, to_put_body, to_queue_info, wire_error, Subject,
};

/// api.md's maximum batch size; bigger enqueues are split.
const MAX_BATCH: usize = 1000;

/// What [`Broker::shutdown`] does for an [`HttpBroker`]; see
/// [`HttpBroker::on_shutdown`].
pub type ShutdownHook =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = BrokerResult<()>> + Send>> + Send + Sync>;

/// A [`Broker`] that forwards every call to a delayd server.
#[derive(Clone)]
pub struct HttpBroker {
    client: Client,
    shutdown: Option<ShutdownHook>,
}

impl fmt::Debug for HttpBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBroker")
            .field("client", &self.client)
            .field("shutdown_hook", &self.shutdown.is_some())
            .finish()
    }
}

impl HttpBroker {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            shutdown: None,
        }
    }

    /// A client cannot stop a server, so [`Broker::shutdown`] does nothing
    /// by default; whoever owns the server (a test running it in-process)
    /// can make it stop the server's broker instead.
    pub fn on_shutdown(mut self, hook: ShutdownHook) -> Self {
        self.shutdown = Some(hook);
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl HttpBroker {
    /// One batch request (at most [`MAX_BATCH`] items) and its results.
    async fn enqueue_chunk(
        &self,
        queue: &QueueName,
        chunk: Vec<EnqueueRequest>,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        let ids: Vec<Option<MessageId>> = chunk.iter().map(|r| r.id.clone()).collect();
        let mut results: Vec<Option<BrokerResult<EnqueueOutcome>>> = Vec::new();
        let mut to_send = Vec::new();
        for request in chunk {
            match to_new_message(request) {
                Ok(message) => {
                    results.push(None);
                    to_send.push(message);
                }
                Err(err) => results.push(Some(Err(err))),
            }
        }
        let mut answers = if to_send.is_empty() {
            Vec::new()
        } else {
            self.client
                .enqueue_batch(queue.as_str(), &to_send)
                .await
                .map_err(|err| Subject::queue(queue).map(err))?
        }
        .into_iter();
        let mut out = Vec::with_capacity(results.len());
        for (slot, id) in results.into_iter().zip(ids) {
            let result = match slot {
                Some(local) => local,
                None => match answers.next() {
                    Some(Ok(done)) => to_outcome(done),
                    Some(Err(detail)) => Err(wire_error(detail, queue, id.as_ref())),
                    None => Err(BrokerError::unavailable("batch answer has too few results")),
                },
            };
            out.push(result);
        }
        Ok(out)
    }
}

#[async_trait]
impl Broker for HttpBroker {
    async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        let put = self
            .client
            .put_queue(queue.as_str(), &to_put_body(patch))
            .await
            .map_err(|err| Subject::queue(queue).map(err))?;
        let upsert = if put.created {
            Upsert::Created
        } else {
            Upsert::Updated
        };
        Ok((upsert, to_queue_info(put.queue)?))
    }

    async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        let view = self.client.get_queue(queue.as_str()).await;
        to_queue_info(view.map_err(|err| Subject::queue(queue).map(err))?)
    }

    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        let queues = self.client.list_queues().await;
        let queues = queues.map_err(|err| Subject::default().map(err))?;
        queues.into_iter().map(to_queue_info).collect()
    }

    async fn delete_queue(&self, queue: &QueueName) -> BrokerResult<()> {
        let done = self.client.delete_queue(queue.as_str()).await;
        done.map_err(|err| Subject::queue(queue).map(err))
    }

    async fn pause(&self, queue: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        if until.is_some() {
            return Err(not_available("timed pause"));
        }
        let view = self.client.pause(queue.as_str()).await;
        to_queue_info(view.map_err(|err| Subject::queue(queue).map(err))?)
    }

    async fn resume(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        let view = self.client.resume(queue.as_str()).await;
        to_queue_info(view.map_err(|err| Subject::queue(queue).map(err))?)
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        if !options.auto_create {
            // The HTTP API's auto-create is a server option; emulate it.
            self.get_queue(queue).await?;
        }
        let mut out = Vec::with_capacity(messages.len());
        let mut rest = messages;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(MAX_BATCH));
            out.extend(self.enqueue_chunk(queue, rest).await?);
            rest = tail;
        }
        Ok(out)
    }

    async fn get(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        let view = self.client.get_message(queue.as_str(), id.as_str()).await;
        to_message(view.map_err(|err| Subject::message(queue, id).map(err))?)
    }

    async fn get_by_seq(&self, _seq: u64) -> BrokerResult<Option<Message>> {
        Err(not_available("get_by_seq"))
    }

    async fn cancel(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<()> {
        let done = self.client.cancel(queue.as_str(), id.as_str()).await;
        done.map_err(|err| Subject::message(queue, id).map(err))
    }

    async fn reschedule(
        &self,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
    ) -> BrokerResult<Message> {
        let (delay_ms, deliver_at) = match change.schedule {
            // "Now" has no field of its own on the wire: a zero delay.
            Some(Schedule::Now) => (Some(0), None),
            Some(schedule) => schedule_fields(schedule),
            None => (None, None),
        };
        let body = wire::Reschedule {
            delay_ms,
            deliver_at,
            priority: change.priority,
        };
        let view = self
            .client
            .reschedule(queue.as_str(), id.as_str(), &body)
            .await;
        to_message(view.map_err(|err| Subject::message(queue, id).map(err))?)
    }

    /// Dead messages through the dead-letter route, the other live states
    /// through the dashboard's listing (same order and paging). Retained
    /// messages are never listed: the server refuses `acked` and
    /// `cancelled`, so those pages are empty here, as in every broker
    /// (the queue must still exist).
    async fn list(&self, queue: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        if query.state.ended() {
            self.get_queue(queue).await?;
            return Ok(Vec::new());
        }
        let after = query.after.as_ref().map(MessageId::as_str);
        let views = match query.state {
            MessageState::Dead => {
                self.client
                    .dead(queue.as_str(), Some(query.limit), after)
                    .await
            }
            state => {
                self.client
                    .list_messages(queue.as_str(), state.as_str(), Some(query.limit), after)
                    .await
            }
        };
        let views = views.map_err(|err| Subject::queue(queue).map(err))?;
        views.into_iter().map(to_message).collect()
    }

    /// Over HTTP every lease is an HTTP lease: the server names it so in
    /// the message's history, whatever `via` says.
    async fn lease_via(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        _via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        let [queue] = queues else {
            return Err(not_available("leasing from several queues at once"));
        };
        let options = LeaseOptions {
            max: request.max,
            wait_ms: request.wait_ms,
            lease_ms: request.lease_ms,
        };
        let leased = self
            .client
            .lease(queue.as_str(), options)
            .await
            .map_err(|err| Subject::queue(queue).map(err))?;
        leased.into_iter().map(|l| to_delivery(queue, l)).collect()
    }

    async fn events(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History> {
        let history = self.client.events(queue.as_str(), id.as_str()).await;
        to_history(history.map_err(|err| Subject::message(queue, id).map(err))?)
    }

    async fn lease_message(
        &self,
        _queue: &QueueName,
        _id: &MessageId,
        _lease_ms: Option<u64>,
    ) -> BrokerResult<Delivery> {
        Err(not_available("leasing one specific message"))
    }

    async fn ack(&self, queue: &QueueName, id: &MessageId, lease: &LeaseId) -> BrokerResult<()> {
        let done = self
            .client
            .ack(queue.as_str(), id.as_str(), lease.as_str())
            .await;
        done.map_err(|err| Subject::lease(queue, id, lease).map(err))
    }

    async fn ack_many(
        &self,
        queue: &QueueName,
        acks: Vec<(MessageId, LeaseId)>,
    ) -> BrokerResult<Vec<BrokerResult<()>>> {
        delayd_core::check_ack_batch(&acks)?;
        let items: Vec<AckItem> = acks
            .iter()
            .map(|(id, lease)| AckItem {
                id: id.to_string(),
                lease_id: lease.to_string(),
            })
            .collect();
        let results = self
            .client
            .ack_many(queue.as_str(), &items)
            .await
            .map_err(|err| Subject::queue(queue).map(err))?;
        Ok(results
            .into_iter()
            .zip(&acks)
            .map(|(result, (id, lease))| {
                result.map_err(|detail| {
                    Subject::lease(queue, id, lease).error_for_code(&detail.code, detail.message)
                })
            })
            .collect())
    }

    async fn nack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()> {
        if nack.priority.is_some() || !nack.may_die {
            return Err(not_available("nack with a priority or without dying"));
        }
        let (queue_name, id_str, lease_str) = (queue.as_str(), id.as_str(), lease.as_str());
        let options = crate::NackOptions {
            delay_ms: nack.delay_ms,
            defer: nack.defer,
            error: nack.error,
        };
        let done = self
            .client
            .nack_with(queue_name, id_str, lease_str, &options)
            .await;
        done.map_err(|err| Subject::lease(queue, id, lease).map(err))
    }

    async fn bury(
        &self,
        _queue: &QueueName,
        _id: &MessageId,
        _lease: &LeaseId,
        _priority: Option<u32>,
    ) -> BrokerResult<()> {
        Err(not_available("bury"))
    }

    async fn extend(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<u64> {
        let done = self
            .client
            .extend(queue.as_str(), id.as_str(), lease.as_str(), lease_ms)
            .await;
        done.map_err(|err| Subject::lease(queue, id, lease).map(err))
    }

    async fn redrive(&self, queue: &QueueName, which: Redrive) -> BrokerResult<u64> {
        let ids: Option<Vec<String>> = match which {
            Redrive::All => None,
            Redrive::Ids(ids) => Some(ids.into_iter().map(String::from).collect()),
            Redrive::Oldest(_) => return Err(not_available("redrive of the n oldest")),
        };
        let done = self.client.redrive(queue.as_str(), ids.as_deref()).await;
        done.map_err(|err| Subject::queue(queue).map(err))
    }

    async fn put_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        schedules::put(&self.client, queue, id, definition, options).await
    }

    async fn get_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        schedules::get(&self.client, queue, id).await
    }

    async fn list_schedules(&self, queue: &QueueName) -> BrokerResult<Vec<ScheduleRecord>> {
        schedules::list(&self.client, queue).await
    }

    async fn delete_schedule(&self, queue: &QueueName, id: &ScheduleId) -> BrokerResult<()> {
        schedules::delete(&self.client, queue, id).await
    }

    async fn set_schedule_paused(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
    ) -> BrokerResult<ScheduleRecord> {
        schedules::set_paused(&self.client, queue, id, paused).await
    }

    async fn trigger_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<EnqueueOutcome> {
        schedules::trigger(&self.client, queue, id).await
    }

    async fn key_info(&self, queue: &QueueName, key: &FlowKey) -> BrokerResult<KeyInfo> {
        let info = self.client.key_info(queue.as_str(), key.as_str()).await;
        to_key_info(info.map_err(|err| Subject::queue(queue).map(err))?)
    }

    async fn ready(&self) -> BrokerResult<()> {
        let done = self.client.readyz().await;
        done.map_err(|err| BrokerError::unavailable(err.to_string()))
    }

    /// Runs the hook set by [`HttpBroker::on_shutdown`], if any. Nothing is
    /// buffered in the client, so there is nothing to flush.
    async fn shutdown(&self) -> BrokerResult<()> {
        match &self.shutdown {
            Some(hook) => hook().await,
            None => Ok(()),
        }
    }
}
