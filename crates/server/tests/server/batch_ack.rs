//! `POST /v1/queues/{queue}/acks` over real HTTP, against the ModelBroker
//! and the LocalBroker: per-item outcomes in input order, and whole-request
//! refusals that ack nothing.

use crate::common;

use std::time::Duration;

use crate::common::Server;
use serde_json::{json, Value};

/// Enqueues `n` messages due now and leases them all (with `lease_ms`).
async fn leased(s: &Server, queue: &str, n: usize, lease_ms: u64) -> Vec<(String, String)> {
    for i in 0..n {
        let path = format!("/v1/queues/{queue}/messages");
        let r = s
            .call(
                "POST",
                &path,
                Some(json!({"id": format!("m{i}"), "payload": "x"})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let path = format!("/v1/queues/{queue}/leases");
    let r = s
        .call("POST", &path, Some(json!({"max": n, "lease_ms": lease_ms})))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(messages.len(), n, "{}", r.body);
    messages
        .iter()
        .map(|m| {
            let field = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
            (field("id"), field("lease_id"))
        })
        .collect()
}

async fn acks(s: &Server, queue: &str, body: Value) -> common::Reply {
    s.call("POST", &format!("/v1/queues/{queue}/acks"), Some(body))
        .await
}

async fn state_of(s: &Server, queue: &str, id: &str) -> Value {
    let r = s
        .call("GET", &format!("/v1/queues/{queue}/messages/{id}"), None)
        .await;
    if r.status == 404 {
        return Value::Null;
    }
    r.body["state"].clone()
}

async fn mixed_items(s: &Server) {
    let held = leased(s, "q", 2, 30_000).await;
    let r = acks(
        s,
        "q",
        json!({"acks": [
            {"id": held[0].0, "lease_id": held[0].1},
            {"id": held[1].0, "lease_id": "not-the-lease"},
            {"id": "nope", "lease_id": "x"},
            {"id": "bad id!", "lease_id": "x"},
        ]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let results = &r.body["results"];
    assert_eq!(results[0], json!({"id": held[0].0, "acked": true}));
    assert_eq!(results[1]["id"], held[1].0.as_str());
    assert_eq!(results[1]["error"]["code"], "lease_mismatch");
    assert_eq!(results[2]["id"], "nope");
    assert_eq!(results[2]["error"]["code"], "message_not_found");
    assert_eq!(results[3]["id"], "bad id!");
    assert_eq!(
        results[3]["error"]["code"], "message_not_found",
        "an impossible id names no message"
    );
    assert_eq!(results.as_array().map(Vec::len), Some(4));
    assert_eq!(state_of(s, "q", &held[0].0).await, Value::Null);
    assert_eq!(state_of(s, "q", &held[1].0).await, "leased");
}

async fn expired_lease(s: &Server) {
    let held = leased(s, "q", 1, 50).await;
    // Kept: the 50 ms lease expires on the real server's real clock; 300 ms is past it on any machine, and a late ack is what is tested.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = acks(
        s,
        "q",
        json!({"acks": [{"id": held[0].0, "lease_id": held[0].1}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["results"][0]["error"]["code"], "lease_mismatch");
    assert_ne!(state_of(s, "q", &held[0].0).await, Value::Null);
}

async fn unknown_queue(s: &Server) {
    let r = acks(s, "ghost", json!({"acks": [{"id": "a", "lease_id": "b"}]})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["results"][0]["error"]["code"], "message_not_found");
    let r = s.call("GET", "/v1/queues/ghost", None).await;
    assert_eq!(
        r.status, 404,
        "batch ack must not create the queue: {}",
        r.body
    );
}

/// A refused request acks nothing, even its valid items.
async fn refused_requests_change_nothing(s: &Server) {
    let held = leased(s, "q", 1, 30_000).await;
    let valid = json!({"id": held[0].0, "lease_id": held[0].1});
    let mut too_many = vec![valid.clone()];
    too_many.extend((0..1000).map(|i| json!({"id": format!("x{i}"), "lease_id": "l"})));
    let bodies = [
        json!({"acks": too_many}),
        json!({"acks": [valid.clone(), {"id": "x"}]}),
        json!({"acks": [valid.clone(), {"lease_id": "x"}]}),
        json!({"acks": [valid.clone()], "extra": 1}),
        json!({"acks": [{"id": held[0].0, "lease_id": held[0].1, "dealy_ms": 1}]}),
    ];
    for body in bodies {
        let r = acks(s, "q", body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.code(), "invalid_argument", "{}", r.body);
        assert_eq!(state_of(s, "q", &held[0].0).await, "leased");
    }
    let r = s.raw("POST", "/v1/queues/q/acks", b"{".to_vec(), &[]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(state_of(s, "q", &held[0].0).await, "leased");
    // Exactly 1000 is allowed.
    let mut full = vec![valid];
    full.extend((0..999).map(|i| json!({"id": format!("x{i}"), "lease_id": "l"})));
    let r = acks(s, "q", json!({"acks": full})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["results"][0]["acked"], true);
    assert_eq!(state_of(s, "q", &held[0].0).await, Value::Null);
}

crate::server_cases!(delayd_server::ServerOptions::default(); model_broker: mixed_items, unknown_queue, refused_requests_change_nothing);
crate::server_cases!(delayd_server::ServerOptions::default(); local_broker: mixed_items, expired_lease, unknown_queue, refused_requests_change_nothing);

/// `expired_lease` over the ModelBroker on paused time (over the real
/// socket): the broker reads the virtual clock, so the lease has surely
/// expired after the case's wait, whatever the machine's load.
#[tokio::test(start_paused = true)]
async fn expired_lease_on_virtual_time() {
    let clock = std::sync::Arc::new(delayd_core::testkit::support::VirtualClock::new());
    let broker = std::sync::Arc::new(delayd_core::testkit::ModelBroker::with_clock(clock));
    let s = common::start(broker, delayd_server::ServerOptions::default()).await;
    expired_lease(&s).await;
    s.stop().await.unwrap();
}
