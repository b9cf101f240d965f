//! A handler that panics (a bug) answers 500 and is counted in the request
//! metrics like any other 500, by its route template. Alone in its binary:
//! the metrics are process-wide.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use delayd_core::testkit::ModelBroker;
use delayd_core::*;
use delayd_server::ServerOptions;

/// A ModelBroker whose `get_queue` panics: a bug deep in a request.
struct PanicsOnGetQueue(ModelBroker);

#[async_trait]
impl Broker for PanicsOnGetQueue {
    async fn put_queue(
        &self,
        q: &QueueName,
        p: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        self.0.put_queue(q, p).await
    }
    async fn get_queue(&self, _: &QueueName) -> BrokerResult<QueueInfo> {
        panic!("a bug in get_queue")
    }
    async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        self.0.list_queues().await
    }
    async fn delete_queue(&self, q: &QueueName) -> BrokerResult<()> {
        self.0.delete_queue(q).await
    }
    async fn pause(&self, q: &QueueName, until: Option<u64>) -> BrokerResult<QueueInfo> {
        self.0.pause(q, until).await
    }
    async fn resume(&self, q: &QueueName) -> BrokerResult<QueueInfo> {
        self.0.resume(q).await
    }
    async fn enqueue(
        &self,
        q: &QueueName,
        m: Vec<EnqueueRequest>,
        o: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        self.0.enqueue(q, m, o).await
    }
    async fn get(&self, q: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        self.0.get(q, id).await
    }
    async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        self.0.get_by_seq(seq).await
    }
    async fn cancel(&self, q: &QueueName, id: &MessageId) -> BrokerResult<()> {
        self.0.cancel(q, id).await
    }
    async fn reschedule(
        &self,
        q: &QueueName,
        id: &MessageId,
        c: Reschedule,
    ) -> BrokerResult<Message> {
        self.0.reschedule(q, id, c).await
    }
    async fn list(&self, q: &QueueName, query: ListQuery) -> BrokerResult<Vec<Message>> {
        self.0.list(q, query).await
    }
    async fn lease(&self, qs: &[QueueName], r: LeaseRequest) -> BrokerResult<Vec<Delivery>> {
        self.0.lease(qs, r).await
    }
    async fn lease_message(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: Option<u64>,
    ) -> BrokerResult<Delivery> {
        self.0.lease_message(q, id, l).await
    }
    async fn ack(&self, q: &QueueName, id: &MessageId, l: &LeaseId) -> BrokerResult<()> {
        self.0.ack(q, id, l).await
    }
    async fn nack(&self, q: &QueueName, id: &MessageId, l: &LeaseId, n: Nack) -> BrokerResult<()> {
        self.0.nack(q, id, l, n).await
    }
    async fn bury(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: &LeaseId,
        p: Option<u32>,
    ) -> BrokerResult<()> {
        self.0.bury(q, id, l, p).await
    }
    async fn extend(
        &self,
        q: &QueueName,
        id: &MessageId,
        l: &LeaseId,
        ms: Option<u64>,
    ) -> BrokerResult<u64> {
        self.0.extend(q, id, l, ms).await
    }
    async fn redrive(&self, q: &QueueName, w: Redrive) -> BrokerResult<u64> {
        self.0.redrive(q, w).await
    }
    async fn ready(&self) -> BrokerResult<()> {
        self.0.ready().await
    }
    async fn shutdown(&self) -> BrokerResult<()> {
        self.0.shutdown().await
    }
}

#[tokio::test]
async fn a_panicking_request_is_counted_as_a_500_by_route() {
    let broker = Arc::new(PanicsOnGetQueue(ModelBroker::new()));
    let server = common::start(broker, ServerOptions::default()).await;
    for _ in 0..2 {
        let reply = server.call("GET", "/v1/queues/orders", None).await;
        assert_eq!(reply.status, 500, "{}", reply.body);
        assert_eq!(reply.code(), "internal");
    }
    let metrics = server.call("GET", "/metrics", None).await;
    let page = metrics.body.as_str().expect("the metrics page is text");
    let counted = page
        .lines()
        .find(|line| {
            line.starts_with("delayd_http_requests_total{")
                && line.contains(r#"route="/v1/queues/{queue}""#)
                && line.contains(r#"status="500""#)
        })
        .unwrap_or_else(|| panic!("no 500 of /v1/queues/{{queue}} counted:\n{page}"));
    assert!(counted.ends_with(" 2"), "{counted}");
    server.stop().await.expect("stopped");
}
