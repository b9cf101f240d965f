//! A broker that does as little as possible (one queue, a FIFO of ready
//! messages, no time, no durability), so the throughput benchmark can tell
//! the dispatcher's own cost from the broker's. Calls a push benchmark does
//! not make fail `Unavailable`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use delayd_core::{
    Broker, BrokerError, BrokerResult, Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest,
    LeaseId, LeaseRequest, ListQuery, Message, MessageId, Nack, QueueConfig, QueueConfigPatch,
    QueueInfo, QueueName, QueueStats, Redrive, Reschedule, Upsert,
};
use tokio::sync::Notify;

#[derive(Default)]
struct State {
    queues: HashMap<QueueName, QueueConfig>,
    ready: VecDeque<Delivery>,
    leased: HashMap<MessageId, Delivery>,
    next_seq: u64,
}

#[derive(Default)]
pub struct NullBroker {
    state: Mutex<State>,
    ready: Notify,
    /// Lease calls that returned messages (the dispatcher's batching).
    pub lease_batches: std::sync::atomic::AtomicU64,
}

fn unsupported<T>() -> BrokerResult<T> {
    Err(BrokerError::unavailable(
        "not supported by the benchmark broker",
    ))
}

impl NullBroker {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn info(state: &State, name: &QueueName) -> BrokerResult<QueueInfo> {
        let config = state
            .queues
            .get(name)
            .cloned()
            .ok_or_else(|| BrokerError::QueueNotFound(name.clone()))?;
        let stats = QueueStats {
            ready: state.ready.len() as u64,
            leased: state.leased.len() as u64,
            ..QueueStats::default()
        };
        Ok(QueueInfo {
            name: name.clone(),
            config,
            paused: false,
            paused_until: None,
            stats,
        })
    }
}

#[async_trait]
impl Broker for NullBroker {
    async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        let mut state = self.lock();
        let config = patch.apply(&state.queues.get(queue).cloned().unwrap_or_default());
        state.queues.insert(queue.clone(), config);
        Ok((Upsert::Created, Self::info(&state, queue)?))
    }

    async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        Self::info(&self.lock(), queue)
    }

    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        let state = self.lock();
        state
            .queues
            .keys()
            .map(|name| Self::info(&state, name))
            .collect()
    }

    async fn delete_queue(&self, _: &QueueName) -> BrokerResult<()> {
        unsupported()
    }

    async fn pause(&self, _: &QueueName, _: Option<u64>) -> BrokerResult<QueueInfo> {
        unsupported()
    }

    async fn resume(&self, _: &QueueName) -> BrokerResult<QueueInfo> {
        unsupported()
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        _: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        let mut state = self.lock();
        let mut outcomes = Vec::with_capacity(messages.len());
        for request in messages {
            state.next_seq += 1;
            let seq = state.next_seq;
            let id = MessageId::new(format!("m{seq}"))?;
            state.ready.push_back(Delivery {
                key: None,
                queue: queue.clone(),
                id: id.clone(),
                seq,
                lease_id: LeaseId(String::new()),
                lease_until: 0,
                attempt: 0,
                deliver_at: 0,
                priority: 0,
                headers: request.headers,
                payload: request.payload,
            });
            outcomes.push(Ok(EnqueueOutcome::created(id, seq, 0)));
        }
        self.ready.notify_waiters();
        Ok(outcomes)
    }

    async fn get(&self, _: &QueueName, _: &MessageId) -> BrokerResult<Message> {
        unsupported()
    }

    async fn get_by_seq(&self, _: u64) -> BrokerResult<Option<Message>> {
        unsupported()
    }

    async fn cancel(&self, _: &QueueName, _: &MessageId) -> BrokerResult<()> {
        unsupported()
    }

    async fn reschedule(
        &self,
        _: &QueueName,
        _: &MessageId,
        _: Reschedule,
    ) -> BrokerResult<Message> {
        unsupported()
    }

    async fn list(&self, _: &QueueName, _: ListQuery) -> BrokerResult<Vec<Message>> {
        unsupported()
    }

    async fn events(&self, _: &QueueName, _: &MessageId) -> BrokerResult<delayd_core::History> {
        unsupported()
    }

    async fn lease_via(
        &self,
        _: &[QueueName],
        request: LeaseRequest,
        _: delayd_core::Via,
    ) -> BrokerResult<Vec<Delivery>> {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                let n = state.ready.len().min(request.max as usize);
                if n > 0 {
                    self.lease_batches
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut out = Vec::with_capacity(n);
                    for mut d in state.ready.drain(..n).collect::<Vec<_>>() {
                        d.attempt += 1;
                        d.lease_id = LeaseId(format!("{}-{}", d.seq, d.attempt));
                        state.leased.insert(d.id.clone(), d.clone());
                        out.push(d);
                    }
                    return Ok(out);
                }
            }
            if tokio::time::timeout(Duration::from_millis(request.wait_ms), notified)
                .await
                .is_err()
            {
                return Ok(Vec::new());
            }
        }
    }

    async fn lease_message(
        &self,
        _: &QueueName,
        _: &MessageId,
        _: Option<u64>,
    ) -> BrokerResult<Delivery> {
        unsupported()
    }

    async fn ack(&self, _: &QueueName, id: &MessageId, _: &LeaseId) -> BrokerResult<()> {
        self.lock().leased.remove(id);
        Ok(())
    }

    async fn nack(&self, _: &QueueName, id: &MessageId, _: &LeaseId, _: Nack) -> BrokerResult<()> {
        let mut state = self.lock();
        if let Some(d) = state.leased.remove(id) {
            state.ready.push_back(d);
        }
        self.ready.notify_waiters();
        Ok(())
    }

    async fn bury(
        &self,
        _: &QueueName,
        _: &MessageId,
        _: &LeaseId,
        _: Option<u32>,
    ) -> BrokerResult<()> {
        unsupported()
    }

    async fn extend(
        &self,
        _: &QueueName,
        _: &MessageId,
        _: &LeaseId,
        _: Option<u64>,
    ) -> BrokerResult<u64> {
        unsupported()
    }

    async fn redrive(&self, _: &QueueName, _: Redrive) -> BrokerResult<u64> {
        unsupported()
    }

    async fn key_info(
        &self,
        _queue: &QueueName,
        key: &delayd_core::FlowKey,
    ) -> BrokerResult<delayd_core::KeyInfo> {
        Ok(delayd_core::KeyInfo::empty(key.clone()))
    }

    async fn ready(&self) -> BrokerResult<()> {
        Ok(())
    }

    async fn shutdown(&self) -> BrokerResult<()> {
        Ok(())
    }
}
