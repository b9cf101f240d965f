//! `delayd serve` on a real, small filesystem (a 24 MiB tmpfs) filled up:
//! producers get 507 `insufficient_storage` once free space falls below
//! `--disk-reserve`, never a poisoned store; consumers keep leasing and
//! acking; after space is freed (a filler file deleted) enqueues resume
//! without a restart; after a restart every acknowledged, unacked message
//! is there. The store's gauges (free space, refusing, block cache) are
//! read from `/metrics` on the way. Mounting needs root (CI and
//! `scripts/test` run as root); without it the test fails and says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{local_serve_args, wait_healthy, Server};

/// A tmpfs mounted on a temporary directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .ok()?;
        status.success().then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes zeros into `path` until the filesystem is full or `limit` bytes
/// are written.
fn fill(path: &Path, limit: usize) {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path).expect("filler file");
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..limit >> 20 {
        if file.write_all(&chunk).is_err() {
            break;
        }
    }
}

async fn enqueue(http: &reqwest::Client, base: &str, n: usize) -> (StatusCode, Value) {
    let payload = format!("{n:06}-{}", "x".repeat(16 * 1024));
    let response = http
        .post(format!("{base}/v1/queues/jobs/messages"))
        .json(&json!({ "id": format!("m{n}"), "payload": payload }))
        .send()
        .await
        .expect("enqueue request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Enqueues until the first 507; returns how many were acknowledged.
async fn enqueue_until_refused(http: &reqwest::Client, base: &str) -> usize {
    for n in 0..4000 {
        let (status, body) = enqueue(http, base, n).await;
        match status {
            StatusCode::CREATED => continue,
            StatusCode::INSUFFICIENT_STORAGE => {
                assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
                let message = body["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("reserve"), "{message}");
                return n;
            }
            other => panic!("enqueue {n}: {other} {body}"),
        }
    }
    panic!("4000 enqueues of 16 KiB fitted on a 24 MiB filesystem");
}

/// Leases and acks `count` messages; all must succeed below the reserve.
async fn drain(http: &reqwest::Client, base: &str, count: usize) {
    let leased: Value = http
        .post(format!("{base}/v1/queues/jobs/leases"))
        .json(&json!({ "max": count }))
        .send()
        .await
        .expect("lease")
        .json()
        .await
        .expect("lease body");
    let messages = leased["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), count, "{leased}");
    for m in messages {
        let id = m["id"].as_str().expect("id");
        let response = http
            .post(format!("{base}/v1/queues/jobs/messages/{id}/ack"))
            .json(&json!({ "lease_id": m["lease_id"] }))
            .send()
            .await
            .expect("ack");
        assert_eq!(
            response.status(),
            StatusCode::NO_CONTENT,
            "ack {id} below the reserve"
        );
    }
}

async fn metric(http: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Polls an enqueue until it is accepted again (space came back).
async fn wait_accepting(http: &reqwest::Client, base: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = enqueue(http, base, n).await;
        if status == StatusCode::CREATED {
            return;
        }
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
        assert!(
            Instant::now() < deadline,
            "enqueues did not resume after space was freed"
        );
        // Polls: the server's disk check has no event this test can await.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start(data: &Path) -> Server {
    let data = data.to_str().expect("utf-8 path");
    Server::start_with(
        &local_serve_args(data, &["--disk-reserve", "6MiB", "--cache-size", "4MiB"]),
        None,
        &[],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_refuses_producers_lets_consumers_drain_and_heals() {
    let Some(fs) = Tmpfs::mount("24m") else {
        panic!(
            "serve_disk_full cannot run: mounting a tmpfs needs root \
             (scripts/test runs as root in CI)"
        );
    };
    let data: PathBuf = fs.path().join("data");
    let http = reqwest::Client::new();
    let mut server = start(&data);
    let base = format!("http://{}", server.addr);
    wait_healthy(&http, &server).await;

    let filler = fs.path().join("filler");
    fill(&filler, 10 << 20);
    let acknowledged = enqueue_until_refused(&http, &base).await;
    assert!(acknowledged > 10, "only {acknowledged} enqueues fitted");
    assert_eq!(
        metric(&http, &base, "delayd_storage_refusing_writes").await,
        Some(1.0)
    );
    assert!(metric(&http, &base, "delayd_storage_free_bytes")
        .await
        .is_some());
    // The block cache gauges (sampled by the driver from its first round)
    // report `--cache-size` and a fill within it.
    assert_eq!(
        metric(&http, &base, "delayd_storage_cache_capacity_bytes").await,
        Some((4u64 << 20) as f64)
    );
    let cached = metric(&http, &base, "delayd_storage_cache_bytes")
        .await
        .expect("cache gauge");
    assert!((0.0..=(4u64 << 20) as f64).contains(&cached), "{cached}");
    let ready = http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(
        ready.status(),
        StatusCode::OK,
        "consumers must still reach the node"
    );

    drain(&http, &base, 10).await;
    std::fs::remove_file(&filler).expect("free space");
    wait_accepting(&http, &base, acknowledged).await;
    assert_eq!(
        metric(&http, &base, "delayd_storage_refusing_writes").await,
        Some(0.0)
    );

    let status = server.sigterm_and_wait(Duration::from_secs(15));
    assert!(status.is_some_and(|s| s.success()), "{}", server.log());
    let server = start(&data);
    let base = format!("http://{}", server.addr);
    wait_healthy(&http, &server).await;
    let queue: Value = http
        .get(format!("{base}/v1/queues/jobs"))
        .send()
        .await
        .expect("queue")
        .json()
        .await
        .expect("queue body");
    // Acknowledged before the refusal, minus the 10 acked, plus the one
    // accepted after space came back.
    let expected = acknowledged - 10 + 1;
    assert_eq!(queue["stats"]["ready"], json!(expected), "{queue}");
}
