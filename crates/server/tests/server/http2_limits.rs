//! HTTP/2 connections: they stay open between requests for the idle
//! timeout (not the header timeout; pings and settings frames are not the
//! start of a request), advertise the concurrent-stream limit, and a client
//! that cancels requests faster than the limit allows (the 2023 "rapid
//! reset" flood) is cut off, while no ordinary answer (HTTP/1 or 2, any
//! body, HEAD) counts as cancelled. The flood counter is process-wide:
//! `a_rapid_reset_flood_is_cut_off` is the only test of this binary
//! that makes a connection go over its cancelled-request limit.

use crate::common;

use std::time::{Duration, Instant};

use axum::http::{Method, Request};
use delayd_server::{ConnectionLimits, ServerOptions};
use h2::client::SendRequest;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

type Connection = JoinHandle<Result<(), h2::Error>>;

async fn server(limits: ConnectionLimits) -> common::Server {
    let listener = common::bind().await.with_limits(limits);
    common::start_on(listener, common::model(), ServerOptions::default())
}

/// An HTTP/2 connection (prior knowledge, plain TCP), its ping handle and
/// the task driving it (ends when the server closes the connection).
async fn connect(
    addr: std::net::SocketAddr,
) -> (SendRequest<axum::body::Bytes>, h2::PingPong, Connection) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let ping = connection.ping_pong().expect("the ping handle");
    (client, ping, tokio::spawn(connection))
}

async fn get(client: &mut SendRequest<axum::body::Bytes>, path: &str) -> Result<u16, h2::Error> {
    let request = Request::get(format!("http://test{path}")).body(()).unwrap();
    let mut ready = client.clone().ready().await?;
    let (response, _) = ready.send_request(request, true)?;
    Ok(response.await?.status().as_u16())
}

#[tokio::test]
async fn an_http2_connection_idles_by_the_idle_timeout_not_the_header_timeout() {
    let idle = Duration::from_secs(2);
    let server = server(ConnectionLimits {
        header_timeout: Duration::from_millis(300),
        idle_timeout: idle,
        ..ConnectionLimits::default()
    })
    .await;
    let (mut client, mut ping, connection) = connect(server.addr).await;
    assert_eq!(get(&mut client, "/healthz").await.unwrap(), 200);
    // Frames that are not a request (a ping) well past the header timeout,
    // then a second request on the same connection.
    for _ in 0..4 {
        // Kept: the server's timeouts run on real time over a real socket (the test paces its bytes against them).
        tokio::time::sleep(Duration::from_millis(200)).await;
        ping.ping(h2::Ping::opaque()).await.expect("ping answered");
    }
    assert_eq!(get(&mut client, "/healthz").await.expect("still open"), 200);
    let idle_from = Instant::now();
    // Pings do not keep it open past the idle timeout either.
    let closed = tokio::time::timeout(idle * 3, async {
        while ping.ping(h2::Ping::opaque()).await.is_ok() {
            // Kept: the server's timeouts run on real time over a real socket (the test paces its bytes against them).
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let elapsed = idle_from.elapsed();
    assert!(closed.is_ok(), "still open after {elapsed:?}");
    assert!(
        elapsed >= idle - Duration::from_millis(100),
        "closed after {elapsed:?}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), connection).await;
}

#[tokio::test]
async fn an_http2_connection_advertises_the_stream_limit() {
    let server = server(ConnectionLimits {
        http2_max_streams: 8,
        ..ConnectionLimits::default()
    })
    .await;
    let (mut client, _ping, _connection) = connect(server.addr).await;
    assert_eq!(get(&mut client, "/healthz").await.unwrap(), 200);
    assert_eq!(client.current_max_send_streams(), 8);
}

#[tokio::test]
async fn a_rapid_reset_flood_is_cut_off() {
    const ALLOWED: u32 = 50;
    let server = server(ConnectionLimits {
        max_cancelled_requests: ALLOWED,
        ..ConnectionLimits::default()
    })
    .await;
    let (client, _ping, connection) = connect(server.addr).await;
    // Each stream: a POST whose body never comes (the handler starts and
    // waits for it), cancelled a moment later.
    let mut opened = 0u32;
    let started = Instant::now();
    while opened < 20 * ALLOWED && started.elapsed() < Duration::from_secs(20) {
        let Ok(mut ready) = client.clone().ready().await else {
            break;
        };
        let request = Request::builder()
            .method(Method::POST)
            .uri("http://test/v1/queues/orders/messages")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let Ok((_response, mut body)) = ready.send_request(request, false) else {
            break;
        };
        opened += 1;
        // Paces the streams opened; the limit, not the pace, decides the verdict.
        tokio::time::sleep(Duration::from_millis(2)).await;
        body.send_reset(h2::Reason::CANCEL);
    }
    let ended = tokio::time::timeout(Duration::from_secs(2), connection).await;
    assert!(
        ended.is_ok(),
        "the connection survived {opened} cancelled requests"
    );
    assert!(
        opened <= 4 * ALLOWED,
        "{opened} requests cancelled before the connection was closed"
    );
    let page = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let cut = page.lines().find_map(|line| {
        line.strip_prefix("delayd_http_reset_floods_total ")?
            .parse::<f64>()
            .ok()
    });
    assert_eq!(cut, Some(1.0), "{page}");
}

/// Routes with every kind of answer body (empty, small JSON, large JSON,
/// text, static files), for the tests that no ordinary answer counts as
/// a cancelled request.
const PATHS: &[&str] = &[
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/ui",
    "/ui/",
    "/v1/queues",
    "/v1/queues/missing",
    "/no/such/route",
];

#[tokio::test]
async fn ordinary_http2_requests_are_not_counted_as_cancelled() {
    let server = server(ConnectionLimits {
        max_cancelled_requests: 2,
        ..ConnectionLimits::default()
    })
    .await;
    let (mut client, _ping, _connection) = connect(server.addr).await;
    for round in 0..5 {
        for path in PATHS {
            let status = get(&mut client, path).await;
            assert!(status.is_ok(), "round {round}, {path}: {status:?}");
        }
        let head = Request::head("http://test/healthz").body(()).unwrap();
        let mut ready = client.clone().ready().await.unwrap();
        let (response, _) = ready.send_request(head, true).unwrap();
        assert_eq!(response.await.unwrap().status(), 200, "HEAD");
    }
}

#[tokio::test]
async fn ordinary_http1_requests_are_not_counted_as_cancelled() {
    use tokio::io::AsyncWriteExt;
    let server = server(ConnectionLimits {
        max_cancelled_requests: 2,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    for round in 0..5 {
        for path in PATHS {
            common::raw::send_get(&mut stream, path).await;
            let answer = common::raw::read_response(&mut stream, Duration::from_secs(5)).await;
            assert!(answer.is_some(), "round {round}, {path}: no answer");
        }
        let body = r#"{"payload": "x", "delay_ms": 60000}"#;
        let post = format!(
            "POST /v1/queues/orders/messages HTTP/1.1\r\nhost: t\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(post.as_bytes()).await.unwrap();
        let answer = common::raw::read_response(&mut stream, Duration::from_secs(5)).await;
        assert!(answer.is_some(), "round {round}: no answer to the POST");
    }
}
