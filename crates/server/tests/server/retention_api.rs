//! Retention over HTTP (api.md, "Retention, replace and debounce"):
//! `retain_ms` in a queue `PUT` and the queue object, and a retained
//! message as the wire shows it: `state` `acked` or `cancelled`, its
//! `ended_at`, `"payload": ""`, not counted or listed, its id a duplicate
//! for an enqueue, absent for every other call. The rules themselves are
//! the broker's (`conformance_tests_retention!`); these cases hold the
//! wire to them.
//!
//! The window is a day, so no verdict depends on the machine's speed.

use crate::common::{Reply, Server};
use serde_json::{json, Value};

const DAY_MS: u64 = 86_400_000;

async fn enqueue(s: &Server, body: Value) -> Reply {
    s.call("POST", "/v1/queues/kept/messages", Some(body)).await
}

async fn get(s: &Server, id: &str) -> Reply {
    s.call("GET", &format!("/v1/queues/kept/messages/{id}"), None)
        .await
}

/// Leases the one ready message of `kept` and acks it.
async fn lease_and_ack(s: &Server) -> Value {
    let r = s
        .call("POST", "/v1/queues/kept/leases", Some(json!({"max": 1})))
        .await;
    let leased = r.body["messages"][0].clone();
    let id = leased["id"].as_str().expect("one leased message");
    let path = format!("/v1/queues/kept/messages/{id}/ack");
    let ack = s
        .call("POST", &path, Some(json!({"lease_id": leased["lease_id"]})))
        .await;
    assert_eq!(ack.status, 204, "{}", ack.body);
    leased
}

/// `retain_ms` is returned in `config` (0 by default), kept by a `PUT`
/// without it, and changed by one with it.
async fn retain_ms_round_trip(s: &Server) {
    let r = s.call("PUT", "/v1/queues/plain", Some(json!({}))).await;
    assert_eq!((r.status, &r.body["config"]["retain_ms"]), (201, &json!(0)));
    let r = s
        .call("PUT", "/v1/queues/kept", Some(json!({"retain_ms": DAY_MS})))
        .await;
    assert_eq!(
        (r.status, &r.body["config"]["retain_ms"]),
        (201, &json!(DAY_MS))
    );
    let r = s
        .call("PUT", "/v1/queues/kept", Some(json!({"max_attempts": 3})))
        .await;
    assert_eq!(
        r.body["config"]["retain_ms"], DAY_MS,
        "kept by a PUT without it"
    );
    let r = s.call("GET", "/v1/queues", None).await;
    let kept = r.body["queues"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["name"] == "kept"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(kept["config"]["retain_ms"], DAY_MS, "{}", r.body);
}

/// An acked and a cancelled message, as `GET` shows them.
async fn retained_messages_on_the_wire(s: &Server) {
    let r = s
        .call("PUT", "/v1/queues/kept", Some(json!({"retain_ms": DAY_MS})))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let first = enqueue(
        s,
        json!({"id": "a", "payload": "secret", "priority": 7, "headers": {"h": "v"}, "key": "k"}),
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let before = delayd_core::testkit::support::now_ms();
    lease_and_ack(s).await;
    let cancelled = enqueue(s, json!({"id": "c", "payload": "x", "delay_ms": 60_000})).await;
    assert_eq!(cancelled.status, 201);
    let r = s.call("DELETE", "/v1/queues/kept/messages/c", None).await;
    assert_eq!(r.status, 204, "{}", r.body);

    let acked = get(s, "a").await;
    assert_eq!(acked.status, 200, "{}", acked.body);
    let m = &acked.body;
    assert_eq!(m["state"], "acked");
    assert_eq!(m["payload"], "", "the payload is not kept: {m}");
    assert!(m.get("payload_base64").is_none());
    let ended_at = m["ended_at"].as_u64().expect("ended_at is set");
    assert!(ended_at >= before, "{m}");
    assert_eq!(
        (m["seq"].clone(), m["attempts"].clone()),
        (first.body["seq"].clone(), json!(1))
    );
    assert_eq!(
        (m["priority"].clone(), m["key"].clone()),
        (json!(7), json!("k"))
    );
    assert_eq!(m["headers"], json!({"h": "v"}));
    let c = get(s, "c").await;
    assert_eq!(c.body["state"], "cancelled", "{}", c.body);
    assert!(c.body["ended_at"].is_u64());

    // Not counted, not listed (the list refuses the ended states).
    let q = s.call("GET", "/v1/queues/kept", None).await;
    for state in ["scheduled", "ready", "leased", "dead"] {
        assert_eq!(q.body["stats"][state], 0, "{}", q.body);
        let r = s
            .call(
                "GET",
                &format!("/v1/queues/kept/messages?state={state}"),
                None,
            )
            .await;
        assert_eq!(r.body["messages"], json!([]), "{state}: {}", r.body);
    }
    let r = s
        .call("GET", "/v1/queues/kept/messages?state=acked", None)
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_argument"));

    // Its id is a duplicate for an enqueue, one and batch.
    let again = enqueue(s, json!({"id": "a", "payload": "new"})).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(
        (again.body["created"].clone(), again.body["seq"].clone()),
        (json!(false), first.body["seq"].clone())
    );
    let batch = s
        .call(
            "POST",
            "/v1/queues/kept/batch",
            Some(json!({"messages": [{"id": "c", "payload": "new"}]})),
        )
        .await;
    assert_eq!(batch.body["results"][0]["created"], false, "{}", batch.body);
    assert_eq!(batch.body["results"][0]["seq"], cancelled.body["seq"]);

    // Every other call: absent.
    for (method, path, body) in [
        (
            "POST",
            "/v1/queues/kept/messages/a/ack",
            json!({"lease_id": "l"}),
        ),
        (
            "POST",
            "/v1/queues/kept/messages/a/nack",
            json!({"lease_id": "l"}),
        ),
        (
            "POST",
            "/v1/queues/kept/messages/a/extend",
            json!({"lease_id": "l"}),
        ),
        (
            "PATCH",
            "/v1/queues/kept/messages/a",
            json!({"priority": 1}),
        ),
        ("DELETE", "/v1/queues/kept/messages/a", Value::Null),
    ] {
        let body = (!body.is_null()).then_some(body);
        let r = s.call(method, path, body).await;
        assert_eq!(
            (r.status, r.code()),
            (404, "message_not_found"),
            "{method} {path}: {}",
            r.body
        );
    }
    assert_eq!(get(s, "a").await.body["state"], "acked", "unchanged");
    assert!(lease_empty(s).await, "never delivered");
}

async fn lease_empty(s: &Server) -> bool {
    let r = s
        .call("POST", "/v1/queues/kept/leases", Some(json!({"max": 10})))
        .await;
    r.body["messages"] == json!([])
}

/// Without `retain_ms` an ended message is gone at once, as before.
async fn no_retention_frees_the_id(s: &Server) {
    let r = enqueue(s, json!({"id": "a", "payload": "p"})).await;
    assert_eq!(r.status, 201);
    lease_and_ack(s).await;
    assert_eq!(get(s, "a").await.status, 404);
    assert_eq!(
        enqueue(s, json!({"id": "a", "payload": "p"})).await.status,
        201
    );
}

crate::server_cases!(delayd_server::ServerOptions::default(); model_broker: retain_ms_round_trip,
    retained_messages_on_the_wire, no_retention_frees_the_id);

crate::server_cases!(delayd_server::ServerOptions::default(); local_broker: retain_ms_round_trip,
    retained_messages_on_the_wire, no_retention_frees_the_id);
