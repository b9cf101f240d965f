//! Shutdown: waiting lease calls return empty lists promptly, in-flight
//! requests finish first, and the server returns Ok within 10 seconds.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use delayd_core::testkit::ModelBroker;
use delayd_core::*;
use delayd_server::ServerOptions;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

/// A ModelBroker whose enqueue, once entered, holds until released: an
/// in-flight request the test controls. Lease calls announce themselves.
struct Gated {
    inner: ModelBroker,
    enqueue_entered: Notify,
    release_enqueue: Semaphore,
    lease_entered: Notify,
}

#[async_trait]
impl Broker for Gated {
    async fn put_queue(
        &self,
        q: &QueueName,
        p: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        self.inner.put_queue(q, p).await
    }
    async fn get_queue(&self, q: &QueueName) -> BrokerResult<QueueInfo> {
        self.inner.get_queue(q).await
    }
    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        self.inner.list_queues().await
    }
    async fn delete_queue(&self, q: &QueueName) -> BrokerResult<()> {
        self.inner.delete_queue(q).await
    }
    async fn pause(&self, q: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        self.inner.pause(q, until).await
    }
    async fn resume(&self, q: &QueueName) -> BrokerResult<QueueInfo> {
        self.inner.resume(q).await
    }
    async fn enqueue(
        &self,
        q: &QueueName,
        m: Vec<EnqueueRequest>,
        o: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        self.enqueue_entered.notify_one();
        let _permit = self.release_enqueue.acquire().await;
        self.inner.enqueue(q, m, o).await
    }
    async fn get(&self, q: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        self.inner.get(q, id).await
    }
    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        self.inner.get_by_seq(seq).await
    }
    async fn cancel(&self, q: &QueueName, id: &MessageId) -> BrokerResult<()> {
        self.inner.cancel(q, id).await
    }
    async fn reschedule(
        &self,
        q: &QueueName,
        id: &MessageId,
        c: Reschedule,
    ) -> BrokerResult<Message> {
        self.inner.reschedule(q, id, c).await
    }
    async fn list(&self, q: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        self.inner.list(q, query).await
    }
    async fn lease(&self, qs: &[QueueName], r: LeaseRequest) -> BrokerResult<Vec<Delivery>> {
        self.lease_entered.notify_one();
        self.inner.lease(qs, r).await
    }
    async fn lease_message(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: Option<u64>,
    ) -> BrokerResult<Delivery> {
        self.inner.lease_message(q, id, l).await
    }
    async fn ack(&self, q: &QueueName, id: &MessageId, l: &LeaseId) -> BrokerResult<()> {
        self.inner.ack(q, id, l).await
    }
    async fn nack(&self, q: &QueueName, id: &MessageId, l: &LeaseId, n: Nack) -> BrokerResult<()> {
        self.inner.nack(q, id, l, n).await
    }
    async fn bury(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: &LeaseId,
        p: Option<u32>,
    ) -> BrokerResult<()> {
        self.inner.bury(q, id, l, p).await
    }
    async fn extend(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: &LeaseId,
        ms: Option<u64>,
    ) -> BrokerResult<u64> {
        self.inner.extend(q, id, l, ms).await
    }
    async fn redrive(&self, q: &QueueName, w: Redrive) -> BrokerResult<u64> {
        self.inner.redrive(q, w).await
    }
    async fn ready(&self) -> BrokerResult<()> {
        self.inner.ready().await
    }
    async fn shutdown(&self) -> BrokerResult<()> {
        self.inner.shutdown().await
    }
}

#[tokio::test]
async fn waiting_lease_returns_empty_and_in_flight_requests_finish() {
    let gated = Arc::new(Gated {
        inner: ModelBroker::new(),
        enqueue_entered: Notify::new(),
        release_enqueue: Semaphore::new(0),
        lease_entered: Notify::new(),
    });
    let mut s = common::start(gated.clone(), ServerOptions::default()).await;
    let client = s.client.clone();
    let base = s.base.clone();

    let lease_call = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            let started = Instant::now();
            let r = client
                .post(format!("{base}/v1/queues/idle/leases"))
                .json(&json!({"wait_ms": 60000}))
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
                started.elapsed(),
            )
        }
    });
    gated.lease_entered.notified().await;
    let enqueue_call = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            let r = client
                .post(format!("{base}/v1/queues/busy/messages"))
                .json(&json!({"id": "kept", "payload": "p"}))
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    });
    gated.enqueue_entered.notified().await;

    let stopping = Instant::now();
    s.trigger_stop();
    // The in-flight enqueue holds the broker shutdown back; let it go only
    // once shutdown has begun, to prove it still completes.
    tokio::task::yield_now().await;
    gated.release_enqueue.add_permits(1);
    assert_eq!(
        enqueue_call.await.unwrap(),
        201,
        "in-flight request must finish"
    );

    let (status, body, waited) = lease_call.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, json!({"messages": []}));
    assert!(waited < Duration::from_secs(10), "lease waited {waited:?}");

    let result = s.task.take().unwrap().await.unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(stopping.elapsed() < Duration::from_secs(10));
    // (A 201 above also proves the order: after the broker shut down the
    // enqueue would have failed with 503 unavailable.)
}

#[tokio::test]
async fn no_new_connections_after_shutdown() {
    let s = common::start_default().await;
    let addr = s.addr;
    let started = Instant::now();
    s.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener must be closed"
    );
}
