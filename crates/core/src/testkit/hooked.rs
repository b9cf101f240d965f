//! [`Hooked`]: a broker that runs a test's hook before each call and then
//! hands the call to an inner broker, so a test can hold a call, announce
//! it or make it panic without writing out every method of the trait.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;

use crate::broker::{Broker, Upsert};
use crate::error::BrokerResult;
use crate::events::{History, Via};
use crate::message::{
    Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest, LeaseRequest, ListQuery, Message,
    Nack, Redrive, Reschedule,
};
use crate::model::{LeaseId, MessageId, QueueConfigPatch, QueueInfo, QueueName};

/// What a hook returns: awaited before the call goes on.
pub type HookFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The hook: given the name of the trait method called (`"enqueue"`,
/// `"lease"`, ...), what to do first.
pub type Hook = Box<dyn Fn(&'static str) -> HookFuture + Send + Sync>;

/// `inner` with `hook` run before each of the trait's required methods
/// (the provided ones, such as `pipeline` or the schedule calls, keep the
/// trait's default, which goes through the required ones).
pub struct Hooked<B> {
    inner: B,
    hook: Hook,
}

impl<B: Broker> Hooked<B> {
    pub fn new(inner: B, hook: Hook) -> Self {
        Self { inner, hook }
    }
}

/// A hook that does nothing (for calls a test does not care about).
pub fn no_hook() -> HookFuture {
    Box::pin(async {})
}

#[async_trait]
impl<B: Broker> Broker for Hooked<B> {
    async fn put_queue(
        &self,
        q: &QueueName,
        p: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        (self.hook)("put_queue").await;
        self.inner.put_queue(q, p).await
    }
    async fn get_queue(&self, q: &QueueName) -> BrokerResult<QueueInfo> {
        (self.hook)("get_queue").await;
        self.inner.get_queue(q).await
    }
    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        (self.hook)("list_queues").await;
        self.inner.list_queues().await
    }
    async fn delete_queue(&self, q: &QueueName) -> BrokerResult<()> {
        (self.hook)("delete_queue").await;
        self.inner.delete_queue(q).await
    }
    async fn pause(&self, q: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        (self.hook)("pause").await;
        self.inner.pause(q, until).await
    }
    async fn resume(&self, q: &QueueName) -> BrokerResult<QueueInfo> {
        (self.hook)("resume").await;
        self.inner.resume(q).await
    }
    async fn enqueue(
        &self,
        q: &QueueName,
        m: Vec<EnqueueRequest>,
        o: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        (self.hook)("enqueue").await;
        self.inner.enqueue(q, m, o).await
    }
    async fn get(&self, q: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        (self.hook)("get").await;
        self.inner.get(q, id).await
    }
    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        (self.hook)("get_by_seq").await;
        self.inner.get_by_seq(seq).await
    }
    async fn cancel(&self, q: &QueueName, id: &MessageId) -> BrokerResult<()> {
        (self.hook)("cancel").await;
        self.inner.cancel(q, id).await
    }
    async fn reschedule(
        &self,
        q: &QueueName,
        id: &MessageId,
        c: Reschedule,
    ) -> BrokerResult<Message> {
        (self.hook)("reschedule").await;
        self.inner.reschedule(q, id, c).await
    }
    async fn list(&self, q: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        (self.hook)("list").await;
        self.inner.list(q, query).await
    }
    async fn lease_via(
        &self,
        qs: &[QueueName],
        r: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        (self.hook)("lease").await;
        self.inner.lease_via(qs, r, via).await
    }
    async fn events(&self, q: &QueueName, id: &MessageId) -> BrokerResult<History> {
        (self.hook)("events").await;
        self.inner.events(q, id).await
    }
    async fn lease_message(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: Option<u64>,
    ) -> BrokerResult<Delivery> {
        (self.hook)("lease_message").await;
        self.inner.lease_message(q, id, l).await
    }
    async fn ack(&self, q: &QueueName, id: &MessageId, l: &LeaseId) -> BrokerResult<()> {
        (self.hook)("ack").await;
        self.inner.ack(q, id, l).await
    }
    async fn nack(&self, q: &QueueName, id: &MessageId, l: &LeaseId, n: Nack) -> BrokerResult<()> {
        (self.hook)("nack").await;
        self.inner.nack(q, id, l, n).await
    }
    async fn bury(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: &LeaseId,
        p: Option<u32>,
    ) -> BrokerResult<()> {
        (self.hook)("bury").await;
        self.inner.bury(q, id, l, p).await
    }
    async fn extend(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: &LeaseId,
        ms: Option<u64>,
    ) -> BrokerResult<u64> {
        (self.hook)("extend").await;
        self.inner.extend(q, id, l, ms).await
    }
    async fn redrive(&self, q: &QueueName, w: Redrive) -> BrokerResult<u64> {
        (self.hook)("redrive").await;
        self.inner.redrive(q, w).await
    }
    async fn key_info(&self, q: &QueueName, k: &crate::FlowKey) -> BrokerResult<crate::KeyInfo> {
        (self.hook)("key_info").await;
        self.inner.key_info(q, k).await
    }
    async fn ready(&self) -> BrokerResult<()> {
        (self.hook)("ready").await;
        self.inner.ready().await
    }
    async fn shutdown(&self) -> BrokerResult<()> {
        (self.hook)("shutdown").await;
        self.inner.shutdown().await
    }
}
