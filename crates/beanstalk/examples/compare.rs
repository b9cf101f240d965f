//! A beanstalkd-protocol load client for comparing delayd with a real
//! beanstalkd: same client, same workload, any server speaking the protocol.
//!
//! `cargo run --release -p delayd-beanstalk --example compare -- ADDR
//! [--jobs 20000] [--producers 4] [--consumers 4] [--pipeline 1]
//! [--reserves 1] [--rate 0] [--delay-min 1] [--delay-max 3] [--seconds 60]
//! [--early-tolerance-ms 1] [--due-in S] [--label NAME] [--json]`
//!
//! Producers `put` 100-byte jobs with a delay of `delay-min..=delay-max`
//! whole seconds (`--pipeline K`: K puts written at once per connection,
//! then their K replies read; 1 is request/response, as typical clients
//! do). Consumers loop `reserve-with-timeout 1` + `delete`, keeping
//! `--reserves R` reserves in flight per connection (each `RESERVED` is
//! answered with its `delete` and a new reserve, written together).
//! `--rate N` paces the producers to N puts per second in all (batches of
//! `--pipeline` sent on a fixed schedule); 0 is as fast as they can. Each body
//! carries a run nonce, the job's sequence number, the time just before its
//! `put` was written and its delay, so a consumer computes
//!
//!   lateness = time RESERVED was read - (time before the put was written + delay)
//!
//! The server's due time is the put's arrival + delay, which is no earlier
//! than our reference, so measured lateness overstates the true lateness by
//! at most the put's one-way transit time (bounded by the reported put
//! round trip, `put_rtt_p99_ms`), and a negative lateness is a job
//! delivered before its due time. Servers keep due times in clock ticks
//! (delayd: wall-clock milliseconds), so a job can come up to one tick
//! before our microsecond reference: `early` counts lateness below
//! `-early-tolerance-ms` (default 1 ms); `late_min_ms` shows the smallest.
//! All our times are from one monotonic clock in this process.
//!
//! `--due-in S` makes the run a drain: each put's delay is the whole
//! seconds left until S seconds after the start, rounded up, so every job
//! falls due within one second from that instant (protocol delays are whole
//! seconds) while the consumers already wait. The result adds
//! `drain_per_s` = delivered / (last delete - that instant) and
//! `puts_before_due` (whether every put was answered before it).
//!
//! Bounded: producers stop at `--seconds`; consumers stop when every
//! inserted job has been delivered, when nothing was delivered for
//! `--delay-max + 5` s after the last put, or at `2 * --seconds +
//! --delay-max + 5` s (then `timed_out=true` and the undelivered jobs are
//! counted as `lost`).
//! Prints one `key=value` result line (or, with `--json`, one JSON object).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const BODY_LEN: usize = 100;
const TTR: u32 = 120;

#[derive(Clone, Debug)]
struct Args {
    addr: String,
    jobs: u64,
    producers: u64,
    consumers: u64,
    pipeline: u64,
    reserves: u64,
    /// Puts per second over all producers (0: as fast as they can).
    rate: u64,
    delay_min: u64,
    delay_max: u64,
    seconds: u64,
    early_tolerance_us: i64,
    /// Drain: every job due S seconds after the start (see above).
    due_in: Option<u64>,
    label: String,
    json: bool,
    /// Print the lateness per second of due time (to stderr).
    timeline: bool,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        addr: String::new(),
        jobs: 20_000,
        producers: 4,
        consumers: 4,
        pipeline: 1,
        reserves: 1,
        rate: 0,
        delay_min: 1,
        delay_max: 3,
        seconds: 60,
        early_tolerance_us: 1_000,
        due_in: None,
        label: String::new(),
        json: false,
        timeline: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> Result<String, BoxError> {
            it.next()
                .ok_or_else(|| format!("{name} needs a value").into())
        };
        match arg.as_str() {
            "--jobs" => args.jobs = value(&arg)?.parse()?,
            "--producers" => args.producers = value(&arg)?.parse()?,
            "--consumers" => args.consumers = value(&arg)?.parse()?,
            "--pipeline" => args.pipeline = value(&arg)?.parse()?,
            "--reserves" => args.reserves = value(&arg)?.parse()?,
            "--rate" => args.rate = value(&arg)?.parse()?,
            "--delay-min" => args.delay_min = value(&arg)?.parse()?,
            "--delay-max" => args.delay_max = value(&arg)?.parse()?,
            "--seconds" => args.seconds = value(&arg)?.parse()?,
            "--early-tolerance-ms" => {
                args.early_tolerance_us = (value(&arg)?.parse::<f64>()? * 1e3) as i64
            }
            "--due-in" => args.due_in = Some(value(&arg)?.parse()?),
            "--label" => args.label = value(&arg)?,
            "--json" => args.json = true,
            "--timeline" => args.timeline = true,
            "-h" | "--help" => {
                println!(
                    "usage: compare ADDR [--jobs N] [--producers N] [--consumers N] \
                     [--pipeline K] [--reserves R] [--rate N] [--delay-min S] [--delay-max S] [--seconds S] \
                     [--early-tolerance-ms MS] [--due-in S] [--label NAME] [--json] [--timeline]"
                );
                std::process::exit(0);
            }
            a if a.starts_with("--") => return Err(format!("unknown option {a}").into()),
            a if args.addr.is_empty() => args.addr = a.to_owned(),
            a => return Err(format!("unexpected argument {a}").into()),
        }
    }
    if args.addr.is_empty() {
        return Err("missing ADDR (host:port)".into());
    }
    if args.producers == 0 || args.consumers == 0 || args.pipeline == 0 || args.reserves == 0 {
        return Err(
            "--producers, --consumers, --pipeline and --reserves must be at least 1".into(),
        );
    }
    if args.delay_max < args.delay_min {
        return Err("--delay-max is below --delay-min".into());
    }
    if let Some(due_in) = args.due_in {
        // The consumers' stall bound counts from the last put.
        args.delay_max = args.delay_max.max(due_in + 1);
    }
    if args.label.is_empty() {
        args.label = args.addr.clone();
    }
    Ok(args)
}

/// State shared by the producers and consumers of one run.
struct Shared {
    t0: Instant,
    nonce: u64,
    inserted: AtomicU64,
    delivered: AtomicU64,
    producers_done: AtomicBool,
    /// The last put acknowledgement or delivery (us): consumers give up
    /// after a stall.
    progress_us: AtomicU64,
    timed_out: AtomicBool,
    seen: Mutex<HashSet<u64>>,
}

impl Shared {
    fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }
}

#[derive(Default)]
struct ProducerStats {
    inserted: u64,
    first_send_us: Option<u64>,
    last_ack_us: u64,
    rtt_us: Vec<i64>,
}

#[derive(Default)]
struct ConsumerStats {
    delivered: u64,
    duplicates: u64,
    foreign: u64,
    early: u64,
    first_recv_us: Option<u64>,
    last_delete_us: u64,
    lateness_us: Vec<i64>,
    /// (due time in µs since the start, lateness in µs) per delivery.
    timeline: Vec<(u64, i64)>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let shared = Arc::new(Shared {
        t0: Instant::now(),
        nonce,
        inserted: AtomicU64::new(0),
        delivered: AtomicU64::new(0),
        producers_done: AtomicBool::new(false),
        progress_us: AtomicU64::new(0),
        timed_out: AtomicBool::new(false),
        seen: Mutex::new(HashSet::with_capacity(args.jobs as usize)),
    });
    let put_deadline = shared.t0 + Duration::from_secs(args.seconds);

    let consumers: Vec<_> = (0..args.consumers)
        .map(|_| tokio::spawn(consume(args.clone(), shared.clone())))
        .collect();
    let producers: Vec<_> = (0..args.producers)
        .map(|p| tokio::spawn(produce(args.clone(), shared.clone(), p, put_deadline)))
        .collect();

    let mut puts = ProducerStats::default();
    let mut errors = Vec::new();
    for task in producers {
        match task.await? {
            Ok(s) => {
                puts.inserted += s.inserted;
                puts.first_send_us = match (puts.first_send_us, s.first_send_us) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                puts.last_ack_us = puts.last_ack_us.max(s.last_ack_us);
                puts.rtt_us.extend(s.rtt_us);
            }
            Err(e) => errors.push(format!("producer: {e}")),
        }
    }
    shared
        .progress_us
        .fetch_max(shared.now_us(), Ordering::SeqCst);
    shared.producers_done.store(true, Ordering::SeqCst);

    let mut gets = ConsumerStats::default();
    for task in consumers {
        match task.await? {
            Ok(s) => {
                gets.delivered += s.delivered;
                gets.duplicates += s.duplicates;
                gets.foreign += s.foreign;
                gets.early += s.early;
                gets.first_recv_us = match (gets.first_recv_us, s.first_recv_us) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                gets.last_delete_us = gets.last_delete_us.max(s.last_delete_us);
                gets.lateness_us.extend(s.lateness_us);
                gets.timeline.extend(s.timeline);
            }
            Err(e) => errors.push(format!("consumer: {e}")),
        }
    }

    let unique = shared.seen.lock().expect("seen lock").len() as u64;
    let lost = puts.inserted.saturating_sub(unique);
    let put_secs = puts
        .last_ack_us
        .saturating_sub(puts.first_send_us.unwrap_or(0)) as f64
        / 1e6;
    let get_secs = gets
        .last_delete_us
        .saturating_sub(gets.first_recv_us.unwrap_or(0)) as f64
        / 1e6;
    let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let puts_per_s = rate(puts.inserted, put_secs);
    let deliveries_per_s = rate(gets.delivered, get_secs);
    let late = Percentiles::of(&mut gets.lateness_us);
    if args.timeline {
        print_timeline(&mut gets.timeline);
    }
    let rtt = Percentiles::of(&mut puts.rtt_us);
    // Drain: from the instant every job was due at the earliest.
    let (drain_per_s, puts_before_due) = match args.due_in {
        Some(due_in) => {
            let due_us = due_in * 1_000_000;
            let secs = gets.last_delete_us.saturating_sub(due_us) as f64 / 1e6;
            (rate(gets.delivered, secs), puts.last_ack_us <= due_us)
        }
        None => (0.0, true),
    };
    let errors = errors.join("; ");
    let timed_out = shared.timed_out.load(Ordering::SeqCst);

    if args.json {
        println!(
            "{{\"label\":{label:?},\"addr\":{addr:?},\"jobs\":{jobs},\"producers\":{p},\
             \"consumers\":{c},\"pipeline\":{k},\"reserves\":{r},\"rate\":{rate},\"delay_min\":{dmin},\"delay_max\":{dmax},\
             \"inserted\":{ins},\"delivered\":{del},\"lost\":{lost},\"duplicates\":{dup},\
             \"foreign\":{foreign},\"early\":{early},\"put_seconds\":{ps:.3},\
             \"delivery_seconds\":{gs:.3},\"puts_per_s\":{pr:.0},\"deliveries_per_s\":{dr:.0},\
             \"lateness_ms\":{{\"p50\":{l50:.2},\"p99\":{l99:.2},\"p999\":{l999:.2},\"max\":{lmax:.2},\"min\":{lmin:.2}}},\
             \"put_rtt_ms\":{{\"p50\":{r50:.2},\"p99\":{r99:.2},\"max\":{rmax:.2}}},\
             \"drain_per_s\":{drain_per_s:.0},\"puts_before_due\":{puts_before_due},\
             \"timed_out\":{timed_out},\"errors\":{errors:?}}}",
            label = args.label,
            addr = args.addr,
            jobs = args.jobs,
            p = args.producers,
            c = args.consumers,
            k = args.pipeline,
            r = args.reserves,
            rate = args.rate,
            dmin = args.delay_min,
            dmax = args.delay_max,
            ins = puts.inserted,
            del = gets.delivered,
            dup = gets.duplicates,
            foreign = gets.foreign,
            early = gets.early,
            ps = put_secs,
            gs = get_secs,
            pr = puts_per_s,
            dr = deliveries_per_s,
            l50 = late.p50,
            l99 = late.p99,
            l999 = late.p999,
            lmax = late.max,
            lmin = late.min,
            r50 = rtt.p50,
            r99 = rtt.p99,
            rmax = rtt.max,
        );
    } else {
        println!(
            "label={} pipeline={} reserves={} jobs={} inserted={} delivered={} lost={} dup={} early={} \
             puts_per_s={:.0} deliveries_per_s={:.0} late_p50_ms={:.2} late_p99_ms={:.2} \
             late_p999_ms={:.2} late_max_ms={:.2} late_min_ms={:.2} put_rtt_p99_ms={:.2} put_s={:.2} delivery_s={:.2} \
             drain_per_s={:.0} puts_before_due={} timed_out={}{}",
            args.label,
            args.pipeline,
            args.reserves,
            args.jobs,
            puts.inserted,
            gets.delivered,
            lost,
            gets.duplicates,
            gets.early,
            puts_per_s,
            deliveries_per_s,
            late.p50,
            late.p99,
            late.p999,
            late.max,
            late.min,
            rtt.p99,
            put_secs,
            get_secs,
            drain_per_s,
            puts_before_due,
            timed_out,
            if errors.is_empty() {
                String::new()
            } else {
                format!(" errors={errors:?}")
            },
        );
    }
    if !errors.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// Exact percentiles in milliseconds of microsecond samples.
/// Lateness per second of due time, to stderr: where in the run the late
/// deliveries were.
fn print_timeline(timeline: &mut [(u64, i64)]) {
    timeline.sort_unstable_by_key(|(due, _)| *due);
    for second in timeline.chunk_by(|a, b| a.0 / 1_000_000 == b.0 / 1_000_000) {
        let mut late: Vec<i64> = second.iter().map(|(_, l)| *l).collect();
        let p = Percentiles::of(&mut late);
        eprintln!(
            "due_s={} jobs={} late_p50_ms={:.2} late_p99_ms={:.2} late_p999_ms={:.2} late_max_ms={:.2}",
            second[0].0 / 1_000_000,
            second.len(),
            p.p50,
            p.p99,
            p.p999,
            p.max
        );
    }
}

struct Percentiles {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    min: f64,
}

impl Percentiles {
    fn of(samples: &mut [i64]) -> Self {
        if samples.is_empty() {
            return Self {
                p50: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0,
                min: 0.0,
            };
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1] as f64 / 1e3
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1] as f64 / 1e3,
            min: samples[0] as f64 / 1e3,
        }
    }
}

fn delay_of(args: &Args, seq: u64) -> u64 {
    args.delay_min + seq % (args.delay_max - args.delay_min + 1)
}

/// A 100-byte body: nonce, sequence number, send time (us), delay (s).
fn body(nonce: u64, seq: u64, send_us: u64, delay: u64) -> Vec<u8> {
    let mut b = format!("{nonce:016x} {seq:012} {send_us:016} {delay:04} ").into_bytes();
    b.resize(BODY_LEN, b'x');
    b
}

fn parse_body(body: &[u8]) -> Option<(u64, u64, u64, u64)> {
    let text = std::str::from_utf8(body).ok()?;
    let mut f = text.split(' ');
    let nonce = u64::from_str_radix(f.next()?, 16).ok()?;
    let seq = f.next()?.parse().ok()?;
    let send_us = f.next()?.parse().ok()?;
    let delay = f.next()?.parse().ok()?;
    Some((nonce, seq, send_us, delay))
}

async fn produce(
    args: Args,
    shared: Arc<Shared>,
    index: u64,
    deadline: Instant,
) -> Result<ProducerStats, BoxError> {
    let mut stream = BufReader::new(TcpStream::connect(&args.addr).await?);
    stream.get_mut().set_nodelay(true)?;
    let mut stats = ProducerStats::default();
    let mut line = String::new();
    let mut seq = index;
    let mut out = Vec::with_capacity(args.pipeline as usize * (BODY_LEN + 40));
    // Paced: this producer's batches start at fixed intervals.
    let interval = (args.rate > 0).then(|| {
        Duration::from_secs_f64((args.pipeline * args.producers) as f64 / args.rate as f64)
    });
    let mut next_batch = tokio::time::Instant::now();
    while seq < args.jobs && Instant::now() < deadline {
        if let Some(interval) = interval {
            tokio::time::sleep_until(next_batch).await;
            next_batch += interval;
        }
        out.clear();
        let send_us = shared.now_us();
        stats.first_send_us.get_or_insert(send_us);
        let mut batch = 0;
        while batch < args.pipeline && seq < args.jobs {
            let delay = match args.due_in {
                Some(due_in) => (due_in * 1_000_000)
                    .saturating_sub(send_us)
                    .div_ceil(1_000_000),
                None => delay_of(&args, seq),
            };
            out.extend_from_slice(format!("put 1024 {delay} {TTR} {BODY_LEN}\r\n").as_bytes());
            out.extend_from_slice(&body(shared.nonce, seq, send_us, delay));
            out.extend_from_slice(b"\r\n");
            seq += args.producers;
            batch += 1;
        }
        stream.get_mut().write_all(&out).await?;
        for _ in 0..batch {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                return Err("connection closed".into());
            }
            if !line.starts_with("INSERTED ") {
                return Err(format!("put: {}", line.trim_end()).into());
            }
            stats.inserted += 1;
            shared.inserted.fetch_add(1, Ordering::SeqCst);
        }
        let ack_us = shared.now_us();
        stats.last_ack_us = ack_us;
        stats.rtt_us.push((ack_us - send_us) as i64);
    }
    Ok(stats)
}

/// What a consumer's next reply answers.
enum Expect {
    Reserve,
    Delete(String),
}

impl Shared {
    /// Whether consumers should stop asking for jobs.
    fn consumers_done(&self, hard_limit: Instant, stall: Duration) -> bool {
        if Instant::now() >= hard_limit {
            self.timed_out.store(true, Ordering::SeqCst);
            return true;
        }
        if !self.producers_done.load(Ordering::SeqCst) {
            return false;
        }
        if self.delivered.load(Ordering::SeqCst) >= self.inserted.load(Ordering::SeqCst) {
            return true;
        }
        // Nothing delivered for a while after the last put: the rest is lost.
        let progress_us = self.progress_us.load(Ordering::SeqCst);
        self.now_us().saturating_sub(progress_us) > stall.as_micros() as u64
    }
}

const RESERVE: &[u8] = b"reserve-with-timeout 1\r\n";

async fn consume(args: Args, shared: Arc<Shared>) -> Result<ConsumerStats, BoxError> {
    let mut stream = BufReader::new(TcpStream::connect(&args.addr).await?);
    stream.get_mut().set_nodelay(true)?;
    let mut stats = ConsumerStats::default();
    let mut line = String::new();
    let hard_limit = shared.t0 + Duration::from_secs(2 * args.seconds + args.delay_max + 5);
    let stall = Duration::from_secs(args.delay_max + 5);
    let mut expected = std::collections::VecDeque::new();
    stream
        .get_mut()
        .write_all(&RESERVE.repeat(args.reserves as usize))
        .await?;
    expected.extend((0..args.reserves).map(|_| Expect::Reserve));
    let mut out = Vec::new();
    while let Some(expect) = expected.pop_front() {
        line.clear();
        if stream.read_line(&mut line).await? == 0 {
            return Err("connection closed".into());
        }
        let recv_us = shared.now_us();
        let done = shared.consumers_done(hard_limit, stall);
        match expect {
            Expect::Delete(id) => {
                if line != "DELETED\r\n" {
                    return Err(format!("delete {id}: {}", line.trim_end()).into());
                }
                stats.last_delete_us = recv_us;
            }
            Expect::Reserve => {
                let parts: Vec<&str> = line.trim_end().split(' ').collect();
                match parts.as_slice() {
                    ["RESERVED", id, bytes] => {
                        let bytes = bytes.parse::<usize>()?;
                        let id = (*id).to_owned();
                        let mut data = vec![0; bytes + 2];
                        stream.read_exact(&mut data).await?;
                        out.extend_from_slice(format!("delete {id}\r\n").as_bytes());
                        expected.push_back(Expect::Delete(id));
                        stats.record(&args, &shared, &data[..bytes], recv_us);
                    }
                    ["TIMED_OUT"] | ["DEADLINE_SOON"] => {}
                    _ => return Err(format!("reserve: {}", line.trim_end()).into()),
                }
                if !done {
                    out.extend_from_slice(RESERVE);
                    expected.push_back(Expect::Reserve);
                }
            }
        }
        // Answer everything already read in one write, as a client
        // pipelining its workers would.
        if !out.is_empty() && stream.buffer().is_empty() {
            stream.get_mut().write_all(&out).await?;
            out.clear();
        }
    }
    Ok(stats)
}

impl ConsumerStats {
    fn record(&mut self, args: &Args, shared: &Shared, body: &[u8], recv_us: u64) {
        match parse_body(body) {
            Some((nonce, seq, send_us, delay)) if nonce == shared.nonce => {
                if !shared.seen.lock().expect("seen lock").insert(seq) {
                    self.duplicates += 1;
                    return;
                }
                self.first_recv_us.get_or_insert(recv_us);
                self.delivered += 1;
                shared.delivered.fetch_add(1, Ordering::SeqCst);
                shared.progress_us.fetch_max(recv_us, Ordering::SeqCst);
                let lateness = recv_us as i64 - (send_us + delay * 1_000_000) as i64;
                if lateness < -args.early_tolerance_us {
                    self.early += 1;
                }
                self.lateness_us.push(lateness);
                self.timeline.push((send_us + delay * 1_000_000, lateness));
            }
            _ => self.foreign += 1,
        }
    }
}
