//! `impl Broker for LocalBroker`: argument checks and the mapping of each
//! call onto a state transition run through [`crate::broker::Inner::write`].

use async_trait::async_trait;
use delayd_core::{
    check_ack_batch, Broker, BrokerError, BrokerResult, Delivery, EnqueueOptions, EnqueueOutcome,
    EnqueueRequest, History, LeaseId, LeaseRequest, ListQuery, Message, MessageId, MessageState,
    Nack, PipelinedCall, PipelinedResult, QueueConfigPatch, QueueInfo, QueueName, Redrive,
    Reschedule, ScheduleDefinition, ScheduleId, ScheduleRecord, Settling, Upsert, Via,
};

use crate::broker::LocalBroker;
use crate::messages::store_err;

#[async_trait]
impl Broker for LocalBroker {
    async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        self.inner
            .write(|state, _, now, tx| {
                let current = state.queues.get(queue).map(|q| q.config().clone());
                let upsert = if current.is_some() {
                    Upsert::Updated
                } else {
                    Upsert::Created
                };
                let config = patch.resolve(current.as_ref())?;
                let flow_changed = current.as_ref().is_some_and(|c| c.flow != config.flow);
                match state.queues.contains_key(queue) {
                    true => state.queue_mut(queue, tx)?.set_config(config),
                    false => state.create_queue(queue, config, tx),
                }
                if flow_changed {
                    // Changed limits apply to messages already waiting.
                    state.rebuild_flow(queue, now, tx);
                }
                Ok((upsert, state.queue(queue)?.info(queue, now)))
            })
            .await
    }

    async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        self.inner
            .read(|state, _, now| Ok(state.queue(queue)?.info(queue, now)))
    }

    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        self.inner
            .read(|state, _, now| Ok(state.queues.iter().map(|(n, q)| q.info(n, now)).collect()))
    }

    async fn delete_queue(&self, queue: &QueueName) -> BrokerResult<()> {
        self.inner
            .write(|state, store, _, tx| {
                state.queue(queue)?;
                // The prefix scan must see the open group's messages.
                state.flush_pending(store).map_err(store_err)?;
                state.delete_queue_schedules(store, queue, tx)?;
                state.delete_retained(store, queue, tx)?;
                for key in store.queue_message_keys(queue).map_err(store_err)? {
                    if let Some(rec) = store.message(&key).map_err(store_err)? {
                        state.unlink(queue, &rec.id);
                        state.remove(queue, &rec, tx)?;
                    }
                }
                state.drop_queue(queue, tx)
            })
            .await
    }

    async fn pause(&self, queue: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        self.inner
            .write(|state, _, now, tx| {
                state
                    .queue_mut(queue, tx)?
                    .set_paused_until(Some(until.unwrap_or(u64::MAX)));
                Ok(state.queue(queue)?.info(queue, now))
            })
            .await
    }

    async fn resume(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        self.inner
            .write(|state, _, now, tx| {
                state.queue_mut(queue, tx)?.set_paused_until(None);
                tx.note_ready(queue);
                Ok(state.queue(queue)?.info(queue, now))
            })
            .await
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        // Adds data: refused below the disk reserve (removals are not).
        self.inner.disk.check_add()?;
        self.inner
            .write(|state, store, now, tx| {
                state.enqueue_batch(store, queue, messages, options, now, tx)
            })
            .await
    }

    async fn get(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        self.inner.read(|state, store, now| {
            if let Some(rec) = state.lookup(store, queue, id)? {
                return state.to_message(store, queue, rec);
            }
            match state.lookup_retained(store, queue, id, now)? {
                Some(retained) => Ok(crate::retain::shown(queue, retained)),
                None => Err(BrokerError::MessageNotFound {
                    queue: queue.clone(),
                    id: id.clone(),
                }),
            }
        })
    }

    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        self.inner
            .read(|state, store, _| state.get_by_seq(store, seq))
    }

    async fn cancel(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<()> {
        self.inner
            .write(|state, store, now, tx| state.cancel(store, queue, id, now, tx))
            .await
    }

    async fn reschedule(
        &self,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
    ) -> BrokerResult<Message> {
        let rec = self
            .inner
            .write(|state, store, now, tx| state.reschedule(store, queue, id, change, now, tx))
            .await?;
        self.inner
            .read(|state, store, _| state.to_message(store, queue, rec))
    }

    async fn list(&self, queue: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        self.inner
            .read_scan(|state, store, _| state.list(store, queue, query))
    }

    async fn lease_via(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        request.validate()?;
        self.inner.lease(queues, request, via).await
    }

    async fn events(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History> {
        self.inner
            .read(|state, store, now| state.history(store, queue, id, now))
    }

    async fn lease_message(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<Delivery> {
        delayd_core::check_lease_ms(lease_ms)?;
        let leased = self
            .inner
            .write(|state, store, now, tx| {
                let old = state.lookup_existing(store, queue, id, tx)?;
                if old.state == MessageState::Leased {
                    return Err(BrokerError::InvalidState {
                        id: id.clone(),
                        state: old.state,
                        reason: "the message is already leased",
                    });
                }
                // `reserve-job`: beanstalkd's.
                let rec = state.lease_record(queue, old, lease_ms, Via::Beanstalk, now, tx)?;
                let leased = delayd_core::metric::Lateness::of(delayd_core::metric::Stage::Leased);
                state.delivery(queue.clone(), rec, now, &leased)
            })
            .await?;
        crate::consume::fill(&self.inner.store, vec![leased])?
            .pop()
            .ok_or_else(|| BrokerError::MessageNotFound {
                queue: queue.clone(),
                id: id.clone(),
            })
    }

    async fn ack(&self, queue: &QueueName, id: &MessageId, lease: &LeaseId) -> BrokerResult<()> {
        self.inner
            .write(|state, store, now, tx| state.ack(store, queue, id, lease, now, tx))
            .await
    }

    async fn ack_many(
        &self,
        queue: &QueueName,
        acks: Vec<(MessageId, LeaseId)>,
    ) -> BrokerResult<Vec<BrokerResult<()>>> {
        check_ack_batch(&acks)?;
        self.inner
            .write(|state, store, now, tx| {
                Ok(acks
                    .iter()
                    .map(|(id, lease)| state.ack(store, queue, id, lease, now, tx))
                    .collect())
            })
            .await
    }

    async fn pipeline(
        &self,
        calls: &mut std::collections::VecDeque<PipelinedCall>,
    ) -> Vec<PipelinedResult> {
        self.inner.pipeline(calls).await
    }

    async fn pipeline_applied(
        &self,
        calls: &mut std::collections::VecDeque<PipelinedCall>,
    ) -> (Vec<PipelinedResult>, Option<Settling>) {
        self.inner.pipeline_applied(calls)
    }

    async fn nack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()> {
        self.inner
            .write(|state, store, now, tx| state.nack(store, queue, id, lease, nack, now, tx))
            .await
    }

    async fn bury(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        priority: Option<u32>,
    ) -> BrokerResult<()> {
        self.inner
            .write(|state, store, now, tx| state.bury(store, queue, id, lease, priority, now, tx))
            .await
    }

    async fn extend(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<u64> {
        delayd_core::check_lease_ms(lease_ms)?;
        self.inner
            .write(|state, store, now, tx| state.extend(store, queue, id, lease, lease_ms, now, tx))
            .await
    }

    async fn redrive(&self, queue: &QueueName, which: Redrive) -> BrokerResult<u64> {
        self.inner
            .write(|state, _, now, tx| state.redrive(queue, which, now, tx))
            .await
    }

    async fn put_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        // Adds data, as an enqueue does.
        self.inner.disk.check_add()?;
        self.inner
            .write(|state, store, now, tx| {
                state.put_schedule(store, queue, id, definition, options, now, tx)
            })
            .await
    }

    async fn get_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        self.inner
            .read(|state, store, now| Ok(state.existing_schedule(store, queue, id)?.settled(now)))
    }

    async fn list_schedules(&self, queue: &QueueName) -> BrokerResult<Vec<ScheduleRecord>> {
        self.inner.read_scan(|state, store, now| {
            let stored = state.list_schedules(store, queue)?;
            Ok(stored.iter().map(|record| record.settled(now)).collect())
        })
    }

    async fn delete_schedule(&self, queue: &QueueName, id: &ScheduleId) -> BrokerResult<()> {
        self.inner
            .write(|state, store, now, tx| state.delete_schedule(store, queue, id, now, tx))
            .await
    }

    async fn set_schedule_paused(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
    ) -> BrokerResult<ScheduleRecord> {
        self.inner
            .write(|state, store, now, tx| {
                state.set_schedule_paused(store, queue, id, paused, now, tx)
            })
            .await
    }

    async fn trigger_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<EnqueueOutcome> {
        self.inner.disk.check_add()?;
        self.inner
            .write(|state, store, now, tx| state.trigger_schedule(store, queue, id, now, tx))
            .await
    }

    async fn key_info(
        &self,
        queue: &delayd_core::QueueName,
        key: &delayd_core::FlowKey,
    ) -> delayd_core::BrokerResult<delayd_core::KeyInfo> {
        self.inner.read_scan(|state, store, now| {
            let q = state.queue(queue)?;
            // Messages only on disk (beyond the horizon) are read there.
            let mut on_disk = Vec::new();
            if !q.all_in_memory() {
                for k in store.queue_message_keys(queue).map_err(store_err)? {
                    if let Some(rec) = store.message(&k).map_err(store_err)? {
                        if rec.key.as_ref() == Some(key) && !q.messages.contains_key(&rec.id) {
                            on_disk.push(rec);
                        }
                    }
                }
            }
            state.key_info(queue, key, &on_disk, now)
        })
    }

    async fn ready(&self) -> BrokerResult<()> {
        self.inner.check_writable()
    }

    async fn shutdown(&self) -> BrokerResult<()> {
        if self.inner.is_stopping() {
            return Ok(());
        }
        self.stop_background().await;
        Ok(())
    }
}
