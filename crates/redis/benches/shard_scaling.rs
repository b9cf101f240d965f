//! Shard scaling on a 3-master Redis Cluster: one queue with 1 shard against
//! the same queue spread over 4 shards (hash tags `{prefix:queue#k}`), in
//! the same run and on the same cluster.
//!
//! For each shard count (fresh `key_prefix`): several producers enqueue
//! `MESSAGES` 100-byte messages due now in batches of 100, then several
//! consumers lease (max 100) and ack them until the queue is empty. Prints
//! enqueue and lease+ack msgs/s, the 4-shard/1-shard ratios, and which
//! master owns each shard's slot (with its message count).
//!
//! The bench starts its own cluster (3 `redis-server` processes on free
//! ports, never 6379, persistence off) and kills it on exit, also when the
//! bench process dies: each server runs under a shell that SIGKILLs it when
//! the bench's end of its stdin pipe closes.
//! Run: `cargo bench -p delayd-redis --bench shard_scaling`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule, SystemClock,
};
use delayd_redis::{RedisBroker, RedisConfig};
use futures_util::future::join_all;

const MESSAGES: usize = 200_000;
const PAYLOAD: usize = 100;
const BATCH: usize = 100;
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
const LEASE_MAX: u32 = 100;
const QUEUE: &str = "scale";

/// Runs redis-server under a shell that kills it (-9) when our end of its
/// stdin closes, and exits when redis-server exits.
/// (A background job's stdin is /dev/null in sh, hence the copy on fd 3.)
const WRAPPER: &str = r#"exec 3<&0
/usr/bin/redis-server "$@" </dev/null & pid=$!
(read _ <&3; kill -9 $pid 2>/dev/null) &
wait $pid"#;

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port that is free now, with port + 10000 (its Cluster bus port) free too.
fn free_port() -> u16 {
    loop {
        let port = rand::random_range(20_000..30_000u16);
        if port != 6379 && bindable(port) && bindable(port + 10_000) {
            return port;
        }
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn spawn(port: u16) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let port_s = port.to_string();
        let args = [
            "--port",
            &port_s,
            "--bind",
            "127.0.0.1",
            "--dir",
            dir.path().to_str().expect("utf-8 dir"),
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
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            stdin,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ping(port) {
                return Some(server);
            }
            if let Ok(Some(_)) = server.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        server.kill();
        None
    }

    fn kill(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("/usr/bin/redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three masters, no replicas, slots spread by `redis-cli --cluster create`.
struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    fn start() -> Self {
        for _ in 0..5 {
            if let Some(cluster) = Self::try_start() {
                return cluster;
            }
        }
        panic!("could not start a Redis Cluster (redis-server/redis-cli in /usr/bin?)");
    }

    fn try_start() -> Option<Self> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push((0..10).find_map(|_| Server::spawn(free_port()))?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("/usr/bin/redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
        let cluster = Self { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let ok = cluster.nodes.iter().all(|n| {
                let info = n.cli(&["cluster", "info"]);
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            });
            if ok {
                return Some(cluster);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// CPU seconds (user + sys) each master has used so far.
    fn cpu(&self) -> Vec<f64> {
        self.nodes
            .iter()
            .map(|n| {
                n.cli(&["info", "cpu"])
                    .lines()
                    .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
                    .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
                    .sum()
            })
            .collect()
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// The master (index into `nodes`) that owns `slot`, from CLUSTER NODES.
    fn owner(&self, slot: u16) -> Option<usize> {
        let table = self.nodes[0].cli(&["cluster", "nodes"]);
        for line in table.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") {
                continue;
            }
            let port: u16 = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let owns = fields[8..].iter().any(|range| {
                let mut it = range.split('-');
                let lo: u16 = it.next().and_then(|v| v.parse().ok()).unwrap_or(u16::MAX);
                let hi: u16 = it.next().and_then(|v| v.parse().ok()).unwrap_or(lo);
                (lo..=hi).contains(&slot)
            });
            if owns {
                return self.nodes.iter().position(|n| n.port == port);
            }
        }
        None
    }
}

/// CPU seconds (user + sys) this bench process (the client) has used.
fn own_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are 11 and 12 after the ')'; ticks of 1/100 s.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Prints where a phase's CPU went: the client and each master.
fn cpu_report(phase: &str, cluster: &Cluster, client0: f64, nodes0: &[f64], secs: f64) {
    let nodes: Vec<String> = cluster
        .cpu()
        .iter()
        .zip(nodes0)
        .enumerate()
        .map(|(i, (now, before))| format!("m{i} {:.2}", now - before))
        .collect();
    println!(
        "  {phase} CPU s over {secs:.2} s wall: client {:.2}, {}",
        own_cpu() - client0,
        nodes.join(", ")
    );
}

fn request() -> EnqueueRequest {
    EnqueueRequest {
        schedule: Schedule::Now,
        payload: vec![b'x'; PAYLOAD],
        ..Default::default()
    }
}

struct Outcome {
    enqueue: f64,
    lease_ack: f64,
}

async fn run(cluster: &Cluster, shards: u32) -> Outcome {
    let prefix = format!(
        "scale{}-{}-{}",
        std::process::id(),
        shards,
        rand::random::<u32>()
    );
    let node = Arc::new(
        RedisBroker::connect(RedisConfig {
            urls: cluster.urls(),
            shards,
            key_prefix: prefix.clone(),
            clock: Arc::new(SystemClock),
        })
        .await
        .expect("connect"),
    );
    let q = QueueName::new(QUEUE).unwrap();
    // Creates the queue (and warms the connections) outside the timings.
    let warm = node
        .enqueue(&q, vec![request()], EnqueueOptions::default())
        .await
        .unwrap();
    let warm_id = warm[0].as_ref().unwrap().id.clone();
    let leased = node
        .lease_message(&q, &warm_id, None)
        .await
        .expect("lease warm-up message");
    node.ack(&q, &leased.id, &leased.lease_id).await.unwrap();

    let batches = MESSAGES / BATCH;
    let (client0, nodes0) = (own_cpu(), cluster.cpu());
    let start = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (node, q) = (node.clone(), q.clone());
            tokio::spawn(async move {
                let mut b = p;
                while b < batches {
                    let batch = (0..BATCH).map(|_| request()).collect();
                    let out = node
                        .enqueue(&q, batch, EnqueueOptions::default())
                        .await
                        .unwrap();
                    assert!(out.iter().all(|r| r.is_ok()));
                    b += PRODUCERS;
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    let enq_secs = start.elapsed().as_secs_f64();
    cpu_report("enqueue", cluster, client0, &nodes0, enq_secs);

    // Where each shard lives, and how many messages it got.
    let mut per_node: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for k in 0..shards {
        let tag = format!("{{{prefix}:{QUEUE}#{k}}}");
        let slot: u16 = cluster.nodes[0]
            .cli(&["cluster", "keyslot", &tag])
            .trim()
            .parse()
            .expect("keyslot");
        let owner = cluster.owner(slot).expect("slot owner");
        let count = cluster.nodes[owner].cli(&["hlen", &format!("{tag}:msg")]);
        println!(
            "  shard {k}: tag {tag} slot {slot} -> master {owner} (port {}), {} messages",
            cluster.nodes[owner].port,
            count.trim()
        );
        per_node.entry(owner).or_default().push(k);
    }
    let registry = format!("{{{prefix}}}");
    let slot: u16 = cluster.nodes[0]
        .cli(&["cluster", "keyslot", &registry])
        .trim()
        .parse()
        .expect("keyslot");
    println!(
        "  registry/seq {registry}: slot {slot} -> master {}",
        cluster.owner(slot).expect("slot owner")
    );
    println!(
        "  shards per master: {}",
        (0..cluster.nodes.len())
            .map(|n| format!("m{n}={}", per_node.get(&n).map_or(0, Vec::len)))
            .collect::<Vec<_>>()
            .join(" ")
    );

    let (client0, nodes0) = (own_cpu(), cluster.cpu());
    let start = Instant::now();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (node, q) = (node.clone(), q.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                loop {
                    let req = LeaseRequest {
                        max: LEASE_MAX,
                        wait_ms: 0,
                        lease_ms: None,
                    };
                    let got = node.lease(std::slice::from_ref(&q), req).await.unwrap();
                    if got.is_empty() {
                        return n;
                    }
                    n += got.len();
                    let acks = got.iter().map(|d| node.ack(&q, &d.id, &d.lease_id));
                    for r in join_all(acks).await {
                        r.unwrap();
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for c in consumers {
        total += c.await.unwrap();
    }
    let la_secs = start.elapsed().as_secs_f64();
    cpu_report("lease+ack", cluster, client0, &nodes0, la_secs);
    assert_eq!(total, MESSAGES, "every message leased and acked once");

    let outcome = Outcome {
        enqueue: MESSAGES as f64 / enq_secs,
        lease_ack: MESSAGES as f64 / la_secs,
    };
    println!(
        "shards={shards}: enqueue {:.0} msg/s ({MESSAGES} msgs, {PRODUCERS} producers, batches of {BATCH}, {enq_secs:.2} s); \
         lease(max {LEASE_MAX})+ack {:.0} msg/s ({CONSUMERS} consumers, acks of a lease concurrent, {la_secs:.2} s)",
        outcome.enqueue, outcome.lease_ack
    );
    outcome
}

fn main() {
    let cluster = Cluster::start();
    println!(
        "3-master cluster on ports {:?}; {}",
        cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
        cluster.nodes[0]
            .cli(&["info", "server"])
            .lines()
            .find(|l| l.starts_with("redis_version"))
            .unwrap_or("?")
            .trim()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (one, four) = runtime.block_on(async {
        let one = run(&cluster, 1).await;
        let four = run(&cluster, 4).await;
        (one, four)
    });
    drop(runtime);
    println!(
        "ratio 4 shards / 1 shard: enqueue {:.2}x, lease+ack {:.2}x",
        four.enqueue / one.enqueue,
        four.lease_ack / one.lease_ack
    );
    drop(cluster);
}
