//! Every endpoint's happy path and documented statuses, over real HTTP.
//! Each case runs against the reference ModelBroker and the LocalBroker.

use std::time::{Duration, Instant};

use crate::common::{Reply, Server};
use serde_json::{json, Value};

async fn enqueue(s: &Server, queue: &str, body: Value) -> Reply {
    s.call("POST", &format!("/v1/queues/{queue}/messages"), Some(body))
        .await
}

async fn lease(s: &Server, queue: &str, body: Value) -> Vec<Value> {
    let r = s
        .call("POST", &format!("/v1/queues/{queue}/leases"), Some(body))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["messages"].as_array().unwrap().clone()
}

async fn queues_crud(s: &Server) {
    let r = s
        .call("PUT", "/v1/queues/orders", Some(json!({"lease_ms": 5000})))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["name"], "orders");
    assert_eq!(r.body["config"]["lease_ms"], 5000);
    assert_eq!(r.body["config"]["max_attempts"], 10);
    assert_eq!(
        r.body["config"]["retry"],
        json!({"initial_ms": 1000, "max_ms": 3600000, "multiplier": 2.0})
    );
    assert_eq!(r.body["config"]["push"], Value::Null);
    assert_eq!(r.body["paused"], false);
    assert_eq!(
        r.body["stats"],
        json!({"scheduled": 0, "ready": 0, "leased": 0, "dead": 0, "flow_keys": 0, "cooling_keys": 0})
    );

    // Merge: absent fields keep their value; retry is replaced whole.
    let r = s
        .call(
            "PUT",
            "/v1/queues/orders",
            Some(json!({"max_attempts": 3, "retry": {"initial_ms": 10}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["config"]["lease_ms"], 5000);
    assert_eq!(r.body["config"]["max_attempts"], 3);
    assert_eq!(r.body["config"]["retry"]["initial_ms"], 10);
    assert_eq!(r.body["config"]["retry"]["max_ms"], 3600000);

    // An empty body is a valid (no-op) update.
    let r = s.raw("PUT", "/v1/queues/orders", Vec::new(), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["config"]["max_attempts"], 3);

    let r = s.call("GET", "/v1/queues/orders", None).await;
    assert_eq!(
        (r.status, r.body["config"]["lease_ms"].clone()),
        (200, json!(5000))
    );
    let r = s.call("GET", "/v1/queues", None).await;
    let names: Vec<&str> = r.body["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["orders"]);

    let r = s.call("POST", "/v1/queues/orders/pause", None).await;
    assert_eq!((r.status, r.body["paused"].clone()), (200, json!(true)));
    let r = s.call("POST", "/v1/queues/orders/resume", None).await;
    assert_eq!((r.status, r.body["paused"].clone()), (200, json!(false)));

    let r = s.call("DELETE", "/v1/queues/orders", None).await;
    assert_eq!((r.status, r.body.clone()), (204, Value::Null));
    let r = s.call("DELETE", "/v1/queues/orders", None).await;
    assert_eq!((r.status, r.code()), (404, "queue_not_found"));
    let r = s.call("GET", "/v1/queues/orders", None).await;
    assert_eq!((r.status, r.code()), (404, "queue_not_found"));
}

async fn push_secret_is_never_returned(s: &Server) {
    let push = json!({"push": {"url": "http://127.0.0.1:9/hook", "secret": "s3cret",
        "headers": {"Authorization": "Bearer t0ken", "x-tenant": "acme"}}});
    let r = s.call("PUT", "/v1/queues/hooks", Some(push)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["config"]["push"],
        json!({"url": "http://127.0.0.1:9/hook", "timeout_ms": 10000, "concurrency": 16,
            "secret_set": true, "headers_set": ["Authorization", "x-tenant"]})
    );
    assert!(!r.body.to_string().contains("s3cret"));
    assert!(
        !r.body.to_string().contains("t0ken"),
        "header values are never returned"
    );
    let r = s.call("GET", "/v1/queues/hooks", None).await;
    assert!(!r.body.to_string().contains("t0ken"));
    assert_eq!(
        r.body["config"]["push"]["headers_set"],
        json!(["Authorization", "x-tenant"])
    );
    // Not on the allowlist: 400, config unchanged.
    let r = s
        .call(
            "PUT",
            "/v1/queues/hooks",
            Some(json!({"push": {"url": "http://10.0.0.1/"}})),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_argument"));
    let r = s.call("GET", "/v1/queues/hooks", None).await;
    assert_eq!(r.body["config"]["push"]["secret_set"], true);
    // null removes push.
    let r = s
        .call("PUT", "/v1/queues/hooks", Some(json!({"push": null})))
        .await;
    assert_eq!(
        (r.status, r.body["config"]["push"].clone()),
        (200, Value::Null)
    );
}

async fn enqueue_get_cancel(s: &Server) {
    let r = enqueue(s, "jobs", json!({"id": "a", "payload": "hello", "delay_ms": 60000, "priority": 7, "headers": {"x-k": "v"}})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        (r.body["id"].clone(), r.body["created"].clone()),
        (json!("a"), json!(true))
    );
    let seq = r.body["seq"].as_u64().unwrap();
    let deliver_at = r.body["deliver_at"].as_u64().unwrap();

    // Idempotent: 200, same message, nothing changed.
    let r = enqueue(s, "jobs", json!({"id": "a", "payload": "other"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"id": "a", "seq": seq, "deliver_at": deliver_at, "created": false})
    );

    let r = s.call("GET", "/v1/queues/jobs/messages/a", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for (k, v) in [
        ("id", json!("a")),
        ("queue", json!("jobs")),
        ("state", json!("scheduled")),
        ("payload", json!("hello")),
        ("priority", json!(7)),
        ("attempts", json!(0)),
        ("headers", json!({"x-k": "v"})),
        ("seq", json!(seq)),
        ("deliver_at", json!(deliver_at)),
    ] {
        assert_eq!(r.body[k], v, "{k} in {}", r.body);
    }
    assert!(r.body["enqueued_at"].as_u64().unwrap() <= deliver_at);
    assert!(r.body.get("payload_base64").is_none());

    // Non-UTF-8 bytes come back as payload_base64; the id is generated.
    let r = enqueue(s, "jobs", json!({"payload_base64": "/wD+"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_owned();
    let r = s
        .call("GET", &format!("/v1/queues/jobs/messages/{id}"), None)
        .await;
    assert_eq!(
        (r.body["payload_base64"].clone(), r.body["state"].clone()),
        (json!("/wD+"), json!("ready"))
    );
    assert!(r.body.get("payload").is_none());

    let r = s.call("DELETE", "/v1/queues/jobs/messages/a", None).await;
    assert_eq!(r.status, 204);
    let r = s.call("DELETE", "/v1/queues/jobs/messages/a", None).await;
    assert_eq!((r.status, r.code()), (404, "message_not_found"));
    // After cancel the id is free again.
    let r = enqueue(s, "jobs", json!({"id": "a", "payload": "again"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
}

async fn batch_with_a_bad_item(s: &Server) {
    let body = json!({"messages": [
        {"id": "b1", "payload": "one"},
        {"id": "b2", "payload": "two", "dealy_ms": 5},
        {"id": "b3", "payload": "three", "delay_ms": "soon"},
        {"id": "b4"},
        {"id": "b5", "payload_base64": "AAE="},
    ]});
    let r = s.call("POST", "/v1/queues/batchq/batch", Some(body)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(
        (results[0]["id"].clone(), results[0]["created"].clone()),
        (json!("b1"), json!(true))
    );
    for bad in &results[1..4] {
        assert_eq!(bad["error"]["code"], "invalid_argument", "{bad}");
    }
    assert_eq!(results[4]["id"], "b5");
    assert!(results[0]["seq"].as_u64() < results[4]["seq"].as_u64());
    let r = s.call("GET", "/v1/queues/batchq", None).await;
    assert_eq!(r.body["stats"]["ready"], 2);
}

async fn patch_in_each_state(s: &Server) {
    s.call("PUT", "/v1/queues/p", Some(json!({"max_attempts": 1})))
        .await;
    enqueue(
        s,
        "p",
        json!({"id": "m", "payload": "x", "delay_ms": 600000}),
    )
    .await;
    // scheduled -> ready by rescheduling to now, with a new priority.
    let r = s
        .call(
            "PATCH",
            "/v1/queues/p/messages/m",
            Some(json!({"delay_ms": 0, "priority": 3})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (r.body["state"].clone(), r.body["priority"].clone()),
        (json!("ready"), json!(3))
    );
    // Far into the future (beyond the store's in-memory horizon) and back:
    // the answer is the changed message, as a GET right after shows it.
    for delay in [3_600_000u64, 0] {
        let r = s
            .call(
                "PATCH",
                "/v1/queues/p/messages/m",
                Some(json!({"delay_ms": delay})),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let got = s.call("GET", "/v1/queues/p/messages/m", None).await;
        assert_eq!(
            r.body["deliver_at"], got.body["deliver_at"],
            "delay {delay}"
        );
        assert_eq!(r.body["state"], got.body["state"], "delay {delay}");
    }
    // ready: priority only.
    let r = s
        .call(
            "PATCH",
            "/v1/queues/p/messages/m",
            Some(json!({"priority": 4})),
        )
        .await;
    assert_eq!((r.status, r.body["priority"].clone()), (200, json!(4)));
    // ready -> scheduled.
    let past = json!({"deliver_at": 1});
    let r = s.call("PATCH", "/v1/queues/p/messages/m", Some(past)).await;
    assert_eq!(
        (
            r.status,
            r.body["deliver_at"].clone(),
            r.body["state"].clone()
        ),
        (200, json!(1), json!("ready"))
    );
    // leased: 409 invalid_state.
    let leased = lease(s, "p", json!({})).await;
    assert_eq!(leased.len(), 1);
    let r = s
        .call(
            "PATCH",
            "/v1/queues/p/messages/m",
            Some(json!({"priority": 1})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "invalid_state"));
    // dead: 409 invalid_state.
    let lease_id = leased[0]["lease_id"].as_str().unwrap();
    let r = s
        .call(
            "POST",
            "/v1/queues/p/messages/m/nack",
            Some(json!({"lease_id": lease_id})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s.call("GET", "/v1/queues/p/messages/m", None).await;
    assert_eq!(r.body["state"], "dead");
    let r = s
        .call(
            "PATCH",
            "/v1/queues/p/messages/m",
            Some(json!({"priority": 1})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "invalid_state"));
    let r = s
        .call(
            "PATCH",
            "/v1/queues/p/messages/nope",
            Some(json!({"priority": 1})),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "message_not_found"));
}

async fn lease_ack_nack_extend(s: &Server) {
    s.call("PUT", "/v1/queues/c", Some(json!({"lease_ms": 60000})))
        .await;
    for (id, pri) in [("low", 9), ("high", 1)] {
        enqueue(s, "c", json!({"id": id, "payload": id, "priority": pri})).await;
    }
    // Empty body = defaults: one message, the most urgent.
    let r = s.raw("POST", "/v1/queues/c/leases", Vec::new(), &[]).await;
    let got = r.body["messages"].as_array().unwrap().clone();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(
        (m["id"].clone(), m["attempt"].clone(), m["payload"].clone()),
        (json!("high"), json!(1), json!("high"))
    );
    let lease_id = m["lease_id"].as_str().unwrap().to_owned();
    assert!(m["lease_until"].as_u64().unwrap() > m["deliver_at"].as_u64().unwrap());

    let r = s
        .call(
            "POST",
            "/v1/queues/c/messages/high/extend",
            Some(json!({"lease_id": lease_id, "lease_ms": 120000})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["lease_until"].as_u64().unwrap() > m["lease_until"].as_u64().unwrap());
    let r = s
        .call(
            "POST",
            "/v1/queues/c/messages/high/ack",
            Some(json!({"lease_id": "wrong"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "lease_mismatch"));
    let r = s
        .call(
            "POST",
            "/v1/queues/c/messages/high/ack",
            Some(json!({"lease_id": lease_id})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .call(
            "POST",
            "/v1/queues/c/messages/high/ack",
            Some(json!({"lease_id": lease_id})),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "message_not_found"));

    // nack with a delay: back to scheduled, attempt counted.
    let got = lease(s, "c", json!({"max": 10, "lease_ms": 1000})).await;
    assert_eq!(got.len(), 1);
    let lease_id = got[0]["lease_id"].as_str().unwrap();
    let r = s
        .call(
            "POST",
            "/v1/queues/c/messages/low/nack",
            Some(json!({"lease_id": lease_id, "delay_ms": 600000})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s.call("GET", "/v1/queues/c/messages/low", None).await;
    assert_eq!(
        (r.body["state"].clone(), r.body["attempts"].clone()),
        (json!("scheduled"), json!(1))
    );
    // Unknown queue: empty, and not created.
    assert!(lease(s, "never-made", json!({})).await.is_empty());
    let r = s.call("GET", "/v1/queues/never-made", None).await;
    assert_eq!(r.status, 404);
}

async fn dead_paging_and_redrive(s: &Server) {
    s.call("PUT", "/v1/queues/d", Some(json!({"max_attempts": 1})))
        .await;
    for i in 0..5 {
        enqueue(
            s,
            "d",
            json!({"id": format!("d{i}"), "payload": "x", "priority": i}),
        )
        .await;
        let got = lease(s, "d", json!({})).await;
        let lease_id = got[0]["lease_id"].as_str().unwrap();
        let r = s
            .call(
                "POST",
                &format!("/v1/queues/d/messages/d{i}/nack"),
                Some(json!({"lease_id": lease_id})),
            )
            .await;
        assert_eq!(r.status, 204);
    }
    let r = s.call("GET", "/v1/queues/d/dead?limit=2", None).await;
    let ids = |r: &Reply| -> Vec<String> {
        r.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&r), vec!["d0", "d1"]);
    assert_eq!(r.body["messages"][0]["state"], "dead");
    let r = s
        .call("GET", "/v1/queues/d/dead?limit=2&after=d1", None)
        .await;
    assert_eq!(ids(&r), vec!["d2", "d3"]);
    let r = s.call("GET", "/v1/queues/d/dead?after=d3", None).await;
    assert_eq!(ids(&r), vec!["d4"]);

    let r = s
        .call(
            "POST",
            "/v1/queues/d/dead/redrive",
            Some(json!({"ids": ["d0", "d1", "not-dead"]})),
        )
        .await;
    assert_eq!((r.status, r.body.clone()), (200, json!({"redriven": 2})));
    let r = s.call("GET", "/v1/queues/d/messages/d0", None).await;
    assert_eq!(
        (r.body["state"].clone(), r.body["attempts"].clone()),
        (json!("ready"), json!(0))
    );
    let r = s
        .raw("POST", "/v1/queues/d/dead/redrive", Vec::new(), &[])
        .await;
    assert_eq!((r.status, r.body.clone()), (200, json!({"redriven": 3})));
    let r = s.call("GET", "/v1/queues/d", None).await;
    assert_eq!(r.body["stats"]["ready"], 5);
}

async fn long_poll_returns_when_due(s: &Server) {
    let r = enqueue(s, "lp", json!({"payload": "soon", "delay_ms": 300})).await;
    assert_eq!(r.status, 201);
    let started = Instant::now();
    let got = lease(s, "lp", json!({"wait_ms": 20000})).await;
    let waited = started.elapsed();
    assert_eq!(got.len(), 1);
    assert!(
        waited < Duration::from_secs(5),
        "returned after {waited:?}, not when due"
    );
    // Empty queue: an empty list once wait_ms passes.
    let started = Instant::now();
    assert!(lease(s, "lp", json!({"wait_ms": 200})).await.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(200));
}

async fn operations(s: &Server) {
    let r = s.call("GET", "/healthz", None).await;
    assert_eq!(r.status, 200);
    let r = s.call("GET", "/readyz", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    enqueue(s, "metered", json!({"payload": "x"})).await;
    let r = s.call("GET", "/metrics", None).await;
    assert_eq!(r.status, 200);
    let text = r.body.as_str().unwrap();
    assert!(text.contains("delayd_http_requests_total"), "{text}");
    assert!(
        text.contains(r#"route="/v1/queues/{queue}/messages""#),
        "{text}"
    );
    assert!(text.contains("delayd_queue_messages"), "{text}");
    assert!(text.contains(r#"queue="metered""#), "{text}");
    let r = s.call("GET", "/openapi.json", None).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body["paths"]["/v1/queues/{queue}/leases"]["post"].is_object(),
        "{}",
        r.body
    );
    assert!(r.body["components"]["schemas"]["EnqueueBody"].is_object());
}

/// Queue names follow beanstalkd's tube-name rule (api.md): `+ / ; $ ( )`
/// are allowed, a `/` travels as `%2F` in a URL path, and names beginning
/// with `-` are refused.
async fn tube_style_queue_names(s: &Server) {
    let r = s
        .call("PUT", "/v1/queues/jobs%2Fnightly+$(x);v1", None)
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["name"], "jobs/nightly+$(x);v1");
    let r = enqueue(
        s,
        "jobs%2Fnightly+$(x);v1",
        json!({"id": "m", "payload": "x"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let got = lease(s, "jobs%2Fnightly+$(x);v1", json!({"max": 1})).await;
    assert_eq!(got.len(), 1);
    let r = s.call("GET", "/v1/queues", None).await;
    assert!(r.body["queues"]
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["name"] == "jobs/nightly+$(x);v1"));
    let r = s.call("PUT", "/v1/queues/-dash", None).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].clone()),
        (400, json!("invalid_argument"))
    );
    let long = "q".repeat(201);
    let r = s.call("PUT", &format!("/v1/queues/{long}"), None).await;
    assert_eq!(r.status, 400, "201 bytes");
}

/// The options of every case: the push cases target this host.
fn options() -> delayd_server::ServerOptions {
    delayd_server::ServerOptions {
        push_allow: vec!["127.0.0.1".into()],
        ..Default::default()
    }
}

crate::server_cases!(super::options(); model_broker: queues_crud, push_secret_is_never_returned, enqueue_get_cancel,
    batch_with_a_bad_item, patch_in_each_state, lease_ack_nack_extend, dead_paging_and_redrive,
    long_poll_returns_when_due, operations, tube_style_queue_names);

crate::server_cases!(super::options(); local_broker: queues_crud, push_secret_is_never_returned, enqueue_get_cancel,
    batch_with_a_bad_item, patch_in_each_state, lease_ack_nack_extend, dead_paging_and_redrive,
    long_poll_returns_when_due, operations, tube_style_queue_names);
