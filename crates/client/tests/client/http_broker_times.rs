//! What `HttpBroker` reads back from the message object: a message's own
//! `max_attempts`, a leased message's `lease_until` and a dead message's
//! `died_at` come through HTTP as the broker behind the server has them
//! (the client's view of a message used to drop all three).

use crate::common;

use std::sync::Arc;

use delayd_client::{Client, HttpBroker};
use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, Delivery, EnqueueOptions, EnqueueRequest, LeaseRequest, ListQuery, MessageId,
    MessageState, Nack, QueueName,
};
use delayd_server::ServerOptions;

/// The same backend seen directly and through HTTP.
async fn both() -> (Arc<ModelBroker>, HttpBroker) {
    let backend = Arc::new(ModelBroker::new());
    let url = common::serve(backend.clone(), ServerOptions::default()).await;
    let client = Client::new(&url).expect("client");
    (backend, HttpBroker::new(client))
}

async fn enqueue_one(broker: &HttpBroker, queue: &QueueName, id: &str, max_attempts: u32) {
    let request = EnqueueRequest {
        id: Some(MessageId::new(id).expect("id")),
        payload: b"p".to_vec(),
        max_attempts: Some(max_attempts),
        ..EnqueueRequest::default()
    };
    let mut results = broker
        .enqueue(queue, vec![request], EnqueueOptions::default())
        .await
        .expect("enqueue");
    results.pop().expect("one result").expect("enqueued");
}

/// Leases the one message `queue` holds.
async fn lease_one(broker: &HttpBroker, queue: &QueueName) -> Delivery {
    let mut deliveries = broker
        .lease(std::slice::from_ref(queue), LeaseRequest::default())
        .await
        .expect("lease");
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    deliveries.remove(0)
}

#[tokio::test]
async fn leased_message_shows_its_lease_until_and_max_attempts() {
    let (backend, broker) = both().await;
    let queue = QueueName::new("q").expect("queue");
    enqueue_one(&broker, &queue, "m", 3).await;
    let delivery = lease_one(&broker, &queue).await;
    let id = MessageId::new("m").expect("id");
    let over_http = broker.get(&queue, &id).await.expect("get");
    let direct = backend.get(&queue, &id).await.expect("get");
    assert_eq!(over_http.state, MessageState::Leased);
    assert_eq!(over_http.lease_until, Some(delivery.lease_until));
    assert_eq!(over_http.lease_until, direct.lease_until);
    assert_eq!(over_http.max_attempts, Some(3));
}

#[tokio::test]
async fn dead_message_shows_when_it_died() {
    let (backend, broker) = both().await;
    let queue = QueueName::new("q").expect("queue");
    enqueue_one(&broker, &queue, "d", 1).await;
    let delivery = lease_one(&broker, &queue).await;
    broker
        .nack(&queue, &delivery.id, &delivery.lease_id, Nack::default())
        .await
        .expect("nack: out of attempts, so dead");
    let id = MessageId::new("d").expect("id");
    let direct = backend.get(&queue, &id).await.expect("get");
    assert!(direct.died_at.is_some(), "{direct:?}");
    let over_http = broker.get(&queue, &id).await.expect("get");
    assert_eq!(over_http.state, MessageState::Dead);
    assert_eq!(over_http.died_at, direct.died_at);
    let query = ListQuery {
        state: MessageState::Dead,
        after: None,
        limit: 10,
    };
    let dead = broker.list(&queue, query).await.expect("dead list");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].died_at, direct.died_at);
}
