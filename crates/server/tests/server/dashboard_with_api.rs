//! The dashboard as `delayd_server::app` mounts it: the list-by-state GET
//! shares its path with the API's enqueue POST, its message objects are
//! those of `GET .../messages/{id}`, and `/ui` sits beside `/v1`.

use crate::common;

use serde_json::{json, Value};

#[tokio::test]
async fn enqueue_then_list_and_histogram_through_one_router() {
    let s = common::start_default().await;
    for (id, delay_ms) in [("a", 0), ("b", 600_000)] {
        let body = json!({"id": id, "delay_ms": delay_ms, "payload": "<b>hi</b>"});
        let r = s.call("POST", "/v1/queues/q/messages", Some(body)).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let ready = s
        .call("GET", "/v1/queues/q/messages?state=ready", None)
        .await;
    assert_eq!(ready.body["messages"][0]["id"], "a");
    assert_eq!(ready.body["messages"][0]["payload"], "<b>hi</b>");
    let single = s.call("GET", "/v1/queues/q/messages/a", None).await;
    assert_eq!(
        ready.body["messages"][0], single.body,
        "same object as GET .../messages/{{id}}"
    );

    let histogram = s.call("GET", "/v1/queues/q/histogram", None).await;
    let counts = histogram.body["counts"].as_array().unwrap();
    assert_eq!(counts.iter().filter_map(Value::as_u64).sum::<u64>(), 1);

    let page = s.call("GET", "/ui", None).await;
    assert_eq!(page.status, 200);
    assert!(page.headers.contains_key("content-security-policy"));
    let unknown = s.call("GET", "/nope", None).await;
    assert_eq!(unknown.status, 404, "the API's fallback still answers");
    assert_eq!(unknown.code(), "not_found");
    s.stop().await.unwrap();
}

/// `/` leads a person to the dashboard, without a token even when tokens
/// are set (the page itself needs none), and stays out of the API's
/// routes (another method is 405 in the API's error shape).
#[tokio::test]
async fn root_redirects_to_the_dashboard() {
    let options = delayd_server::ServerOptions {
        tokens: vec!["t0ken".into()],
        ..delayd_server::ServerOptions::default()
    };
    let s = common::start(common::model(), options).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client
        .get(format!("http://{}/", s.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 307);
    assert_eq!(
        r.headers().get("location").map(|v| v.to_str().unwrap()),
        Some("/ui")
    );
    // Followed, it reaches the page.
    let page = s.call("GET", "/", None).await;
    assert_eq!(page.status, 200);
    assert!(page.headers.contains_key("content-security-policy"));
    let post = s.call("POST", "/", None).await;
    assert_eq!((post.status, post.code()), (405, "method_not_allowed"));
    s.stop().await.unwrap();
}
