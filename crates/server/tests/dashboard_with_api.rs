//! The dashboard as `delayd_server::app` mounts it: the list-by-state GET
//! shares its path with the API's enqueue POST, its message objects are
//! those of `GET .../messages/{id}`, and `/ui` sits beside `/v1`.

use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_core::Broker;
use delayd_server::ServerOptions;
use serde_json::{json, Value};

#[tokio::test]
async fn enqueue_then_list_and_histogram_through_one_router() {
    let broker: Arc<dyn Broker> = Arc::new(ModelBroker::new());
    let app = delayd_server::app(broker, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = reqwest::Client::new();

    for (id, delay_ms) in [("a", 0), ("b", 600_000)] {
        let response = http
            .post(format!("{base}/v1/queues/q/messages"))
            .json(&json!({"id": id, "delay_ms": delay_ms, "payload": "<b>hi</b>"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    let ready: Value = http
        .get(format!("{base}/v1/queues/q/messages?state=ready"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["messages"][0]["id"], "a");
    assert_eq!(ready["messages"][0]["payload"], "<b>hi</b>");
    let single: Value = http
        .get(format!("{base}/v1/queues/q/messages/a"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ready["messages"][0], single,
        "same object as GET .../messages/{{id}}"
    );

    let histogram: Value = http
        .get(format!("{base}/v1/queues/q/histogram"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let counts = histogram["counts"].as_array().unwrap();
    assert_eq!(counts.iter().filter_map(Value::as_u64).sum::<u64>(), 1);

    let page = http.get(format!("{base}/ui")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers().contains_key("content-security-policy"));
    let unknown = http.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(unknown.status(), 404, "the API's fallback still answers");
}
