//! `delayd bench --http2 --connections N` against a real `delayd serve`
//! (embedded store, `--durability always`) through a relay that counts
//! connections and keeps their first bytes: N connections for the tasks
//! plus one for the bench's own calls, every one opened with the HTTP/2
//! preface; the report counts the server's commits. Against a server whose
//! `/metrics` has no commit counter, the figures are null and the bench
//! still succeeds. A binary of its own: the in-process server's `/metrics`
//! is the process-wide recorder, where any other test's in-process
//! LocalBroker (cli_check.rs) would put a commit counter.

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;
use serde_json::Value;
use tokio::net::TcpListener;

use delayd_core::testkit::relay::{relay, HTTP2_PREFACE as PREFACE};

/// `delayd bench --server URL ARGS --json`, off the async workers.
async fn bench(url: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayd"));
    command
        .arg("bench")
        .args(["--server", url, "--json", "--messages", "300"])
        .args(["--delay-min", "0ms", "--delay-max", "100ms"])
        .args(["--duration", "20s", "--drain", "5s"])
        .args(args)
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || command.output().expect("run delayd bench"))
        .await
        .expect("join")
}

fn report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_runs_on_the_given_connections_and_counts_commits() {
    let data = tempfile::tempdir().expect("tempdir");
    let server = common::Server::start(data.path());
    let (url, openings) = relay(server.addr).await;
    let args = ["--http2", "--connections", "2", "--producers", "8"];
    let report = report(&bench(&url, &args).await);
    assert_eq!(report["delivered"], 300, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["http2"], true, "{report}");
    assert_eq!(report["connections"], 2, "{report}");
    // 300 enqueues and 300 acks need at least one commit; each commit
    // answers at least one of them.
    let commits = report["commits"].as_u64().expect("commits counted");
    assert!((1..=600 + 10).contains(&commits), "{report}");
    assert!(
        report["commits_per_s"].as_f64().expect("rate") > 0.0,
        "{report}"
    );

    let openings = openings.lock().expect("openings").clone();
    assert_eq!(openings.len(), 3, "2 for the tasks, 1 for the bench's own");
    assert!(openings.iter().all(|o| o == PREFACE), "{openings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_null_without_the_counter_and_http1_is_the_default() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = delayd_server::app(Arc::new(ModelBroker::new()), ServerOptions::default());
    tokio::spawn(delayd_server::serve_http(
        listener,
        app,
        std::future::pending(),
    ));
    let (url, openings) = relay(addr).await;
    let report = report(&bench(&url, &["--connections", "2"]).await);
    assert_eq!(report["delivered"], 300, "{report}");
    assert_eq!(report["commits"], Value::Null, "{report}");
    assert_eq!(report["commits_per_s"], Value::Null, "{report}");
    assert_eq!(report["http2"], false, "{report}");
    let openings = openings.lock().expect("openings").clone();
    assert!(openings.iter().all(|o| o != PREFACE), "{openings:?}");
}
