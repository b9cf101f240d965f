//! delayd's `RedisBroker`: the `Broker` trait on Redis or Redis Cluster.
//!
//! Every state transition is one Redis function call (`FCALL`, library in
//! `lua/*.lua`) on the keys of one queue shard, which share a hash tag, so it is atomic on a single Redis
//! and on one Cluster slot. Any number of stateless nodes may share one
//! deployment; docs/redis.md describes keys, durability and memory.
//!
//! # Layout
//! - [`config`]: [`RedisConfig`] and [`RedisBrokerError`] (connect errors).
//! - `broker`: [`RedisBroker`], its per-node state and the plumbing of every
//!   call (run a script on a shard, hand out seqs, publish events).
//! - `queues`, `messages`, `consume`: the operations of the `Broker` trait,
//!   grouped as in the trait.
//! - `scripts`: the Lua function library (`lua/common.lua` + one body per
//!   function), its version and loading.
//! - `batch`, `batched`: per-shard lanes that let this node's concurrent
//!   acks and lease calls share one function call; `ack_many`.
//! - `pipeline`: `Broker::pipeline` as runs of batched calls.
//! - `schedules`, `fire`: recurring schedules: the calls (records and
//!   their compare-and-set), and firing due cursors (core's `fire_step`,
//!   carried out by a compare-and-write function call).
//! - `flow`: flow control's calls (deferral, key info); the gate itself
//!   runs in the lease function (`lua/flow.lua`, docs/redis.md "Flow
//!   control").
//! - `record`: decoding script replies into core types; `history`: a
//!   message's stored events (docs/redis.md, "History").
//! - `keys`: key names, hash tags and the shard of a message id.
//! - `wake`: node-local wake-ups: waiting lease calls and per-shard timers.
//! - `tasks`: the timer, sweep and pub/sub background tasks.
//! - `conn`: one connection type over single Redis and Cluster.

//! # Example
//!
//! Several stateless nodes connect to one Redis (or, with several seed
//! URLs, a Redis Cluster); each is a complete `Broker` over the shared
//! state (needs a running Redis >= 7.0, so not run here):
//!
//! ```no_run
//! use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName, Schedule};
//! use delayd_redis::{RedisBroker, RedisConfig};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = RedisConfig::new("redis://127.0.0.1:6379");
//! config.shards = 4; // the same on every node of the deployment
//! let broker = RedisBroker::connect(config).await?;
//! let queue = QueueName::new("orders")?;
//! let request = EnqueueRequest {
//!     schedule: Schedule::Delay(30 * 60 * 1000),
//!     payload: b"close unpaid order 42".to_vec(),
//!     ..EnqueueRequest::default()
//! };
//! broker.enqueue(&queue, vec![request], EnqueueOptions::default()).await?;
//! # Ok(())
//! # }
//! ```

mod batch;
mod batched;
mod broker;
pub mod config;
mod conn;
mod consume;
mod fire;
mod flow;
mod history;
mod keys;
mod messages;
mod pipeline;
mod queues;
mod record;
mod schedules;
mod scripts;
mod tasks;
mod wake;

use async_trait::async_trait;
use delayd_core::{
    Broker, BrokerError, BrokerResult, Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest,
    History, LeaseId, LeaseRequest, ListQuery, Message, MessageId, Nack, PipelinedCall,
    PipelinedResult, QueueConfigPatch, QueueInfo, QueueName, Redrive, Reschedule,
    ScheduleDefinition, ScheduleId, ScheduleRecord, Upsert, Via,
};
use std::collections::VecDeque;

pub use broker::RedisBroker;
pub use config::{RedisBrokerError, RedisConfig, ReplicaWait};

/// A client of the one Redis at `url`, for tools that read Redis outside
/// the broker (`delayd import redis-zset`): a `rediss://` URL gets the
/// crypto provider and the system trust store the broker's own
/// connections use.
pub fn open_client(url: &str) -> redis::RedisResult<redis::Client> {
    conn::client(url, None)
}

#[async_trait]
impl Broker for RedisBroker {
    async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        self.inner.put_queue(queue, patch).await
    }

    async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        self.inner.get_queue(queue).await
    }

    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        self.inner.list_queues().await
    }

    async fn delete_queue(&self, queue: &QueueName) -> BrokerResult<()> {
        self.inner.delete_queue(queue).await
    }

    async fn pause(&self, queue: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        self.inner.pause(queue, until).await
    }

    async fn resume(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        self.inner.resume(queue).await
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        self.inner.enqueue(queue, messages, options).await
    }

    async fn get(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        self.inner.get(queue, id).await
    }

    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        self.inner.get_by_seq(seq).await
    }

    async fn cancel(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<()> {
        self.inner.cancel(queue, id).await
    }

    async fn reschedule(
        &self,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
    ) -> BrokerResult<Message> {
        self.inner.reschedule(queue, id, change).await
    }

    async fn list(&self, queue: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        self.inner.list(queue, query).await
    }

    async fn lease_via(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        self.inner.lease(queues, request, via).await
    }

    async fn events(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History> {
        self.inner.events(queue, id).await
    }

    async fn lease_message(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<Delivery> {
        self.inner.lease_message(queue, id, lease_ms).await
    }

    async fn ack(&self, queue: &QueueName, id: &MessageId, lease: &LeaseId) -> BrokerResult<()> {
        self.inner.ack(queue, id, lease).await
    }

    async fn ack_many(
        &self,
        queue: &QueueName,
        acks: Vec<(MessageId, LeaseId)>,
    ) -> BrokerResult<Vec<BrokerResult<()>>> {
        self.inner.ack_many(queue, acks).await
    }

    async fn pipeline(&self, calls: &mut VecDeque<PipelinedCall>) -> Vec<PipelinedResult> {
        self.run_pipeline(calls).await
    }

    async fn nack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()> {
        self.inner.nack(queue, id, lease, nack).await
    }

    async fn bury(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        priority: Option<u32>,
    ) -> BrokerResult<()> {
        self.inner.bury(queue, id, lease, priority).await
    }

    async fn extend(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<u64> {
        self.inner.extend(queue, id, lease, lease_ms).await
    }

    async fn redrive(&self, queue: &QueueName, which: Redrive) -> BrokerResult<u64> {
        self.inner.redrive(queue, which).await
    }

    async fn put_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        self.inner
            .put_schedule(queue, id, definition, options)
            .await
    }

    async fn get_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        self.inner.get_schedule(queue, id).await
    }

    async fn list_schedules(&self, queue: &QueueName) -> BrokerResult<Vec<ScheduleRecord>> {
        self.inner.list_schedules(queue).await
    }

    async fn delete_schedule(&self, queue: &QueueName, id: &ScheduleId) -> BrokerResult<()> {
        self.inner.delete_schedule(queue, id).await
    }

    async fn set_schedule_paused(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
    ) -> BrokerResult<ScheduleRecord> {
        self.inner.set_schedule_paused(queue, id, paused).await
    }

    async fn trigger_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<EnqueueOutcome> {
        self.inner.trigger_schedule(queue, id).await
    }

    async fn key_info(
        &self,
        queue: &delayd_core::QueueName,
        key: &delayd_core::FlowKey,
    ) -> delayd_core::BrokerResult<delayd_core::KeyInfo> {
        self.inner.key_info(queue, key).await
    }

    async fn ready(&self) -> BrokerResult<()> {
        self.inner.check_open()?;
        let pong: String = self.inner.query(&redis::cmd("PING"), false).await?;
        if pong != "PONG" {
            return Err(BrokerError::unavailable(format!("PING answered {pong}")));
        }
        Ok(())
    }

    async fn shutdown(&self) -> BrokerResult<()> {
        // Every acknowledged call already reached Redis; what is durable is
        // Redis's appendonly/appendfsync setting (docs/redis.md).
        self.inner.close();
        Ok(())
    }
}

/// The name of the Redis function library this build loads
/// (`delayd_<hash of its Lua>`; docs/redis.md, "Function library").
pub fn library_name() -> &'static str {
    &scripts::LIBRARY.name
}

impl RedisBroker {
    /// Runs the Lua port of the flow gate (`lua/flow_eval.lua`) on groups
    /// of 7 arguments: tat, interval (`''`: no rate), burst, slots (`''`:
    /// none), leased, cooling_until, now. Per group it answers the hold's
    /// reason (`''`: admitted), its end, `ready_at` and the TAT after a
    /// take. For the differential test against `delayd_core::flow` only.
    #[doc(hidden)]
    pub async fn flow_eval_lua(&self, args: Vec<String>) -> BrokerResult<Vec<String>> {
        self.inner
            .flow_eval(args.into_iter().map(String::into_bytes).collect())
            .await
    }
}
