//! The "hostile conditions" finding, reproduced at a small scale: `delayd
//! serve` under `ulimit -n 256` with no `--max-connections`, flooded with
//! far more idle HTTP connections than it has file descriptors. A new
//! client is still answered promptly (before the fix, accept failed with
//! EMFILE and the client waited forever), and /metrics shows the limits
//! derived from the descriptor limit, split between the two listeners.

use crate::common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::Server;

const FD_LIMIT: u32 = 256;

#[test]
fn idle_flood_beyond_the_fd_limit_does_not_lock_out_a_new_client() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let args = common::both_listeners_args(data, &[]);
    let server = Server::spawn(common::serve_command_with_fd_limit(FD_LIMIT, &args))
        .unwrap_or_else(|log| panic!("server did not start:\n{log}"));

    let mut flood = Vec::new();
    for _ in 0..3 * FD_LIMIT {
        flood.push(TcpStream::connect(server.addr).expect("connect"));
    }
    let started = Instant::now();
    let health = server.http_get("/healthz");
    let latency = started.elapsed();
    println!(
        "new client answered in {latency:?} behind {} idle connections",
        flood.len()
    );
    assert!(
        health.starts_with("HTTP/1.1 200"),
        "{health}\n{}",
        server.log()
    );
    assert!(
        latency < Duration::from_secs(2),
        "answered after {latency:?}"
    );

    // 256 descriptors: 128 for clients, split evenly (docs/operations.md).
    let metrics = server.http_get("/metrics");
    assert!(
        metrics.contains("\ndelayd_http_max_connections 64\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\ndelayd_beanstalk_max_connections 64\n"),
        "{metrics}"
    );
}
