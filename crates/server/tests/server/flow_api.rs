//! Flow control over HTTP (api.md, "Flow control"): the `flow` object in a
//! queue `PUT` and the queue object, `key` on messages and leases, nack
//! `defer`, and `GET /v1/queues/{queue}/keys/{key}`. The rules themselves
//! are the broker's (conformance suite); these cases hold the wire to them.

use crate::common::{Reply, Server};
use delayd_server::ServerOptions;
use serde_json::{json, Value};

async fn put_queue(s: &Server, queue: &str, body: Value) -> Reply {
    s.call("PUT", &format!("/v1/queues/{queue}"), Some(body))
        .await
}

async fn enqueue(s: &Server, queue: &str, body: Value) {
    let r = s
        .call("POST", &format!("/v1/queues/{queue}/messages"), Some(body))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

async fn lease(s: &Server, queue: &str, max: u32) -> Vec<Value> {
    let r = s
        .call(
            "POST",
            &format!("/v1/queues/{queue}/leases"),
            Some(json!({"max": max})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["messages"].as_array().cloned().unwrap_or_default()
}

/// The config comes back whole with its defaults; a `PUT` without `flow`
/// keeps it, one with `flow` replaces it whole, `flow: null` removes it.
async fn flow_config_round_trip(s: &Server) {
    let r = put_queue(
        s,
        "mail",
        json!({"flow": {"rate": {"limit": 50, "period_ms": 1000}, "key_concurrency": 2}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["config"]["flow"],
        json!({"rate": {"limit": 50, "period_ms": 1000, "burst": 2}, "key_rate": null,
               "concurrency": null, "key_concurrency": 2, "ordered": false,
               "max_deferrals": 100})
    );
    assert_eq!(r.body["stats"]["flow_keys"], 0);
    assert_eq!(r.body["stats"]["cooling_keys"], 0);

    let r = put_queue(s, "mail", json!({"max_attempts": 3})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["config"]["flow"]["key_concurrency"], 2);

    let r = put_queue(s, "mail", json!({"flow": {"ordered": true}})).await;
    assert_eq!(
        r.body["config"]["flow"],
        json!({"rate": null, "key_rate": null, "concurrency": null,
               "key_concurrency": null, "ordered": true, "max_deferrals": 100})
    );
    let got = s.call("GET", "/v1/queues/mail", None).await;
    assert_eq!(got.body["config"]["flow"], r.body["config"]["flow"]);

    let r = put_queue(s, "mail", json!({"flow": null})).await;
    assert_eq!(r.body["config"]["flow"], Value::Null);
    let r = put_queue(s, "plain", json!({})).await;
    assert_eq!(r.body["config"]["flow"], Value::Null);
}

/// A key is carried into the message object, the lease and the key view;
/// a message without one shows `null`.
async fn key_on_messages_and_leases(s: &Server) {
    put_queue(s, "k", json!({"flow": {}})).await;
    enqueue(
        s,
        "k",
        json!({"id": "a", "payload": "x", "key": "tenant/ü"}),
    )
    .await;
    enqueue(s, "k", json!({"id": "b", "payload": "y"})).await;
    enqueue(
        s,
        "k",
        json!({"id": "c", "payload": "z", "key": "tenant/ü", "delay_ms": 3_600_000}),
    )
    .await;
    let a = s.call("GET", "/v1/queues/k/messages/a", None).await;
    assert_eq!(a.body["key"], "tenant/ü", "{}", a.body);
    assert_eq!(a.body["deferrals"], 0);
    let b = s.call("GET", "/v1/queues/k/messages/b", None).await;
    assert_eq!(b.body["key"], Value::Null, "{}", b.body);

    let leased = lease(s, "k", 10).await;
    let keys: Vec<(Value, Value)> = leased
        .iter()
        .map(|m| (m["id"].clone(), m["key"].clone()))
        .collect();
    assert!(
        keys.contains(&(json!("a"), json!("tenant/ü"))),
        "{leased:?}"
    );
    assert!(keys.contains(&(json!("b"), Value::Null)), "{leased:?}");

    // The key is one path segment: `/` travels as %2F, `ü` as UTF-8.
    let info = s
        .call("GET", "/v1/queues/k/keys/tenant%2F%C3%BC", None)
        .await;
    assert_eq!(info.status, 200, "{}", info.body);
    assert_eq!(
        info.body,
        json!({"key": "tenant/ü", "scheduled": 1, "ready": 0, "leased": 1, "dead": 0,
               "cooling_until": null})
    );
    let none = s.call("GET", "/v1/queues/k/keys/nobody", None).await;
    assert_eq!(
        none.body,
        json!({"key": "nobody", "scheduled": 0, "ready": 0, "leased": 0, "dead": 0,
               "cooling_until": null})
    );
    let unknown = s.call("GET", "/v1/queues/nope/keys/x", None).await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (404, "queue_not_found"),
        "{}",
        unknown.body
    );
    let queue = s.call("GET", "/v1/queues/k", None).await;
    assert!(
        queue.body["stats"]["flow_keys"].as_u64() >= Some(1),
        "{}",
        queue.body
    );
}

/// `defer: true` gives the attempt back and cools the key down; the
/// message object counts the deferral. On a queue without `flow` it is 400.
async fn nack_defer(s: &Server) {
    put_queue(s, "d", json!({"flow": {}})).await;
    enqueue(s, "d", json!({"id": "m", "payload": "x", "key": "k1"})).await;
    let first = lease(s, "d", 1).await;
    assert_eq!(first[0]["attempt"], 1);
    let lease_id = first[0]["lease_id"].clone();
    let r = s
        .call(
            "POST",
            "/v1/queues/d/messages/m/nack",
            Some(json!({"lease_id": lease_id, "delay_ms": 60_000, "defer": true})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let m = s.call("GET", "/v1/queues/d/messages/m", None).await;
    assert_eq!(m.body["attempts"], 0, "{}", m.body);
    assert_eq!(m.body["deferrals"], 1, "{}", m.body);
    assert_eq!(m.body["state"], "scheduled", "{}", m.body);
    let info = s.call("GET", "/v1/queues/d/keys/k1", None).await;
    assert!(info.body["cooling_until"].is_u64(), "{}", info.body);
    let queue = s.call("GET", "/v1/queues/d", None).await;
    assert_eq!(queue.body["stats"]["cooling_keys"], 1, "{}", queue.body);

    put_queue(s, "nf", json!({})).await;
    enqueue(s, "nf", json!({"id": "m", "payload": "x"})).await;
    let leased = lease(s, "nf", 1).await;
    let r = s
        .call(
            "POST",
            "/v1/queues/nf/messages/m/nack",
            Some(json!({"lease_id": leased[0]["lease_id"], "defer": true})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (400, "invalid_argument"),
        "{}",
        r.body
    );
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("defer"),
        "{}",
        r.body
    );
    let m = s.call("GET", "/v1/queues/nf/messages/m", None).await;
    assert_eq!(
        m.body["state"], "leased",
        "a refused nack changed the message"
    );
}

/// The gate applies to HTTP leases: a rate of 1 an hour with a burst of
/// 1 hands out one of two ready messages; `key_concurrency: 1` one message
/// per key.
async fn gate_applies_to_leases(s: &Server) {
    put_queue(
        s,
        "r",
        json!({"flow": {"rate": {"limit": 1, "period_ms": 3_600_000, "burst": 1}}}),
    )
    .await;
    enqueue(s, "r", json!({"payload": "1"})).await;
    enqueue(s, "r", json!({"payload": "2"})).await;
    assert_eq!(lease(s, "r", 10).await.len(), 1);
    assert_eq!(lease(s, "r", 10).await.len(), 0);

    put_queue(s, "c", json!({"flow": {"key_concurrency": 1}})).await;
    for (i, key) in ["a", "a", "b"].iter().enumerate() {
        enqueue(
            s,
            "c",
            json!({"id": format!("m{i}"), "payload": "", "key": key}),
        )
        .await;
    }
    let leased = lease(s, "c", 10).await;
    let mut keys: Vec<&str> = leased.iter().filter_map(|m| m["key"].as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["a", "b"], "{leased:?}");
}

/// A schedule's template key reaches its messages and its object.
async fn schedule_template_key(s: &Server) {
    let r = s
        .call(
            "PUT",
            "/v1/queues/sk/schedules/s",
            Some(json!({"every_ms": 60_000, "message": {"payload": "p", "key": "tenant-3"}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["message"]["key"], "tenant-3");
    let t = s
        .call("POST", "/v1/queues/sk/schedules/s/trigger", None)
        .await;
    assert_eq!(t.status, 201, "{}", t.body);
    let id = t.body["id"].as_str().unwrap_or_default().to_owned();
    let m = s
        .call("GET", &format!("/v1/queues/sk/messages/{id}"), None)
        .await;
    assert_eq!(m.body["key"], "tenant-3", "{}", m.body);
    let plain = s
        .call(
            "PUT",
            "/v1/queues/sk/schedules/p",
            Some(json!({"every_ms": 60_000})),
        )
        .await;
    assert!(plain.body["message"].get("key").is_none(), "{}", plain.body);
}

fn options() -> ServerOptions {
    ServerOptions::default()
}

crate::server_cases!(super::options(); model_broker: flow_config_round_trip,
    key_on_messages_and_leases, nack_defer, gate_applies_to_leases, schedule_template_key);

crate::server_cases!(super::options(); local_broker: flow_config_round_trip,
    key_on_messages_and_leases, nack_defer, gate_applies_to_leases, schedule_template_key);
