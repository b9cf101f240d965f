//! An idle flood: twice the connection limit in idle connections. The limit
//! holds (the longest-idle connections are closed to make room), a new
//! client is still answered at once, and /metrics reports the limit and the
//! open connections. Alone in its binary: the gauges are process-wide.

#[path = "server/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use delayd_server::{ConnectionLimits, ServerOptions};
use tokio::net::TcpStream;

use common::raw;

const LIMIT: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_flood_does_not_lock_out_a_new_client() {
    let limits = ConnectionLimits {
        max_connections: LIMIT,
        ..ConnectionLimits::default()
    };
    let listener = common::bind().await.with_limits(limits);
    let server = common::start_on(listener, common::model(), ServerOptions::default());
    let mut flood = Vec::new();
    for _ in 0..2 * LIMIT {
        flood.push(TcpStream::connect(server.addr).await.unwrap());
    }

    let started = Instant::now();
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    raw::send_get(&mut client, "/healthz").await;
    let answer = raw::read_response(&mut client, Duration::from_secs(2)).await;
    let latency = started.elapsed();
    let answer = answer.expect("the new client was not answered within 2 s");
    assert_eq!(raw::status(&answer), 200, "{answer}");
    println!(
        "new client answered in {latency:?} behind {} idle connections",
        flood.len()
    );
    assert!(
        latency < Duration::from_secs(1),
        "answered after {latency:?}"
    );

    // The oldest idle connections made room; the newest are still open.
    assert!(raw::closed_within(&mut flood[0], Duration::from_secs(1)).await);
    let newest = flood.last_mut().unwrap();
    assert!(!raw::closed_within(newest, Duration::from_millis(100)).await);

    raw::send_get(&mut client, "/metrics").await;
    let metrics = raw::read_response(&mut client, Duration::from_secs(2))
        .await
        .expect("/metrics answered");
    assert_eq!(gauge(&metrics, "delayd_http_max_connections"), LIMIT as f64);
    let open = gauge(&metrics, "delayd_http_connections");
    assert!(
        (LIMIT as f64 / 2.0..=LIMIT as f64).contains(&open),
        "open connections {open}, limit {LIMIT}"
    );
}

fn gauge(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{page}"))
}
