//! The schedule routes as api.md states them, over raw HTTP, on the
//! reference model and on LocalBroker: status codes (PUT 201/200, trigger
//! 201, DELETE 204, 404 `schedule_not_found` / `queue_not_found`), the
//! object's defaults, a replace keeping `start_at`, the check that needs
//! the kept `start_at`, auth, `--no-auto-create`, deleting a queue, and the
//! tz database gauge.

use crate::common;

use std::sync::Arc;

use delayd_core::Broker;
use delayd_server::ServerOptions;
use serde_json::{json, Value};

use crate::common::Server;

fn cron_body() -> Value {
    json!({"cron": "0 9 * * *", "tz": "Europe/Paris", "message": {"payload": "p"}})
}

#[tokio::test]
async fn statuses_and_objects_model() {
    statuses_and_objects(common::model()).await;
}

#[tokio::test]
async fn statuses_and_objects_local() {
    let (broker, _dir) = common::local_broker().await;
    statuses_and_objects(broker).await;
}

async fn statuses_and_objects(broker: Arc<dyn Broker>) {
    let s = common::start(broker, ServerOptions::default()).await;
    let path = "/v1/queues/q/schedules/daily";
    let created = s.call("PUT", path, Some(cron_body())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let object = &created.body;
    assert_eq!(object["id"], "daily");
    assert_eq!(object["queue"], "q");
    assert_eq!(object["revision"], 1);
    assert_eq!(object["catchup"], "latest");
    assert_eq!(object["message"]["priority"], 1024);
    assert_eq!(object["end_at"], Value::Null);
    assert!(object.get("every_ms").is_none(), "{object}");
    // The queue was created like an enqueue creates it.
    assert_eq!(s.call("GET", "/v1/queues/q", None).await.status, 200);

    let same = s.call("PUT", path, Some(cron_body())).await;
    assert_eq!((same.status, &same.body["revision"]), (200, &json!(1)));
    let mut changed = cron_body();
    changed["jitter_ms"] = json!(1000);
    let replaced = s.call("PUT", path, Some(changed)).await;
    assert_eq!(
        (replaced.status, &replaced.body["revision"]),
        (200, &json!(2))
    );
    assert_eq!(
        replaced.body["start_at"], object["start_at"],
        "start_at kept"
    );

    assert_eq!(s.call("GET", path, None).await.body, replaced.body);
    let list = s.call("GET", "/v1/queues/q/schedules", None).await;
    assert_eq!(list.body["schedules"][0]["id"], "daily", "{}", list.body);

    let paused = s.call("POST", &format!("{path}/pause"), None).await;
    assert_eq!(paused.status, 200);
    assert_eq!(
        (&paused.body["paused"], &paused.body["next_fire_at"]),
        (&json!(true), &Value::Null)
    );
    let resumed = s.call("POST", &format!("{path}/resume"), None).await;
    assert_eq!(
        (resumed.status, &resumed.body["revision"]),
        (200, &json!(4))
    );

    let fired = s.call("POST", &format!("{path}/trigger"), None).await;
    assert_eq!(fired.status, 201, "{}", fired.body);
    let id = fired.body["id"].as_str().expect("id");
    assert!(id.starts_with("daily:manual:"), "{}", fired.body);
    assert_eq!(fired.body["created"], true);
    assert!(fired.body["seq"].is_u64() && fired.body["deliver_at"].is_u64());

    assert_eq!(s.call("DELETE", path, None).await.status, 204);
    let gone = s.call("GET", path, None).await;
    assert_eq!((gone.status, gone.code()), (404, "schedule_not_found"));
    for (method, suffix) in [("DELETE", ""), ("POST", "/pause"), ("POST", "/trigger")] {
        let r = s.call(method, &format!("{path}{suffix}"), None).await;
        assert_eq!(
            (r.status, r.code()),
            (404, "schedule_not_found"),
            "{method} {suffix}"
        );
    }
    // The triggered message stays after its schedule is deleted.
    let kept = s
        .call("GET", &format!("/v1/queues/q/messages/{id}"), None)
        .await;
    assert_eq!(kept.status, 200);
    let unknown = s.call("GET", "/v1/queues/nope/schedules", None).await;
    assert_eq!((unknown.status, unknown.code()), (404, "queue_not_found"));
    let unknown = s.call("GET", "/v1/queues/nope/schedules/x", None).await;
    assert_eq!((unknown.status, unknown.code()), (404, "queue_not_found"));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn a_replace_is_checked_against_the_kept_start_at() {
    let s = common::start_default().await;
    let path = "/v1/queues/q/schedules/window";
    let start_at = 1_767_225_600_000u64; // 2026-01-01, in the past
    let body = json!({"every_ms": 60000, "start_at": start_at, "message": {"payload": "p"}});
    assert_eq!(s.call("PUT", path, Some(body)).await.status, 201);
    // end_at is after the kept start_at (though before now): valid.
    let end_at = start_at + 3_600_000;
    let replace = json!({"every_ms": 60000, "end_at": end_at, "message": {"payload": "p"}});
    let r = s.call("PUT", path, Some(replace)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (&r.body["start_at"], &r.body["end_at"]),
        (&json!(start_at), &json!(end_at))
    );
    assert_eq!(
        r.body["next_fire_at"],
        Value::Null,
        "finished: end_at has passed"
    );
    let before = start_at - 1;
    let replace = json!({"every_ms": 60000, "end_at": before, "message": {"payload": "p"}});
    let r = s.call("PUT", path, Some(replace)).await;
    assert_eq!((r.status, r.code()), (400, "invalid_argument"));
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .starts_with("end_at"));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn deleting_the_queue_deletes_its_schedules() {
    let s = common::start_default().await;
    let path = "/v1/queues/q/schedules/daily";
    assert_eq!(s.call("PUT", path, Some(cron_body())).await.status, 201);
    assert_eq!(s.call("DELETE", "/v1/queues/q", None).await.status, 204);
    assert_eq!(s.call("PUT", "/v1/queues/q", None).await.status, 201);
    let list = s.call("GET", "/v1/queues/q/schedules", None).await;
    assert_eq!(list.body, json!({"schedules": []}));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn no_auto_create_refuses_an_unknown_queue() {
    let options = ServerOptions {
        auto_create: false,
        ..ServerOptions::default()
    };
    let s = common::start(common::model(), options).await;
    let r = s
        .call("PUT", "/v1/queues/new/schedules/s", Some(cron_body()))
        .await;
    assert_eq!((r.status, r.code()), (404, "queue_not_found"));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn schedule_routes_need_the_token() {
    let options = ServerOptions {
        tokens: vec!["t0ken".into()],
        ..ServerOptions::default()
    };
    let s: Server = common::start(common::model(), options).await;
    let preview = json!({"every_ms": 1000});
    for (method, path, body) in [
        ("PUT", "/v1/queues/q/schedules/s", Some(cron_body())),
        ("GET", "/v1/queues/q/schedules", None),
        ("POST", "/v1/queues/q/schedules/s/trigger", None),
        ("POST", "/v1/schedules/preview", Some(preview.clone())),
    ] {
        let r = s.call(method, path, body).await;
        assert_eq!(
            (r.status, r.code()),
            (401, "unauthorized"),
            "{method} {path}"
        );
    }
    let body = serde_json::to_vec(&preview).unwrap();
    let r = s
        .raw(
            "POST",
            "/v1/schedules/preview",
            body,
            &[("authorization", "Bearer t0ken")],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["fires"].as_array().map(Vec::len),
        Some(10),
        "{}",
        r.body
    );
    s.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_show_the_tz_database_version() {
    let s = common::start_default().await;
    let r = s.raw("GET", "/metrics", Vec::new(), &[]).await;
    let text = r.body.as_str().unwrap_or_default();
    let line = format!(
        "delayd_tzdb_info{{version=\"{}\"}} 1",
        delayd_core::TZDB_VERSION
    );
    assert!(text.contains(&line), "{text}");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn message_defaults_to_an_empty_payload() {
    let s = common::start_default().await;
    let r = s
        .call(
            "PUT",
            "/v1/queues/q/schedules/tick",
            Some(json!({"every_ms": 60000})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["message"],
        json!({"payload": "", "priority": 1024, "headers": {}})
    );
    s.stop().await.unwrap();
}
