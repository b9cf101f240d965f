//! A handler that panics (a bug) answers 500 and is counted in the request
//! metrics like any other 500, by its route template. The metrics are
//! process-wide: this is the only test of this binary that answers 500.

use crate::common;

use std::sync::Arc;

use delayd_core::testkit::hooked::{no_hook, Hooked};
use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;

/// A ModelBroker whose `get_queue` panics: a bug deep in a request.
fn panics_on_get_queue() -> Hooked<ModelBroker> {
    Hooked::new(
        ModelBroker::new(),
        Box::new(|call| {
            assert_ne!(call, "get_queue", "a bug in get_queue");
            no_hook()
        }),
    )
}

#[tokio::test]
async fn a_panicking_request_is_counted_as_a_500_by_route() {
    let broker = Arc::new(panics_on_get_queue());
    let server = common::start(broker, ServerOptions::default()).await;
    for _ in 0..2 {
        let reply = server.call("GET", "/v1/queues/orders", None).await;
        assert_eq!(reply.status, 500, "{}", reply.body);
        assert_eq!(reply.code(), "internal");
    }
    let metrics = server.call("GET", "/metrics", None).await;
    let page = metrics.body.as_str().expect("the metrics page is text");
    let counted = page
        .lines()
        .find(|line| {
            line.starts_with("delayd_http_requests_total{")
                && line.contains(r#"route="/v1/queues/{queue}""#)
                && line.contains(r#"status="500""#)
        })
        .unwrap_or_else(|| panic!("no 500 of /v1/queues/{{queue}} counted:\n{page}"));
    assert!(counted.ends_with(" 2"), "{counted}");
    server.stop().await.expect("stopped");
}
