//! The `delayd` binary against an in-process server on 127.0.0.1:0: the
//! people-facing round trip, `--json` output, exit codes, and a small bench.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;
use serde_json::Value;

/// Serves a fresh model broker for as long as the test's runtime lives.
async fn server() -> String {
    server_with(ServerOptions::default()).await
}

async fn server_with(options: ServerOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = delayd_server::app(Arc::new(ModelBroker::new()), options);
    tokio::spawn(delayd_server::serve_http(
        listener,
        app,
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// Runs `delayd ARGS --server URL` with `stdin` piped in, off the async
/// workers (the server runs on them).
async fn delayd(url: &str, args: &[&str], stdin: Option<&str>) -> Output {
    delayd_with_token(url, args, stdin, None).await
}

/// [`delayd`] with `DELAYD_TOKEN` set to `token` (unset when `None`).
async fn delayd_with_token(
    url: &str,
    args: &[&str],
    stdin: Option<&str>,
    token: Option<&str>,
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayd"));
    command
        .args(args)
        .args(["--server", url])
        .env_remove("DELAYD_TOKEN");
    if let Some(token) = token {
        command.env("DELAYD_TOKEN", token);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.unwrap_or_default().to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().expect("spawn delayd");
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(stdin.as_bytes()).expect("write stdin");
        drop(pipe);
        child.wait_with_output().expect("wait for delayd")
    })
    .await
    .expect("join")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn ok(output: Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {stderr}",
        output.status
    );
    stdout(&output)
}

fn json(output: Output) -> Value {
    let text = ok(output);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_ack_round_trip() {
    let url = server().await;
    let put = delayd(
        &url,
        &["put", "jobs", "--id", "m1", "--header", "k=v", "hello"],
        None,
    )
    .await;
    assert!(ok(put).contains("enqueued: id m1"));
    let got = json(delayd(&url, &["get", "jobs", "--json"], None).await);
    let message = &got["messages"][0];
    assert_eq!(message["id"], "m1");
    assert_eq!(message["payload"], "hello");
    assert_eq!(message["attempt"], 1);
    assert_eq!(message["headers"]["k"], "v");
    let lease = message["lease_id"].as_str().unwrap();
    assert!(ok(delayd(&url, &["ack", "jobs", "m1", lease], None).await).contains("acked m1"));
    let stats = json(delayd(&url, &["stats", "jobs", "--json"], None).await);
    assert_eq!(stats["stats"]["ready"], 0);
    assert_eq!(stats["stats"]["leased"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_payload_delays_and_tables() {
    let url = server().await;
    ok(delayd(&url, &["put", "q1", "--id", "piped"], Some("from stdin")).await);
    ok(delayd(&url, &["put", "q1", "--delay", "1h", "later"], None).await);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = (now_ms + 7_200_000).to_string();
    ok(delayd(&url, &["put", "q1", "--at", &at, "much later"], None).await);
    let printed = ok(delayd(&url, &["get", "q1", "--ack", "--wait", "1s"], None).await);
    assert!(
        printed.contains("id piped") && printed.contains("from stdin"),
        "{printed}"
    );
    let table = ok(delayd(&url, &["queues"], None).await);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("SCHEDULED"),
        "{table}"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    // name, scheduled, ready, leased, dead, paused: the acked one is gone.
    assert_eq!(row, ["q1", "2", "0", "0", "0", "no"], "{table}");
    let listed = json(delayd(&url, &["queues", "--json"], None).await);
    assert_eq!(listed["queues"][0]["name"], "q1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_several_in_one_request() {
    let url = server().await;
    for id in ["a", "b"] {
        ok(delayd(&url, &["put", "many", "--id", id, "x"], None).await);
    }
    let got = json(delayd(&url, &["get", "many", "--max", "2", "--json"], None).await);
    let leases: Vec<(String, String)> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let field = |k: &str| m[k].as_str().unwrap().to_string();
            (field("id"), field("lease_id"))
        })
        .collect();
    assert_eq!(leases.len(), 2, "{got}");
    let (a, b) = (&leases[0], &leases[1]);
    let args = [
        "ack", "many", &a.0, &a.1, &b.0, &b.1, "missing", "lease", "--json",
    ];
    let out = delayd(&url, &args, None).await;
    assert!(!out.status.success(), "one of three failed: nonzero exit");
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["acked"], true);
    assert_eq!(lines[1]["acked"], true);
    assert_eq!(lines[2]["error"]["code"], "message_not_found");
    let odd = delayd(&url, &["ack", "many", "a", "l", "b"], None).await;
    assert_eq!(
        odd.status.code(),
        Some(2),
        "an unpaired id is a usage error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_and_cancel() {
    let url = server().await;
    ok(delayd(&url, &["put", "q", "--id", "n", "x"], None).await);
    let got = json(delayd(&url, &["get", "q", "--json", "--lease", "30s"], None).await);
    let lease = got["messages"][0]["lease_id"].as_str().unwrap().to_owned();
    let nack = [
        "nack",
        "q",
        "n",
        &lease,
        "--delay",
        "1h",
        "--error",
        "card declined",
    ];
    ok(delayd(&url, &nack, None).await);
    let stats = json(delayd(&url, &["stats", "q", "--json"], None).await);
    assert_eq!(stats["stats"]["scheduled"], 1);
    let message = delayd_client::Client::new(&url)
        .unwrap()
        .get_message("q", "n")
        .await
        .unwrap();
    assert_eq!(message.last_error.as_deref(), Some("card declined"));
    let done = json(delayd(&url, &["cancel", "q", "n", "--json"], None).await);
    assert_eq!(done["cancelled"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_messages() {
    let url = server().await;
    // Server answered an error: 1, with the API's code on stderr.
    let refused = delayd(&url, &["ack", "q", "missing", "lease"], None).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("message_not_found"));
    // Usage: 2.
    let usage = delayd(&url, &["put", "q", "--delay", "1s", "--at", "5", "x"], None).await;
    assert_eq!(usage.status.code(), Some(2));
    let bad_duration = delayd(&url, &["put", "q", "--delay", "soon", "x"], None).await;
    assert_eq!(bad_duration.status.code(), Some(2));
    // Nobody listening: 3, and a message saying so.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gone = delayd(&format!("http://{port}"), &["queues"], None).await;
    assert_eq!(gone.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(
        stderr.contains("cannot reach the delayd server"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_bench_loses_nothing() {
    let url = server().await;
    for batch in ["1", "25"] {
        let args = [
            "bench",
            "--messages",
            "200",
            "--producers",
            "2",
            "--consumers",
            "2",
            "--delay-min",
            "0ms",
            "--delay-max",
            "200ms",
            "--duration",
            "5s",
            "--drain",
            "3s",
            "--batch",
            batch,
            "--lease-max",
            "50",
            "--json",
        ];
        let report = json(delayd(&url, &args, None).await);
        assert_eq!(report["enqueued"], 200, "{report}");
        assert_eq!(report["delivered"], 200, "{report}");
        assert_eq!(report["early"], 0, "{report}");
        assert_eq!(report["lost"], 0, "{report}");
        assert_eq!(report["still_queued"], 0, "{report}");
        assert_eq!(report["duplicates"], 0, "{report}");
        assert_eq!(report["timed_out"], false, "{report}");
        assert!(report["lateness_ms"]["p99"].as_u64().is_some(), "{report}");
    }
    // The generated queues were deleted afterwards.
    let listed = json(delayd(&url, &["queues", "--json"], None).await);
    assert_eq!(listed["queues"], serde_json::json!([]), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_from_flag_or_environment() {
    let options = ServerOptions {
        tokens: vec!["s3cret".into()],
        ..ServerOptions::default()
    };
    let url = server_with(options).await;
    let refused = delayd(&url, &["queues"], None).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("unauthorized"));
    ok(delayd(&url, &["queues", "--token", "s3cret"], None).await);
    // The server's comma-separated DELAYD_TOKEN list works for the client too.
    ok(delayd_with_token(&url, &["queues"], None, Some("s3cret,other")).await);
}
