//! A slow-body flood: twice the connection limit in requests whose heads
//! arrive at once and whose bodies trickle in a byte at a time. Every slot
//! is busy, so nothing is idle to evict; the body timeout and minimum rate
//! close the tricklers, count them, and free their slots, so a new client
//! is answered within about the body timeout. The slow-body counter is
//! process-wide, so it is checked as a lower bound (other tests of this
//! binary may add to it).

use crate::common;

use std::time::{Duration, Instant};

use delayd_server::{ConnectionLimits, ServerOptions};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::raw;

const LIMIT: usize = 8;
const BODY_TIMEOUT: Duration = Duration::from_secs(1);
/// One byte every `TRICKLE`: far below the minimum rate the test sets.
const TRICKLE: Duration = Duration::from_millis(500);
/// How long the tricklers keep going if nobody stops them.
const FLOOD_FOR: Duration = Duration::from_secs(12);

async fn trickle(addr: std::net::SocketAddr) -> Option<Duration> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let head = "POST /v1/queues/orders/messages HTTP/1.1\r\nhost: test\r\n\
                content-type: application/json\r\ncontent-length: 1000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.ok()?;
    let started = Instant::now();
    while started.elapsed() < FLOOD_FOR {
        if stream.write_all(b" ").await.is_err() {
            return Some(started.elapsed());
        }
        if raw::closed_within(&mut stream, TRICKLE).await {
            return Some(started.elapsed());
        }
    }
    None
}

/// Asks `GET /healthz` on fresh connections until one answers 200.
async fn first_ok(addr: std::net::SocketAddr, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let mut client = TcpStream::connect(addr).await.unwrap();
        raw::send_get(&mut client, "/healthz").await;
        let answer = raw::read_response(&mut client, Duration::from_secs(1)).await;
        if answer.is_some_and(|answer| raw::status(&answer) == 200) {
            return Some(started.elapsed());
        }
        // Polls: a real socket's answer has no event this test can await.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_are_closed_and_a_new_client_is_answered() {
    let limits = ConnectionLimits {
        max_connections: LIMIT,
        body_timeout: BODY_TIMEOUT,
        // 100 B/s: the tricklers' 2 B/s earn 20 ms a second.
        body_min_rate: 100,
        ..ConnectionLimits::default()
    };
    let listener = common::bind().await.with_limits(limits);
    let server = common::start_on(listener, common::model(), ServerOptions::default());
    let flood: Vec<_> = (0..2 * LIMIT)
        .map(|_| tokio::spawn(trickle(server.addr)))
        .collect();
    // Kept: lets the flood's connections open before the probe (real sockets); the probe's verdict bounds the wait, not this sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let waited = first_ok(server.addr, BODY_TIMEOUT * 5).await;
    let waited = waited.expect("no 200 for a new client behind the slow-body flood");
    println!("new client answered after {waited:?}");

    let mut closed = 0;
    for trickler in flood {
        if trickler.await.unwrap().is_some() {
            closed += 1;
        }
    }
    assert_eq!(
        closed,
        2 * LIMIT,
        "every trickler is closed (refused or timed out)"
    );

    let metrics = server.call("GET", "/metrics", None).await;
    let page = metrics.body.as_str().expect("the metrics page is text");
    let slow = page
        .lines()
        .find_map(|line| {
            line.strip_prefix("delayd_http_slow_bodies_total ")?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no delayd_http_slow_bodies_total:\n{page}"));
    assert!(slow >= LIMIT as f64, "{slow} slow bodies counted");
    server.stop().await.expect("stopped");
}

async fn server_with_body_limits(timeout: Duration, min_rate: u64) -> common::Server {
    let limits = ConnectionLimits {
        body_timeout: timeout,
        body_min_rate: min_rate,
        ..ConnectionLimits::default()
    };
    let listener = common::bind().await.with_limits(limits);
    common::start_on(listener, common::model(), ServerOptions::default())
}

#[tokio::test]
async fn a_body_above_the_minimum_rate_may_take_longer_than_the_timeout() {
    let server = server_with_body_limits(Duration::from_millis(500), 1000).await;
    let body = format!(
        r#"{{"payload": "{}", "delay_ms": 60000}}"#,
        "x".repeat(3000)
    );
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/queues/orders/messages HTTP/1.1\r\nhost: test\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // 300 bytes every 200 ms: 1500 B/s, about 2 s in all.
    for chunk in body.as_bytes().chunks(300) {
        // Kept: the server's timeouts run on real time over a real socket (the test paces its bytes against them).
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(chunk).await.unwrap();
    }
    let answer = raw::read_response(&mut stream, Duration::from_secs(2))
        .await
        .expect("an answer");
    assert!(started.elapsed() > Duration::from_millis(1500));
    assert_eq!(raw::status(&answer), 201, "{answer}");
}

#[tokio::test]
async fn a_body_below_the_minimum_rate_is_answered_408_and_closed() {
    let server = server_with_body_limits(Duration::from_millis(500), 1000).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /v1/queues/orders/messages HTTP/1.1\r\nhost: test\r\n\
                content-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let answer = raw::read_response(&mut stream, Duration::from_secs(3))
        .await
        .expect("an answer");
    let elapsed = started.elapsed();
    assert_eq!(raw::status(&answer), 408, "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(
        elapsed >= Duration::from_millis(450) && elapsed < Duration::from_millis(1500),
        "answered after {elapsed:?}"
    );
    assert!(raw::closed_within(&mut stream, Duration::from_millis(500)).await);
}
