//! Message history over HTTP (api.md, "Message history"): the wire shape
//! of `GET .../messages/{id}/events` (each event's `at`, `type`,
//! `attempt` and its type's fields, `null` where a field has no value;
//! `dropped`), and its 404s, which are those of `GET` of the message. The
//! rules themselves are the broker's (`conformance_tests_history!`); these
//! cases hold the wire to them.

use crate::common::{Reply, Server};
use serde_json::{json, Value};

async fn events(s: &Server, queue: &str, id: &str) -> Reply {
    let path = format!("/v1/queues/{queue}/messages/{id}/events");
    s.call("GET", &path, None).await
}

/// The events with `at` taken out (checked to be in order and within the
/// test's run), so the rest compares exactly.
fn without_times(body: &Value, from: u64) -> Vec<Value> {
    let to = delayd_core::testkit::support::now_ms();
    let mut last = from;
    let events = body["events"].as_array().expect("an events list");
    events
        .iter()
        .map(|event| {
            let at = event["at"].as_u64().expect("an integer `at`");
            assert!(at >= last && at <= to, "`at` {at} out of order: {body}");
            last = at;
            let mut event = event.clone();
            event.as_object_mut().map(|e| e.remove("at"));
            event
        })
        .collect()
}

/// Enqueue, reschedule, lease, nack with an error and without a delay,
/// lease again, ack: every event with exactly its fields.
async fn a_life_on_the_wire(s: &Server) {
    let from = delayd_core::testkit::support::now_ms();
    let put = s
        .call("PUT", "/v1/queues/h", Some(json!({"retain_ms": 60_000})))
        .await;
    assert_eq!(put.status, 201, "{}", put.body);
    let body = json!({"id": "m", "payload": "x", "delay_ms": 60_000});
    let r = s.call("POST", "/v1/queues/h/messages", Some(body)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = events(s, "h", "m").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        without_times(&r.body, from),
        [json!({"type": "enqueued", "attempt": 0})]
    );
    assert_eq!(r.body["dropped"], 0);

    let r = s
        .call(
            "PATCH",
            "/v1/queues/h/messages/m",
            Some(json!({"delay_ms": 0})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let leased = lease(s).await;
    let nack = json!({"lease_id": leased["lease_id"], "error": "downstream said no"});
    let r = s
        .call("POST", "/v1/queues/h/messages/m/nack", Some(nack))
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .call(
            "PATCH",
            "/v1/queues/h/messages/m",
            Some(json!({"delay_ms": 0})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let again = lease(s).await;
    let ack = json!({"lease_id": again["lease_id"]});
    let r = s
        .call("POST", "/v1/queues/h/messages/m/ack", Some(ack))
        .await;
    assert_eq!(r.status, 204, "{}", r.body);

    let r = events(s, "h", "m").await;
    assert_eq!(r.status, 200, "retained, so still readable: {}", r.body);
    assert_eq!(
        without_times(&r.body, from),
        [
            json!({"type": "enqueued", "attempt": 0}),
            json!({"type": "rescheduled", "attempt": 0}),
            json!({"type": "leased", "attempt": 1, "lease_until": leased["lease_until"], "via": "http"}),
            json!({"type": "nacked", "attempt": 1, "delay_ms": null, "error": "downstream said no"}),
            json!({"type": "rescheduled", "attempt": 1}),
            json!({"type": "leased", "attempt": 2, "lease_until": again["lease_until"], "via": "http"}),
            json!({"type": "acked", "attempt": 2}),
        ],
        "{}",
        r.body
    );
    assert_eq!(r.body["dropped"], 0);
}

async fn lease(s: &Server) -> Value {
    let r = s
        .call("POST", "/v1/queues/h/leases", Some(json!({"max": 1})))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["messages"][0].clone()
}

/// An unknown id, an unknown queue, an ended message without retention
/// and an invalid id answer exactly as `GET` of the message does.
async fn not_found_as_get(s: &Server) {
    let r = s
        .call(
            "POST",
            "/v1/queues/h/messages",
            Some(json!({"id": "gone", "payload": "x"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.call("DELETE", "/v1/queues/h/messages/gone", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    for (queue, id) in [
        ("h", "nope"),
        ("nowhere", "m"),
        ("h", "gone"),
        ("h", "bad%20id"),
    ] {
        let history = events(s, queue, id).await;
        let get = s
            .call("GET", &format!("/v1/queues/{queue}/messages/{id}"), None)
            .await;
        assert!(history.status >= 400, "{queue}/{id}: {}", history.body);
        assert_eq!(
            (history.status, history.code()),
            (get.status, get.code()),
            "{queue}/{id}"
        );
    }
    assert_eq!(events(s, "h", "nope").await.code(), "message_not_found");
}

/// The served document describes the route and its answer.
async fn documented(s: &Server) {
    let r = s.call("GET", "/openapi.json", None).await;
    let route = &r.body["paths"]["/v1/queues/{queue}/messages/{id}/events"]["get"];
    let ok = &route["responses"]["200"]["content"]["application/json"]["schema"]["$ref"];
    assert_eq!(ok, "#/components/schemas/History", "{route}");
    // One flat object per type, each with `at`, `type` and `attempt`.
    let types = r.body["components"]["schemas"]["Event"]["oneOf"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        types.len(),
        12,
        "{}",
        r.body["components"]["schemas"]["Event"]
    );
    let mut titles = Vec::new();
    for object in types {
        let required = object["required"].as_array().cloned().unwrap_or_default();
        for field in ["at", "type", "attempt"] {
            assert!(required.contains(&json!(field)), "{object}");
        }
        titles.push(object["title"].as_str().unwrap_or_default().to_owned());
    }
    assert!(titles.contains(&"PushFailedEvent".to_owned()), "{titles:?}");
}

crate::server_cases!(delayd_server::ServerOptions::default(); model_broker: a_life_on_the_wire,
    not_found_as_get, documented);

crate::server_cases!(delayd_server::ServerOptions::default(); local_broker: a_life_on_the_wire,
    not_found_as_get);
