//! A `Content-Length` beyond the body cap is refused from the header: 413
//! `payload_too_large` at once, without the body being sent, and the
//! connection is closed so the client cannot stream it anyway.

use crate::common;

use std::time::{Duration, Instant};

use delayd_server::ServerOptions;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::raw;

async fn declare(server: &common::Server, length: u64) -> (String, Duration, TcpStream) {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/queues/q/messages HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    );
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = raw::read_response(&mut stream, Duration::from_secs(1)).await;
    let answer = answer.expect("no answer within 1 s to the head alone");
    (answer, started.elapsed(), stream)
}

#[tokio::test]
async fn content_length_of_100_mib_gets_413_at_once_with_1_mib_payloads() {
    let server = common::start_default().await;
    let (answer, took, mut stream) = declare(&server, 104_857_600).await;
    println!("413 after {took:?}");
    assert_eq!(raw::status(&answer), 413, "{answer}");
    assert!(answer.contains(r#""code":"payload_too_large""#), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(raw::closed_within(&mut stream, Duration::from_secs(1)).await);
}

#[tokio::test]
async fn content_length_is_checked_against_the_configured_body_cap() {
    let options = ServerOptions {
        max_body: 2 * 1024 * 1024,
        ..ServerOptions::default()
    };
    let server = common::start(common::model(), options).await;
    let (answer, _, _) = declare(&server, 2 * 1024 * 1024 + 1).await;
    assert_eq!(raw::status(&answer), 413, "{answer}");

    // At the cap, the header passes and the server waits for the body.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /v1/queues/q/messages HTTP/1.1\r\nhost: t\r\ncontent-length: 2097152\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let early = raw::read_response(&mut stream, Duration::from_millis(300)).await;
    assert!(early.is_none(), "answered before the body: {early:?}");
}
