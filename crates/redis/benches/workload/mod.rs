//! The delivery-path workload on RedisBroker and on the classic design, in
//! the same run on the same Redis: `JOBS` jobs (default 200,000) of 100
//! bytes, delays of 1-3 s, 4 producers each enqueueing batches of 64 (the
//! beanstalkd listener turns a connection's 64 pipelined puts into one such
//! call), 4 consumers each keeping 8 lease+ack loops in flight. Once as fast
//! as the producers go, once paced at `RATE` jobs/s (default 20,000).
//!
//! The baseline is the classic ZSET + Lua mover: `ZADD` into a delayed ZSET
//! plus `HSET` of the payload; a mover script moves due ids to a ready list
//! (up to 1000 per call, again at once while it finds 1000, else every
//! 10 ms); consumers `BLMOVE` into a processing list (one connection each,
//! since BLMOVE blocks it), `HGET` the payload and ack with `LREM` + `HDEL`.
//! It has no lease expiry, no attempts, no idempotent ids.
//!
//! Reported per run: puts/s over the put phase, deliveries/s from the first
//! due time to the last delivery, lateness (delivery - due, from the due
//! time carried in each payload), lost and duplicated jobs, Redis CPU per
//! job (utime + stime of the redis-server process from /proc, over the run)
//! and `FCALL` / `EVALSHA` calls per job from `INFO commandstats`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, Clock, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule, SystemClock,
};
use delayd_redis::RedisBroker;
use redis::aio::MultiplexedConnection;

const PRODUCERS: usize = 4;
const BATCH: usize = 64;
const CONSUMERS: usize = 4;
const IN_FLIGHT: usize = 8;
const BODY: usize = 100;
/// The put phase ends after this long even when not all jobs are in.
const PUT_BOUND: Duration = Duration::from_secs(60);

/// The classic design's mover: due ids from the delayed ZSET to the ready
/// LIST, 1,000 at a time.
pub const MOVER: &str = r"
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('LPUSH', KEYS[2], id)
end
return #due";

pub struct Settings {
    pub jobs: u64,
    pub rate: u64,
}

impl Settings {
    pub fn from_env() -> Self {
        let get = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        Self {
            jobs: get("JOBS", 200_000),
            rate: get("RATE", 20_000),
        }
    }
}

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// A job's body: `seq:due_ms:` padded to 100 bytes.
fn body(seq: u64, due: u64) -> Vec<u8> {
    let mut b = format!("{seq}:{due}:").into_bytes();
    b.resize(BODY, b'x');
    b
}

fn parse_body(b: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(b.get(..40.min(b.len()))?).ok()?;
    let mut parts = text.split(':');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// What consumers share: seen seqs, lateness, the last delivery time.
#[derive(Default)]
struct Tally {
    seen: Mutex<HashSet<u64>>,
    late: Mutex<Vec<u64>>,
    dup: AtomicU64,
    delivered: AtomicU64,
    last_ms: AtomicU64,
}

impl Tally {
    fn record(&self, body: &[u8]) {
        let t = now_ms();
        let Some((seq, due)) = parse_body(body) else {
            return;
        };
        if !self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(seq)
        {
            self.dup.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(t.saturating_sub(due));
        self.delivered.fetch_add(1, Ordering::Relaxed);
        self.last_ms.fetch_max(t, Ordering::Relaxed);
    }
}

/// Hands out job seqs to producers, paced to `rate` per second (0: none).
struct Source {
    next: AtomicU64,
    jobs: u64,
    rate: u64,
    start: Instant,
}

impl Source {
    /// The next batch's seqs (empty when all are out or the bound passed),
    /// after waiting for the pace.
    async fn batch(&self) -> std::ops::Range<u64> {
        let first = self.next.fetch_add(BATCH as u64, Ordering::Relaxed);
        if first >= self.jobs || self.start.elapsed() > PUT_BOUND {
            return 0..0;
        }
        if self.rate > 0 {
            let at = Duration::from_secs_f64(first as f64 / self.rate as f64);
            tokio::time::sleep_until((self.start + at).into()).await;
        }
        first..(first + BATCH as u64).min(self.jobs)
    }
}

fn delay_of(seq: u64) -> u64 {
    1_000 + (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) % 2_001
}

pub struct Outcome {
    pub label: String,
    pub puts_per_s: f64,
    pub deliveries_per_s: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    pub lost: u64,
    pub dup: u64,
    pub redis_cpu_us_per_job: f64,
    pub calls_per_job: f64,
}

impl Outcome {
    pub fn print(&self) {
        println!(
            "{:<28} puts/s {:>8.0}  deliveries/s {:>8.0}  late ms p50 {:>5} p99 {:>6} max {:>6}  lost {} dup {}  redis cpu/job {:>5.1} us  scripts/job {:.3}",
            self.label,
            self.puts_per_s,
            self.deliveries_per_s,
            self.p50,
            self.p99,
            self.max,
            self.lost,
            self.dup,
            self.redis_cpu_us_per_job,
            self.calls_per_job
        );
    }
}

/// The redis-server's CPU time (utime + stime) in microseconds.
fn redis_cpu_us(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks * 1_000_000 / 100
}

async fn info(conn: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap_or_default()
}

pub async fn redis_pid(conn: &mut MultiplexedConnection) -> u32 {
    info(conn, "server")
        .await
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// FCALL + EVALSHA + EVAL calls so far.
async fn script_calls(conn: &mut MultiplexedConnection) -> u64 {
    info(conn, "commandstats")
        .await
        .lines()
        .filter(|l| {
            l.starts_with("cmdstat_fcall:")
                || l.starts_with("cmdstat_evalsha:")
                || l.starts_with("cmdstat_eval:")
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

/// Runs producers and consumers until every job is delivered or nothing
/// was delivered for 8 s after the put phase.
async fn drive<P, PF, C, CF>(
    label: &str,
    settings: &Settings,
    conn: &mut MultiplexedConnection,
    produce: P,
    consume: C,
) -> Outcome
where
    P: Fn(Vec<(u64, u64)>) -> PF + Send + Sync + 'static,
    PF: std::future::Future<Output = ()> + Send + 'static,
    C: Fn(Arc<Tally>, Arc<std::sync::atomic::AtomicBool>) -> CF,
    CF: std::future::Future<Output = ()> + Send + 'static,
{
    let pid = redis_pid(conn).await;
    let _: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await;
    if std::env::var_os("VERBOSE").is_some() {
        // Every call into the slow log, to split the time by function.
        let _: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(0)
            .arg("slowlog-max-len")
            .arg(1_000_000)
            .query_async(conn)
            .await;
        let _: redis::RedisResult<()> = redis::cmd("SLOWLOG").arg("RESET").query_async(conn).await;
    }
    let cpu_before = redis_cpu_us(pid);
    let calls_before = script_calls(conn).await;
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let source = Arc::new(Source {
        next: AtomicU64::new(0),
        jobs: settings.jobs,
        rate: settings.rate,
        start: Instant::now(),
    });
    let t0 = now_ms();
    let consumers: Vec<_> = (0..CONSUMERS * IN_FLIGHT)
        .map(|_| tokio::spawn(consume(tally.clone(), stop.clone())))
        .collect();
    let produce = Arc::new(produce);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (source, produce) = (source.clone(), produce.clone());
            tokio::spawn(async move {
                loop {
                    let seqs = source.batch().await;
                    if seqs.is_empty() {
                        break;
                    }
                    let now = now_ms();
                    produce(seqs.map(|s| (s, now + delay_of(s))).collect()).await;
                }
            })
        })
        .collect();
    for p in producers {
        let _ = p.await;
    }
    let put_secs = source.start.elapsed().as_secs_f64();
    let inserted = settings.jobs.min(source.next.load(Ordering::Relaxed));
    let mut last_progress = (Instant::now(), 0);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n = tally.delivered.load(Ordering::Relaxed);
        if n >= inserted {
            break;
        }
        if n != last_progress.1 {
            last_progress = (Instant::now(), n);
        } else if last_progress.0.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);
    for c in consumers {
        let _ = c.await;
    }
    let cpu = redis_cpu_us(pid) - cpu_before;
    if std::env::var_os("VERBOSE").is_some() {
        slowlog_by_function(conn, label).await;
        for line in info(conn, "commandstats").await.lines() {
            if line.starts_with("cmdstat_") {
                println!("  {label}: {}", line.trim());
            }
        }
    }
    let calls = script_calls(conn).await - calls_before;
    let delivered = tally.delivered.load(Ordering::Relaxed);
    let mut late = std::mem::take(
        &mut *tally
            .late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    late.sort_unstable();
    let first_due = t0 + 1_000;
    let span = tally
        .last_ms
        .load(Ordering::Relaxed)
        .saturating_sub(first_due)
        .max(1);
    Outcome {
        label: label.to_owned(),
        puts_per_s: inserted as f64 / put_secs,
        deliveries_per_s: delivered as f64 * 1_000.0 / span as f64,
        p50: percentile(&late, 0.5),
        p99: percentile(&late, 0.99),
        max: late.last().copied().unwrap_or(0),
        lost: inserted.saturating_sub(delivered),
        dup: tally.dup.load(Ordering::Relaxed),
        redis_cpu_us_per_job: cpu as f64 / inserted.max(1) as f64,
        calls_per_job: calls as f64 / inserted.max(1) as f64,
    }
}

pub async fn delayd(url: &str, prefix: &str, label: &str, settings: &Settings) -> Outcome {
    let client = redis::Client::open(url).unwrap();
    let mut conn = stats_connection(&client).await;
    let config = delayd_redis::RedisConfig {
        urls: vec![url.to_owned()],
        shards: 1,
        key_prefix: prefix.to_owned(),
        clock: Arc::new(SystemClock),
        tls_ca: None,
        virtual_time: false,
        wait_replicas: None,
    };
    let node = Arc::new(RedisBroker::connect(config).await.unwrap());
    let q = QueueName::new("work").unwrap();
    let produce = {
        let (node, q) = (node.clone(), q.clone());
        move |jobs: Vec<(u64, u64)>| {
            let (node, q) = (node.clone(), q.clone());
            async move {
                let batch = jobs
                    .into_iter()
                    .map(|(seq, due)| EnqueueRequest {
                        schedule: Schedule::At(due),
                        payload: body(seq, due),
                        ..Default::default()
                    })
                    .collect();
                node.enqueue(&q, batch, EnqueueOptions::default())
                    .await
                    .unwrap();
            }
        }
    };
    let consume = |tally: Arc<Tally>, stop: Arc<std::sync::atomic::AtomicBool>| {
        let (node, q) = (node.clone(), q.clone());
        async move {
            let request = LeaseRequest {
                max: 1,
                wait_ms: 500,
                lease_ms: Some(120_000),
            };
            while !stop.load(Ordering::SeqCst) {
                let Ok(got) = node.lease(std::slice::from_ref(&q), request.clone()).await else {
                    continue;
                };
                for d in got {
                    tally.record(&d.payload);
                    let _ = node.ack(&q, &d.id, &d.lease_id).await;
                }
            }
        }
    };
    drive(label, settings, &mut conn, produce, consume).await
}

pub async fn baseline(url: &str, prefix: &str, label: &str, settings: &Settings) -> Outcome {
    let client = redis::Client::open(url).unwrap();
    let mut conn = stats_connection(&client).await;
    let keys = Arc::new([
        format!("{prefix}:delayed"),
        format!("{prefix}:ready"),
        format!("{prefix}:processing"),
        format!("{prefix}:payload"),
    ]);
    let mover_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = {
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let (keys, stop) = (keys.clone(), mover_stop.clone());
        tokio::spawn(async move {
            let script = redis::Script::new(MOVER);
            while !stop.load(Ordering::SeqCst) {
                let moved: u64 = script
                    .key(&keys[0])
                    .key(&keys[1])
                    .arg(now_ms())
                    .invoke_async(&mut c)
                    .await
                    .unwrap_or(0);
                if moved < 1_000 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        })
    };
    let produce = {
        let (c, keys) = (conn.clone(), keys.clone());
        move |jobs: Vec<(u64, u64)>| {
            let (mut c, keys) = (c.clone(), keys.clone());
            async move {
                let mut pipe = redis::pipe();
                for (seq, due) in jobs {
                    let id = format!("{seq:036}");
                    pipe.zadd(&keys[0], &id, due)
                        .ignore()
                        .hset(&keys[3], &id, body(seq, due))
                        .ignore();
                }
                let _: redis::RedisResult<()> = pipe.query_async(&mut c).await;
            }
        }
    };
    let mut consumer_conns = Vec::new();
    for _ in 0..CONSUMERS * IN_FLIGHT {
        consumer_conns.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let consumer_conns = Arc::new(Mutex::new(consumer_conns));
    let consume = |tally: Arc<Tally>, stop: Arc<std::sync::atomic::AtomicBool>| {
        let keys = keys.clone();
        let mut c = consumer_conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap();
        async move {
            while !stop.load(Ordering::SeqCst) {
                let id: Option<String> = redis::cmd("BLMOVE")
                    .arg(&keys[1])
                    .arg(&keys[2])
                    .arg("RIGHT")
                    .arg("LEFT")
                    .arg(0.5)
                    .query_async(&mut c)
                    .await
                    .unwrap_or(None);
                let Some(id) = id else { continue };
                let payload: Option<Vec<u8>> = redis::cmd("HGET")
                    .arg(&keys[3])
                    .arg(&id)
                    .query_async(&mut c)
                    .await
                    .unwrap_or(None);
                if let Some(p) = payload {
                    tally.record(&p);
                }
                let _: redis::RedisResult<()> = redis::pipe()
                    .lrem(&keys[2], 1, &id)
                    .ignore()
                    .hdel(&keys[3], &id)
                    .ignore()
                    .query_async(&mut c)
                    .await;
            }
        }
    };
    let outcome = drive(label, settings, &mut conn, produce, consume).await;
    mover_stop.store(true, Ordering::SeqCst);
    let _ = mover.await;
    outcome
}

/// Time per script call, by function name (VERBOSE runs): from the slow
/// log, which the run set to log every call.
async fn slowlog_by_function(conn: &mut MultiplexedConnection, label: &str) {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap_or_default();
    let mut by: std::collections::BTreeMap<String, (u64, u64, u64)> = Default::default();
    for e in entries {
        let redis::Value::Array(fields) = e else {
            continue;
        };
        let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) =
            (fields.get(2), fields.get(3))
        else {
            continue;
        };
        let word = |i: usize| match args.get(i) {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        let cmd = word(0).to_lowercase();
        if cmd != "fcall" && cmd != "evalsha" {
            continue;
        }
        let name = if cmd == "fcall" {
            word(1).rsplit('_').next().unwrap_or("").to_owned()
        } else {
            "evalsha".into()
        };
        let argc = args.len() as u64;
        let slot = by.entry(name).or_default();
        slot.0 += 1;
        slot.1 += *us as u64;
        slot.2 += argc;
    }
    for (name, (n, us, argc)) in by {
        println!(
            "  {label}: {name:<10} calls {n:>7} us/call {:>7.1} total ms {:>7} args/call {:.1}",
            us as f64 / n as f64,
            us / 1000,
            argc as f64 / n as f64
        );
    }
    let _: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(10_000)
        .query_async(conn)
        .await;
}

/// A connection for INFO and SLOWLOG, whose replies can be large.
async fn stats_connection(client: &redis::Client) -> MultiplexedConnection {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}
