//! Replace and debounce over HTTP (api.md, "Retention, replace and
//! debounce"): `on_conflict` and `debounce_max_ms` in an enqueue body and a
//! batch item, and the answers as the wire shows them: `replaced` and
//! `after_lease` present only when true, the status (201 for a new
//! message, 200 otherwise), a dead message's 409 `invalid_state`. The rules
//! themselves are the broker's (`conformance_tests_replace!`); these cases
//! hold the wire to them.
//!
//! Due times are an hour or more away (or now), so no verdict depends on
//! the machine's speed.

use crate::common::{Reply, Server};
use serde_json::{json, Value};

const HOUR_MS: u64 = 3_600_000;

async fn enqueue(s: &Server, body: Value) -> Reply {
    s.call("POST", "/v1/queues/r/messages", Some(body)).await
}

async fn get(s: &Server, id: &str) -> Value {
    let r = s
        .call("GET", &format!("/v1/queues/r/messages/{id}"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// The answer's field names, sorted.
fn fields(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

const PLAIN: [&str; 4] = ["created", "deliver_at", "id", "seq"];

/// Create, keep, replace, debounce and a successor, each answer's status
/// and exact fields; the message as `GET` shows it after each.
async fn answers_on_the_wire(s: &Server) {
    let created = enqueue(
        s,
        json!({"id": "m", "payload": "v1", "delay_ms": HOUR_MS, "on_conflict": "replace"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(fields(&created.body), PLAIN, "{}", created.body);
    assert_eq!(created.body["created"], true);
    let seq = created.body["seq"].clone();
    let enqueued_at = get(s, "m").await["enqueued_at"].clone();

    let keep = enqueue(
        s,
        json!({"id": "m", "payload": "no", "on_conflict": "keep"}),
    )
    .await;
    assert_eq!(keep.status, 200, "{}", keep.body);
    assert_eq!(fields(&keep.body), PLAIN, "{}", keep.body);
    assert_eq!(
        (&keep.body["created"], &keep.body["seq"]),
        (&json!(false), &seq)
    );
    assert_eq!(get(s, "m").await["payload"], "v1", "keep changes nothing");

    let replaced = enqueue(
        s,
        json!({"id": "m", "payload": "v2", "delay_ms": 2 * HOUR_MS, "on_conflict": "replace",
            "priority": 5, "headers": {"h": "v"}, "key": "k", "max_attempts": 3}),
    )
    .await;
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    let mut with_replaced = PLAIN.to_vec();
    with_replaced.push("replaced");
    with_replaced.sort();
    assert_eq!(fields(&replaced.body), with_replaced, "{}", replaced.body);
    assert_eq!(
        (
            &replaced.body["created"],
            &replaced.body["replaced"],
            &replaced.body["seq"]
        ),
        (&json!(false), &json!(true), &seq)
    );
    let m = get(s, "m").await;
    assert_eq!(
        (
            &m["payload"],
            &m["priority"],
            &m["headers"],
            &m["key"],
            &m["max_attempts"]
        ),
        (
            &json!("v2"),
            &json!(5),
            &json!({"h": "v"}),
            &json!("k"),
            &json!(3)
        )
    );
    assert_eq!(
        (&m["seq"], &m["enqueued_at"], &m["deliver_at"]),
        (&seq, &enqueued_at, &replaced.body["deliver_at"]),
        "seq and enqueued_at stay; the due time is the request's"
    );

    // Debounce capped at enqueued_at + 0: due at once, so ready.
    let debounced = enqueue(
        s,
        json!({"id": "m", "payload": "v3", "delay_ms": HOUR_MS, "on_conflict": "debounce",
            "debounce_max_ms": 0}),
    )
    .await;
    assert_eq!(debounced.status, 200, "{}", debounced.body);
    assert_eq!(debounced.body["replaced"], true);
    assert_eq!(debounced.body["deliver_at"], enqueued_at, "capped");
    assert!(debounced.body.get("after_lease").is_none());

    // Leased: the request is its successor.
    let leased = s
        .call("POST", "/v1/queues/r/leases", Some(json!({"max": 1})))
        .await;
    let delivery = leased.body["messages"][0].clone();
    assert_eq!(delivery["payload"], "v3", "{}", leased.body);
    let successor = enqueue(
        s,
        json!({"id": "m", "payload": "v4", "delay_ms": HOUR_MS, "on_conflict": "replace"}),
    )
    .await;
    assert_eq!(successor.status, 200, "{}", successor.body);
    let mut with_successor = with_replaced.clone();
    with_successor.push("after_lease");
    with_successor.sort();
    assert_eq!(
        fields(&successor.body),
        with_successor,
        "{}",
        successor.body
    );
    assert_eq!(
        (&successor.body["replaced"], &successor.body["after_lease"]),
        (&json!(true), &json!(true))
    );
    let m = get(s, "m").await;
    assert_eq!(
        (&m["state"], &m["payload"]),
        (&json!("leased"), &json!("v3")),
        "a leased message is not changed"
    );
    let history = s.call("GET", "/v1/queues/r/messages/m/events", None).await;
    let replaced_events: Vec<&Value> = history.body["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "replaced")
        .collect();
    assert_eq!(
        replaced_events
            .iter()
            .map(|e| e["after_lease"].clone())
            .collect::<Vec<_>>(),
        [json!(false), json!(false), json!(true)],
        "{}",
        history.body
    );

    // The ack enqueues the successor: a new message with the id.
    let ack = s
        .call(
            "POST",
            "/v1/queues/r/messages/m/ack",
            Some(json!({"lease_id": delivery["lease_id"]})),
        )
        .await;
    assert_eq!(ack.status, 204, "{}", ack.body);
    let m = get(s, "m").await;
    assert_eq!(
        (&m["payload"], &m["state"], &m["deliver_at"]),
        (
            &json!("v4"),
            &json!("scheduled"),
            &successor.body["deliver_at"]
        )
    );
    assert!(m["seq"].as_u64() > seq.as_u64(), "a new seq: {m}");
}

/// Batch items replace in input order, each answered as a single enqueue
/// would be; a refused item fails alone.
async fn batch_items(s: &Server) {
    let r = s
        .call(
            "POST",
            "/v1/queues/r/batch",
            Some(json!({"messages": [
                {"id": "b", "payload": "b1", "delay_ms": HOUR_MS},
                {"id": "b", "payload": "b2", "delay_ms": HOUR_MS, "on_conflict": "replace"},
                {"id": "b", "payload": "b3", "delay_ms": HOUR_MS, "on_conflict": "debounce",
                    "debounce_max_ms": 2 * HOUR_MS},
                {"id": "b", "payload": "no"},
                {"payload": "x", "on_conflict": "replace"},
            ]})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let results = r.body["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 5, "{}", r.body);
    assert_eq!(fields(&results[0]), PLAIN, "{}", results[0]);
    assert_eq!(results[0]["created"], true);
    for item in &results[1..3] {
        assert_eq!(
            (&item["created"], &item["replaced"], &item["seq"]),
            (&json!(false), &json!(true), &results[0]["seq"]),
            "{item}"
        );
        assert!(item.get("after_lease").is_none(), "{item}");
    }
    assert_eq!(fields(&results[3]), PLAIN, "keep: {}", results[3]);
    assert_eq!(results[4]["error"]["code"], "invalid_argument");
    let text = results[4]["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("on_conflict"), "{text}");
    assert_eq!(get(s, "b").await["payload"], "b3", "applied in order");
}

/// A dead message: `replace` and `debounce` are 409 `invalid_state`
/// (single and batch item), `keep` a duplicate; the message stays dead.
async fn dead_is_a_conflict(s: &Server) {
    let r = s
        .call("PUT", "/v1/queues/r", Some(json!({"max_attempts": 1})))
        .await;
    assert!(r.status == 200 || r.status == 201, "{}", r.body);
    assert_eq!(
        enqueue(s, json!({"id": "d", "payload": "d"})).await.status,
        201
    );
    let leased = s
        .call("POST", "/v1/queues/r/leases", Some(json!({"max": 1})))
        .await;
    let lease_id = leased.body["messages"][0]["lease_id"].clone();
    let nack = s
        .call(
            "POST",
            "/v1/queues/r/messages/d/nack",
            Some(json!({ "lease_id": lease_id })),
        )
        .await;
    assert_eq!(nack.status, 204, "{}", nack.body);
    assert_eq!(get(s, "d").await["state"], "dead");
    for on_conflict in ["replace", "debounce"] {
        let body = json!({"id": "d", "payload": "new", "on_conflict": on_conflict});
        let r = enqueue(s, body.clone()).await;
        assert_eq!((r.status, r.code()), (409, "invalid_state"), "{}", r.body);
        let r = s
            .call(
                "POST",
                "/v1/queues/r/batch",
                Some(json!({ "messages": [body] })),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body["results"][0]["error"]["code"], "invalid_state",
            "{}",
            r.body
        );
    }
    let keep = enqueue(s, json!({"id": "d", "payload": "new"})).await;
    assert_eq!((keep.status, &keep.body["created"]), (200, &json!(false)));
    let m = get(s, "d").await;
    assert_eq!((&m["state"], &m["payload"]), (&json!("dead"), &json!("d")));
}

crate::server_cases!(delayd_server::ServerOptions::default(); model_broker: answers_on_the_wire,
    batch_items, dead_is_a_conflict);
crate::server_cases!(delayd_server::ServerOptions::default(); local_broker: answers_on_the_wire,
    batch_items, dead_is_a_conflict);
