//! Push delivery across a SIGKILL: with deliveries in flight to a slow
//! receiver, `delayd serve` is killed and restarted on the same data
//! directory; every message is still delivered (at least once, with a 2xx
//! answer), those in flight at the kill come back with their attempt
//! counted, and the queue ends empty.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

/// A `delayd serve` child process, SIGKILLed when dropped so a failing test
/// leaves nothing running.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `delayd serve ARGS` in `cwd` with `env` (and no other
    /// `DELAYD_*` variable), and reads the bound HTTP address from its
    /// "HTTP API listening" line.
    fn start_with(args: &[&str], cwd: Option<&Path>, env: &[(&str, String)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_delayd"));
        command.arg("serve").args(args);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("DELAYD_") {
                command.env_remove(name);
            }
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        command
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn delayd serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let line = strip_ansi(&line);
                if line.contains("HTTP API listening") {
                    if let Some(addr) = bound_addr(&line) {
                        let _ = tx.send(addr);
                    }
                }
                lines.lock().unwrap().push(line);
            }
        });
        let mut server = Server {
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            log,
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => server.addr = addr,
            Err(_) => panic!("no \"HTTP API listening\" line; log:\n{}", server.log()),
        }
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn bound_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("bound=")? + "bound=".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

async fn wait_healthy(http: &reqwest::Client, server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = http.get(server.url("/healthz")).send().await {
            if response.status().is_success() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "/healthz never answered; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every push request the receiver got, and those it answered 200.
#[derive(Default)]
struct Receiver {
    /// (delayd-id, delayd-attempt) on arrival.
    received: Mutex<Vec<(String, u64)>>,
    /// (delayd-id, delayd-attempt), recorded just before answering 200.
    answered: Mutex<Vec<(String, u64)>>,
}

async fn hook(State(receiver): State<Arc<Receiver>>, headers: HeaderMap) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (Some(id), Some(attempt)) = (header("delayd-id"), header("delayd-attempt")) else {
        return StatusCode::BAD_REQUEST;
    };
    let Ok(attempt) = attempt.parse::<u64>() else {
        return StatusCode::BAD_REQUEST;
    };
    receiver
        .received
        .lock()
        .unwrap()
        .push((id.clone(), attempt));
    // Slow, so that deliveries are in flight when the server is killed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    receiver.answered.lock().unwrap().push((id, attempt));
    StatusCode::OK
}

async fn queue_stats(http: &reqwest::Client, server: &Server) -> Value {
    let response = http
        .get(server.url("/v1/queues/p"))
        .send()
        .await
        .expect("GET queue");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["stats"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_deliveries_in_flight_at_sigkill_are_redelivered() {
    let receiver = Arc::new(Receiver::default());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let data = tempfile::tempdir().unwrap();
    let data_arg = data.path().to_str().unwrap();
    // Loopback targets are refused unless a CIDR entry covers them
    // (docs/push.md); the URL uses the IP literal, so the CIDR suffices.
    let args = [
        "--http",
        "127.0.0.1:0",
        "--beanstalk",
        "off",
        "--data",
        data_arg,
        "--push-allow",
        "127.0.0.0/8",
    ];
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut server = Server::start_with(&args, None, &[]);
    wait_healthy(&http, &server).await;

    let response = http
        .put(server.url("/v1/queues/p"))
        .json(&json!({
            "push": {"url": hook_url, "timeout_ms": 2000, "concurrency": 8},
            "retry": {"initial_ms": 100, "max_ms": 1000, "multiplier": 2.0},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());

    let ids: Vec<String> = (0..200).map(|i| format!("p-{i}")).collect();
    let messages: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| json!({"id": id, "payload": format!("message {i}"), "delay_ms": (i % 10) * 50}))
        .collect();
    let response = http
        .post(server.url("/v1/queues/p/batch"))
        .json(&json!({ "messages": messages }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 200);
    for result in results {
        assert_eq!(result["created"], true, "{result}");
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    // Kill once 30 deliveries were answered and some are in flight (the
    // dispatcher sends in waves of up to `concurrency`, so there are short
    // moments with none in flight).
    while receiver.answered.lock().unwrap().len() < 30
        || receiver.received.lock().unwrap().len() <= receiver.answered.lock().unwrap().len()
    {
        assert!(
            Instant::now() < deadline,
            "push made no progress; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill9();
    // Taken after the process is gone: an entry received but not answered
    // now was never answered to the killed server, so it cannot have been
    // acked and must be delivered again.
    let in_flight: HashSet<String> = {
        let answered: HashSet<(String, u64)> =
            receiver.answered.lock().unwrap().iter().cloned().collect();
        receiver
            .received
            .lock()
            .unwrap()
            .iter()
            .filter(|delivery| !answered.contains(delivery))
            .map(|(id, _)| id.clone())
            .collect()
    };
    let killed_at = receiver.received.lock().unwrap().len();
    assert!(
        !in_flight.is_empty(),
        "no delivery was in flight at the kill"
    );

    let server = Server::start_with(&args, None, &[]);
    wait_healthy(&http, &server).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answered: HashSet<String> = receiver
            .answered
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect();
        let missing = ids.iter().filter(|id| !answered.contains(*id)).count();
        let stats = queue_stats(&http, &server).await;
        let empty = ["scheduled", "ready", "leased", "dead"]
            .iter()
            .all(|k| stats[k] == 0);
        if missing == 0 && empty {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s: {missing} messages never delivered, stats {stats}; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Those in flight at the kill came back as failed attempts.
    let mut after_restart: HashMap<String, u64> = HashMap::new();
    for (id, attempt) in receiver.received.lock().unwrap()[killed_at..].iter() {
        let entry = after_restart.entry(id.clone()).or_insert(*attempt);
        *entry = (*entry).max(*attempt);
    }
    for id in &in_flight {
        let attempt = after_restart.get(id).copied();
        assert!(
            attempt.is_some_and(|a| a >= 2),
            "{id} was in flight at the kill; after the restart: attempt {attempt:?}"
        );
    }
    for id in &ids {
        let response = http
            .get(server.url(&format!("/v1/queues/p/messages/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{id} should be acked and gone");
    }
    let received = receiver.received.lock().unwrap().len();
    eprintln!(
        "{received} deliveries for 200 messages, {} in flight at the kill",
        in_flight.len()
    );
}
