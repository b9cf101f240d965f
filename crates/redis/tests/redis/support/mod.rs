//! Real Redis servers for the tests: `redis-server` processes on free ports
//! in temporary directories, killed on drop and, through a stdin pipe,
//! whenever the test process dies (even by SIGKILL). Tests fail, not skip,
//! when `redis-server` is missing (scripts/ensure-redis.sh installs it).

#![allow(dead_code, reason = "the benches use a part")]

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use delayd_core::SystemClock;
use delayd_redis::{RedisBroker, RedisConfig};

/// Runs redis-server under a shell that kills it (-9) when our end of its
/// stdin closes, and exits when redis-server exits.
/// (A background job's stdin is /dev/null in sh, hence the copy on fd 3.)
const WRAPPER: &str = r#"exec 3<&0
redis-server "$@" </dev/null & pid=$!
(read _ <&3; kill -9 $pid 2>/dev/null) &
wait $pid"#;

pub struct RedisServer {
    child: Child,
    stdin: Option<ChildStdin>,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

pub use delayd_core::testkit::net::free_port;
use delayd_core::testkit::net::redis_ping as ping;

impl RedisServer {
    /// A server with persistence off, in its own temporary directory.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        for _ in 0..10 {
            if let Ok(mut server) = Self::spawn(&dir, free_port(), extra) {
                server._tmp = Some(tmp);
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? run scripts/ensure-redis.sh)");
    }

    /// Starts redis-server on `port` in `dir`; errors when it does not
    /// answer PING within 10 s (port taken, binary missing).
    pub fn spawn(dir: &Path, port: u16, extra: &[&str]) -> std::io::Result<Self> {
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            dir.to_str().expect("utf-8 dir"),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--logfile",
            "redis.log",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            stdin,
            port,
            dir: dir.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            _tmp: None,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ping(port) {
                return Ok(server);
            }
            if let Ok(Some(_)) = server.child.try_wait() {
                break;
            }
            // Polls: a starting redis-server has no event this test can await.
            std::thread::sleep(Duration::from_millis(10));
        }
        server.kill();
        Err(std::io::Error::other(format!(
            "redis-server on {port} did not start"
        )))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server abruptly (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(5);
        while ping(self.port) && Instant::now() < deadline {
            // Polls: the killed server's port closing has no event this test can await.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the server again on the same port and directory (its AOF,
    /// if enabled, is loaded).
    pub fn restart(&mut self) {
        self.kill();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match Self::spawn(&self.dir, self.port, &extra) {
                Ok(mut fresh) => {
                    std::mem::swap(&mut self.child, &mut fresh.child);
                    std::mem::swap(&mut self.stdin, &mut fresh.stdin);
                    // `fresh` now holds the old, dead process.
                    return;
                }
                Err(e) if Instant::now() > deadline => panic!("restart failed: {e}"),
                // Polls: the restarted redis-server's port has no event to await.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Runs redis-cli against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }
}

/// Three masters with slots spread by `redis-cli --cluster create`, and
/// with [`RedisCluster::with_replicas`] a replica of each.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra redis-server options on every node (e.g. AOF).
    pub fn start_with(options: &[&str]) -> Self {
        Self::start_nodes(0, "5000", options)
    }

    /// Three masters (`nodes[0..3]`) and a replica of each (`nodes[3..6]`),
    /// with a node timeout of `node_timeout_ms` (a replica takes over about
    /// that long after its master dies).
    pub fn with_replicas(node_timeout_ms: &str, options: &[&str]) -> Self {
        Self::start_nodes(1, node_timeout_ms, options)
    }

    fn start_nodes(replicas: usize, node_timeout_ms: &str, options: &[&str]) -> Self {
        for _ in 0..5 {
            if let Some(cluster) = Self::try_start(replicas, node_timeout_ms, options) {
                return cluster;
            }
        }
        panic!("could not start a Redis Cluster");
    }

    fn try_start(replicas: usize, node_timeout_ms: &str, options: &[&str]) -> Option<Self> {
        let mut extra = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            node_timeout_ms,
        ];
        extra.extend_from_slice(options);
        let count = 3 * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| RedisServer::start_with(&extra))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        if !status.success() {
            return None;
        }
        let cluster = Self { nodes };
        cluster.wait_ok(Duration::from_secs(30)).then_some(cluster)
    }

    /// Waits until every node reports `cluster_state:ok` and knows all the
    /// nodes.
    pub fn wait_ok(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        while Instant::now() < deadline {
            let ok = self.nodes.iter().all(|n| {
                let info = n.cli(&["cluster", "info"]);
                info.contains("cluster_state:ok") && info.contains(&known)
            });
            if ok {
                return true;
            }
            // Polls: the cluster's state has no event this test can await.
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// One single Redis per test binary, alive until the process ends. Each
/// test on it keeps to its own key prefix ([`unique_prefix`]); a test that
/// reads or changes the whole server (INFO counters, FUNCTION FLUSH, CLIENT
/// KILL, a kill or restart, heavy load) starts a [`RedisServer`] of its own.
pub fn shared_single() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A key prefix no other broker of this run uses.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst),
        rand::random::<u32>()
    )
}

pub fn config(urls: Vec<String>, shards: u32, prefix: &str) -> RedisConfig {
    RedisConfig {
        urls,
        shards,
        key_prefix: prefix.to_owned(),
        clock: Arc::new(SystemClock),
        tls_ca: None,
        virtual_time: false,
        wait_replicas: None,
    }
}

pub async fn broker(urls: Vec<String>, shards: u32, prefix: &str) -> RedisBroker {
    RedisBroker::connect(config(urls, shards, prefix))
        .await
        .expect("connect")
}

/// The period of [`every_second`]'s schedules.
pub const EVERY_MS: u64 = 1_000;

/// A schedule firing every second from `start_at` on, with catch-up of
/// every missed fire time (what the schedule tests run on Redis).
pub fn every_second(
    start_at: u64,
    overlap: delayd_core::Overlap,
) -> delayd_core::ScheduleDefinition {
    use delayd_core::{Catchup, MessageTemplate, Recurrence, ScheduleDefinition};
    ScheduleDefinition {
        recurrence: Recurrence::Every { every_ms: EVERY_MS },
        start_at,
        end_at: None,
        max_fires: None,
        message: MessageTemplate {
            payload: b"tick".to_vec(),
            ..MessageTemplate::default()
        },
        catchup: Catchup::All,
        catchup_window_ms: 3_600_000,
        overlap,
        jitter_ms: 0,
        paused: false,
    }
}
