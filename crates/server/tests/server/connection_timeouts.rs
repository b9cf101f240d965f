//! Header and idle timeouts, and the limit when every connection is busy:
//! slow request heads and idle connections (new or kept alive) are closed
//! after their timeout, a request in progress is never cut by them, and a
//! new connection at a limit of busy connections gets a quick 503.

use crate::common;

use std::time::{Duration, Instant};

use delayd_server::{ConnectionLimits, ServerOptions};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::raw;

const SHORT: Duration = Duration::from_millis(400);
const LONG: Duration = Duration::from_secs(30);

async fn server(header_timeout: Duration, idle_timeout: Duration) -> common::Server {
    let limits = ConnectionLimits {
        header_timeout,
        idle_timeout,
        ..ConnectionLimits::default()
    };
    let listener = common::bind().await.with_limits(limits);
    common::start_on(listener, common::model(), ServerOptions::default())
}

#[tokio::test]
async fn slow_request_head_is_closed_after_the_header_timeout() {
    let server = server(SHORT, LONG).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    // One header byte every 100 ms: never a complete head.
    let mut closed = false;
    for byte in b"host: slowly-sent-header-value".iter().cycle().take(100) {
        // Kept: the server's timeouts run on real time over a real socket (the test paces its bytes against them).
        tokio::time::sleep(Duration::from_millis(100)).await;
        if stream.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
    }
    let closed = closed || raw::closed_within(&mut stream, Duration::from_millis(100)).await;
    let elapsed = started.elapsed();
    assert!(closed, "a slow head was still open after {elapsed:?}");
    assert!(
        elapsed >= SHORT && elapsed < SHORT * 5,
        "closed after {elapsed:?}"
    );
}

#[tokio::test]
async fn new_silent_connection_is_closed_after_the_idle_timeout() {
    let server = server(LONG, SHORT).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    assert!(raw::closed_within(&mut stream, SHORT * 5).await);
    assert!(
        started.elapsed() >= SHORT,
        "closed after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = server(LONG, SHORT).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // Requests within the idle timeout keep the connection.
    let mut last_answer = Instant::now();
    for _ in 0..3 {
        raw::send_get(&mut stream, "/healthz").await;
        let answer = raw::read_response(&mut stream, Duration::from_secs(2)).await;
        assert_eq!(raw::status(&answer.expect("answered")), 200);
        last_answer = Instant::now();
        // Kept: the server's timeouts run on real time over a real socket (the test paces its bytes against them).
        tokio::time::sleep(SHORT / 2).await;
    }
    assert!(raw::closed_within(&mut stream, SHORT * 5).await);
    // Idle is counted from the last answer: the server's clock starts when
    // it wrote it, a moment before the client read it, hence the margin.
    let idle = last_answer.elapsed();
    assert!(idle >= SHORT - SHORT / 4, "closed after {idle:?} idle");
}

#[tokio::test]
async fn request_in_progress_outlives_the_idle_and_header_timeouts() {
    let server = server(SHORT, SHORT).await;
    let started = Instant::now();
    let lease = server
        .call(
            "POST",
            "/v1/queues/q/leases",
            Some(json!({"wait_ms": SHORT.as_millis() as u64 * 3})),
        )
        .await;
    assert_eq!(lease.status, 200, "{}", lease.body);
    assert!(started.elapsed() >= SHORT * 3);
}

#[tokio::test]
async fn new_connection_gets_503_when_every_connection_is_busy() {
    let limits = ConnectionLimits {
        max_connections: 2,
        ..ConnectionLimits::default()
    };
    let listener = common::bind().await.with_limits(limits);
    let server = common::start_on(listener, common::model(), ServerOptions::default());
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let body = r#"{"wait_ms": 3000}"#;
        let request = format!(
            "POST /v1/queues/q/leases HTTP/1.1\r\nhost: t\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        waiting.push(stream);
    }
    // Kept: the server's timeouts run on real time over a real socket (the test paces its bytes against them).
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let mut refused = TcpStream::connect(server.addr).await.unwrap();
    raw::send_get(&mut refused, "/healthz").await;
    let answer = raw::read_response(&mut refused, Duration::from_secs(2)).await;
    let answer = answer.expect("a 503 at once");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(raw::status(&answer), 503, "{answer}");
    assert!(answer.contains(r#""code":"unavailable""#), "{answer}");
    assert!(raw::closed_within(&mut refused, Duration::from_secs(1)).await);

    // The busy requests were not disturbed.
    for stream in &mut waiting {
        let answer = raw::read_response(stream, Duration::from_secs(5)).await;
        assert_eq!(raw::status(&answer.expect("lease answered")), 200);
    }
}
