//! `Protocol::Http2` against the real server: the connection starts with
//! the HTTP/2 preface (prior knowledge, no upgrade), the server answers on
//! it, and concurrent requests share one connection, where the default
//! (HTTP/1.1) opens one connection per request in flight.
//!
//! The observation point is a byte relay between the client and the
//! server that counts connections and keeps each one's first bytes: what
//! the wire carried, not what the client believes it sent.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use delayd_client::{Client, LeaseOptions, NewMessage, Protocol};
use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;

use delayd_core::testkit::relay::{relay, Openings, HTTP2_PREFACE as PREFACE};

async fn setup(protocol: Protocol) -> (Client, Openings) {
    let url = common::serve(Arc::new(ModelBroker::new()), ServerOptions::default()).await;
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .parse()
        .expect("server addr");
    let (relayed, openings) = relay(addr).await;
    let client = Client::with_protocol(&relayed, protocol).expect("client");
    assert_eq!(client.protocol(), protocol);
    (client, openings)
}

/// An enqueue, then 8 long-polls held concurrently by the server (the
/// queue stays empty for their whole `wait_ms`).
async fn concurrent_requests(client: &Client) {
    let done = client
        .enqueue("h2", &NewMessage::new("x").delay_ms(600_000))
        .await
        .expect("enqueue");
    assert!(done.created);
    let wait = LeaseOptions {
        max: 1,
        wait_ms: 300,
        lease_ms: None,
    };
    let mut polls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let client = client.clone();
        polls.spawn(async move { client.lease("h2", wait).await });
    }
    while let Some(polled) = polls.join_next().await {
        let leased = polled.expect("task").expect("lease");
        assert!(leased.is_empty(), "nothing is due: {leased:?}");
    }
}

#[tokio::test]
async fn http2_speaks_prior_knowledge_on_one_connection() {
    let (client, openings) = setup(Protocol::Http2).await;
    concurrent_requests(&client).await;
    let openings = openings.lock().expect("openings").clone();
    assert_eq!(openings.len(), 1, "9 requests, one connection");
    assert_eq!(
        openings[0], PREFACE,
        "prior knowledge: the HTTP/2 preface first"
    );
}

#[tokio::test]
async fn http1_is_the_default_and_opens_a_connection_per_request_in_flight() {
    let url = common::serve(Arc::new(ModelBroker::new()), ServerOptions::default()).await;
    assert_eq!(
        Client::new(&url).expect("client").protocol(),
        Protocol::Http1
    );

    let (client, openings) = setup(Protocol::Http1).await;
    concurrent_requests(&client).await;
    let openings = openings.lock().expect("openings").clone();
    assert!(
        openings.len() >= 8,
        "8 long-polls at once: {}",
        openings.len()
    );
    for opening in &openings {
        assert!(
            opening.starts_with(b"POST /v1/queues/h2/"),
            "an HTTP/1.1 request line: {:?}",
            String::from_utf8_lossy(opening)
        );
    }
}
