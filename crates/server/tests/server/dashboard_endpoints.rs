//! The dashboard's two endpoints (`routes::dashboard`) against a
//! `ModelBroker` holding known data: exact histogram counts per bucket, listing by state with
//! paging, and api.md error bodies for bad parameters.

use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, ManualClock, MessageId, Nack,
    QueueConfigPatch, QueueName, Schedule,
};
use serde_json::Value;

const T0: u64 = 1_700_000_000_000;
const MINUTE: u64 = 60_000;

struct Server {
    base: String,
    broker: Arc<dyn Broker>,
    http: reqwest::Client,
}

impl Server {
    async fn start(broker: Arc<dyn Broker>) -> Self {
        let app = delayd_server::app(broker.clone(), delayd_server::ServerOptions::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            base,
            broker,
            http: reqwest::Client::new(),
        }
    }

    /// A server over a broker whose wall clock stands at `T0`.
    async fn at_t0() -> Self {
        Self::start(Arc::new(ModelBroker::with_clock(Arc::new(
            ManualClock::new(T0),
        ))))
        .await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("application/json"),
            "{path}: {content_type}"
        );
        (status, response.json().await.unwrap())
    }

    async fn enqueue(&self, queue: &str, id: &str, schedule: Schedule, payload: &[u8]) {
        let request = EnqueueRequest {
            id: Some(MessageId::new(id).unwrap()),
            schedule,
            payload: payload.to_vec(),
            ..EnqueueRequest::default()
        };
        let results = self
            .broker
            .enqueue(&name(queue), vec![request], EnqueueOptions::default())
            .await
            .unwrap();
        assert!(results[0].as_ref().unwrap().created);
    }
}

fn name(queue: &str) -> QueueName {
    QueueName::new(queue).unwrap()
}

fn counts(body: &Value) -> Vec<u64> {
    body["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

fn assert_invalid_argument(status: u16, body: &Value, what: &str) {
    assert_eq!(status, 400, "{what}: {body}");
    assert_eq!(body["error"]["code"], "invalid_argument", "{what}: {body}");
    assert!(
        body["error"]["message"].as_str().unwrap().len() > 3,
        "{what}"
    );
}

/// Ten scheduled messages at known offsets from T0, one ready one.
async fn seed_known_offsets(server: &Server) {
    let offsets_ms = [
        30_000, // bucket 0
        90_000,
        100_000, // bucket 1
        5 * MINUTE + 12_000,
        5 * MINUTE + 59_999,  // bucket 5
        30 * MINUTE,          // bucket 30 (its first instant)
        59 * MINUTE + 59_999, // bucket 59 (the last instant counted)
        60 * MINUTE,          // == to: not counted
        90 * MINUTE,          // after to: not counted
        24 * 60 * MINUTE,     // a day out
    ];
    for (i, offset) in offsets_ms.iter().enumerate() {
        let id = format!("m{i}");
        server
            .enqueue("orders", &id, Schedule::At(T0 + offset), b"x")
            .await;
    }
    // Ready, not scheduled: never in the histogram.
    server
        .enqueue("orders", "due", Schedule::At(T0 - 5_000), b"x")
        .await;
}

#[tokio::test]
async fn histogram_counts_known_offsets_per_bucket() {
    let server = Server::at_t0().await;
    seed_known_offsets(&server).await;
    let to = T0 + 60 * MINUTE;
    let (status, body) = server
        .get(&format!(
            "/v1/queues/orders/histogram?from={T0}&to={to}&buckets=60"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["from"], T0);
    assert_eq!(body["to"], to);
    assert_eq!(body["bucket_ms"], MINUTE);
    assert_eq!(body["truncated"], false);
    let mut expected = vec![0u64; 60];
    expected[0] = 1;
    expected[1] = 2;
    expected[5] = 2;
    expected[30] = 1;
    expected[59] = 1;
    assert_eq!(counts(&body), expected);
}

#[tokio::test]
async fn histogram_counts_earlier_messages_in_first_bucket() {
    let server = Server::at_t0().await;
    seed_known_offsets(&server).await;
    // A day from T0 + 5 min in two halves: the three earlier messages count
    // in bucket 0 with the six later ones; the one a day after T0 is in 1.
    let from = T0 + 5 * MINUTE;
    let (status, body) = server
        .get(&format!(
            "/v1/queues/orders/histogram?from={from}&to={}&buckets=2",
            from + 24 * 60 * MINUTE
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["bucket_ms"], 12 * 60 * MINUTE);
    assert_eq!(counts(&body), vec![9, 1]);
}

#[tokio::test]
async fn histogram_defaults_to_next_hour_in_minutes() {
    let server = Server::start(Arc::new(ModelBroker::new())).await;
    server
        .enqueue("q", "soon", Schedule::Delay(30 * MINUTE), b"x")
        .await;
    server
        .enqueue("q", "later", Schedule::Delay(120 * MINUTE), b"x")
        .await;
    let (status, body) = server.get("/v1/queues/q/histogram").await;
    assert_eq!(status, 200, "{body}");
    let from = body["from"].as_u64().unwrap();
    assert_eq!(body["to"].as_u64().unwrap() - from, 60 * MINUTE);
    assert_eq!(body["bucket_ms"], MINUTE);
    let counts = counts(&body);
    assert_eq!(counts.len(), 60);
    assert_eq!(counts.iter().sum::<u64>(), 1);
    // Due 30 minutes after the enqueue, which was just before `from`.
    assert!(counts[29] + counts[30] == 1, "{counts:?}");
}

#[tokio::test]
async fn histogram_rejects_bad_parameters() {
    let server = Server::at_t0().await;
    seed_known_offsets(&server).await;
    let bad = [
        "buckets=0",
        "buckets=10001",
        "buckets=-1",
        "buckets=1.5",
        "from=abc",
        "from=-5",
        &format!("from={T0}&to={T0}"),
        &format!("from={T0}&to={}", T0 - 1),
        "bucket=10",
        "from=99999999999999999999999",
    ];
    for query in bad {
        let (status, body) = server
            .get(&format!("/v1/queues/orders/histogram?{query}"))
            .await;
        assert_invalid_argument(status, &body, query);
    }
    let (status, body) = server.get("/v1/queues/bad%20name/histogram").await;
    assert_invalid_argument(status, &body, "queue name");
}

#[tokio::test]
async fn histogram_of_unknown_queue_is_404() {
    let server = Server::at_t0().await;
    let (status, body) = server.get("/v1/queues/nope/histogram").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "queue_not_found");
}

fn ids(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn list_pages_scheduled_messages_in_due_order() {
    let server = Server::at_t0().await;
    seed_known_offsets(&server).await;
    let (status, first) = server
        .get("/v1/queues/orders/messages?state=scheduled&limit=4")
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(ids(&first), ["m0", "m1", "m2", "m3"]);
    let (_, second) = server
        .get("/v1/queues/orders/messages?state=scheduled&limit=4&after=m3")
        .await;
    assert_eq!(ids(&second), ["m4", "m5", "m6", "m7"]);
    let (_, last) = server
        .get("/v1/queues/orders/messages?state=scheduled&after=m7")
        .await;
    assert_eq!(ids(&last), ["m8", "m9"]);
    let (_, ready) = server.get("/v1/queues/orders/messages?state=ready").await;
    assert_eq!(ids(&ready), ["due"]);
}

#[tokio::test]
async fn list_shows_message_objects_as_api_md() {
    let server = Server::at_t0().await;
    let queue = name("jobs");
    let patch = QueueConfigPatch {
        max_attempts: Some(1),
        ..QueueConfigPatch::default()
    };
    server.broker.put_queue(&queue, patch).await.unwrap();
    server
        .enqueue("jobs", "bin", Schedule::Now, &[0xff, 0x00])
        .await;
    server
        .enqueue("jobs", "txt", Schedule::Delay(MINUTE), b"<script>")
        .await;
    let leased = server
        .broker
        .lease(std::slice::from_ref(&queue), LeaseRequest::default())
        .await
        .unwrap();
    assert_eq!(leased[0].id.as_str(), "bin");
    let (_, body) = server.get("/v1/queues/jobs/messages?state=leased").await;
    assert_eq!(ids(&body), ["bin"]);
    assert_eq!(body["messages"][0]["state"], "leased");
    assert_eq!(body["messages"][0]["attempts"], 1);
    assert!(body["messages"][0]["lease_until"].as_u64().is_some());
    server
        .broker
        .nack(&queue, &leased[0].id, &leased[0].lease_id, Nack::default())
        .await
        .unwrap();

    let (status, dead) = server.get("/v1/queues/jobs/messages?state=dead").await;
    assert_eq!(status, 200);
    let m = &dead["messages"][0];
    assert_eq!(m["id"], "bin");
    assert_eq!(m["state"], "dead");
    assert_eq!(m["queue"], "jobs");
    assert_eq!(m["payload_base64"], "/wA=");
    assert!(m.get("payload").is_none(), "{m}");
    for field in ["seq", "deliver_at", "enqueued_at", "priority", "died_at"] {
        assert!(m[field].as_u64().is_some(), "{field} in {m}");
    }
    assert_eq!(m["headers"], serde_json::json!({}));

    let (_, scheduled) = server.get("/v1/queues/jobs/messages?state=scheduled").await;
    assert_eq!(scheduled["messages"][0]["payload"], "<script>");
    assert_eq!(scheduled["messages"][0]["deliver_at"], T0 + MINUTE);
}

#[tokio::test]
async fn list_rejects_bad_parameters() {
    let server = Server::at_t0().await;
    seed_known_offsets(&server).await;
    for query in [
        "",
        "state=gone",
        "state=ready&limit=0",
        "state=ready&limit=1001",
        "state=ready&limit=ten",
        "state=ready&after=bad%20id",
        "state=ready&page=2",
    ] {
        let (status, body) = server
            .get(&format!("/v1/queues/orders/messages?{query}"))
            .await;
        assert_invalid_argument(status, &body, query);
    }
    // Retained messages are never listed: their states are refused by
    // name, saying why.
    for state in ["acked", "cancelled"] {
        let query = format!("state={state}");
        let (status, body) = server
            .get(&format!("/v1/queues/orders/messages?{query}"))
            .await;
        assert_invalid_argument(status, &body, &query);
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("state {state}")) && message.contains("never listed"),
            "{message}"
        );
    }
    let (status, body) = server.get("/v1/queues/nope/messages?state=dead").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "queue_not_found");
}
