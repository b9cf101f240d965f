//! `delayd bench`: a load generator against a running server.
//!
//! Producers enqueue `--messages` messages, each with a random delay in
//! `[--delay-min, --delay-max]` and its sequence number in the payload;
//! consumers lease, record, and ack. The run ends when every enqueued
//! message was delivered, or `--drain` after the last due time, and by
//! `--duration` + `--drain` after it began (producers start no request after
//! `--duration`; one in flight then still gets its answer, within the 10 s
//! request timeout, which can push the end that much later). It then
//! reports throughput, lateness percentiles, early deliveries, losses and
//! duplicates, and exits 1 when any of the last three is not zero.
//!
//! Before and after the run it reads the server's commit counter from
//! `/metrics`, so the report shows commits per second beside the rates.
//! With `--connections N` the tasks are spread round-robin over N separate
//! clients (with `--http2`: N connections, each carrying many streams).
//!
//! It reads the server's lateness by stage the same way (`stages`), so the
//! report says where late messages lost their time: becoming ready, being
//! leased, or being answered.
//!
//! Submodules: `load` (the producer and consumer tasks), `tally` (the
//! accounting), `commits` (the commit counter), `stages` (the server's
//! lateness histogram), `report` (the output).

mod commits;
mod load;
mod report;
mod stages;
mod tally;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use delayd_client::{Client, QueuePut};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::duration::{millis, now_ms, parse_duration};
use crate::{Connection, UsageError};
use load::{Plan, Shared};
use report::Report;
use tally::Tally;

/// Time allowed for one request of the bench; a server slower than this is
/// failing the bench anyway.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    conn: Connection,
    /// Concurrent enqueueing tasks.
    #[arg(long, default_value_t = 4)]
    producers: u32,
    /// Concurrent leasing tasks.
    #[arg(long, default_value_t = 4)]
    consumers: u32,
    /// Messages to enqueue in total.
    #[arg(long, default_value_t = 10_000)]
    messages: u64,
    /// Producers start no request after this long; the whole run ends by
    /// this plus --drain (plus up to the 10 s request timeout of a request
    /// still in flight).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    duration: Duration,
    /// Time allowed after the last due time for the last deliveries.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    drain: Duration,
    /// Total enqueue rate, messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 100)]
    payload_size: usize,
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    delay_min: Duration,
    #[arg(long, value_parser = parse_duration, default_value = "3s")]
    delay_max: Duration,
    /// A drain: every message is due at one instant, this long after the
    /// run starts (instead of `--delay-min`..`--delay-max` after its own
    /// enqueue), with the consumers already waiting. The report adds the
    /// drain rate: messages / (last ack - that instant).
    #[arg(long, value_parser = parse_duration)]
    due_together: Option<Duration>,
    /// Give message number `n` the flow key `k{n % KEYS}`, so the messages
    /// spread evenly over KEYS keys (see the queue's `flow`).
    #[arg(long)]
    keys: Option<u64>,
    /// Messages per enqueue request (1 = single `POST .../messages`).
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Messages per lease request.
    #[arg(long, default_value_t = 100)]
    lease_max: u32,
    /// Ack each lease's messages with one batch request (`POST .../acks`)
    /// instead of one request per message.
    #[arg(long)]
    ack_batch: bool,
    /// Queue to use (default: a fresh `bench-<random>`, deleted afterwards).
    #[arg(long)]
    queue: Option<String>,
    /// Keep the generated queue after the run (to inspect what is left).
    #[arg(long)]
    keep: bool,
    /// Spread producers and consumers round-robin over this many separate
    /// clients. With `--http2` each client is one connection carrying its
    /// tasks' requests as concurrent streams (`--http2 --connections 4
    /// --producers 256`: 64 producers per connection); with HTTP/1.1 each
    /// still opens a connection per request in flight. Default: one client
    /// for every task (one pool of connections).
    #[arg(long)]
    connections: Option<u32>,
}

impl BenchArgs {
    fn validate(&self) -> Result<(), UsageError> {
        let fail = |what: &str| Err(UsageError(what.to_owned()));
        if self.producers == 0 || self.consumers == 0 {
            return fail("--producers and --consumers must be at least 1");
        }
        if !(1..=1000).contains(&self.batch) || !(1..=1000).contains(&self.lease_max) {
            return fail("--batch and --lease-max must be within 1..=1000");
        }
        if self.delay_min > self.delay_max {
            return fail("--delay-min must not exceed --delay-max");
        }
        if self.messages == 0 || self.messages > 10_000_000 {
            return fail("--messages must be within 1..=10000000");
        }
        if self.keys == Some(0) {
            return fail("--keys must be at least 1");
        }
        if self.connections.is_some_and(|n| !(1..=1000).contains(&n)) {
            return fail("--connections must be within 1..=1000");
        }
        Ok(())
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    args.validate()?;
    let client = args.conn.client()?.with_timeout(REQUEST_TIMEOUT);
    let clients = clients(&args, &client).await?;
    let generated = args.queue.is_none();
    let queue = args
        .queue
        .clone()
        .unwrap_or_else(|| format!("bench-{:08x}", rand::random::<u32>()));
    // Fails fast (exit 3) when the server is not there, before any task starts.
    client
        .put_queue(&queue, &QueuePut::default())
        .await
        .with_context(|| format!("creating queue {queue}"))?;

    let commits_before = commits::read(&client).await;
    let stages_before = stages::read(&client).await;
    let start = Instant::now();
    let start_ms = now_ms();
    let plan = Plan {
        queue: queue.clone(),
        messages: args.messages,
        batch: args.batch,
        lease_max: args.lease_max,
        ack_batch: args.ack_batch,
        payload_size: args.payload_size,
        keys: args.keys,
        delay_min_ms: millis(args.delay_min),
        delay_max_ms: millis(args.delay_max),
        due_together_ms: args.due_together.map(|d| start_ms + millis(d)),
        rate: (args.rate > 0).then_some(args.rate as f64),
        start,
        produce_end: start + args.duration,
    };
    let progress = progress_bar(args.conn.json, args.messages);
    let tally = Tally::new(args.messages)?;
    let shared = Arc::new(Shared::new(plan, tally, progress));

    // Round-robin over the clients, consumers and producers each from the
    // first, so both kinds spread evenly over the connections.
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut consumers = JoinSet::new();
    for client in clients.iter().cycle().take(args.consumers as usize) {
        let task = load::consume(Arc::clone(&shared), client.clone(), stop_rx.clone());
        consumers.spawn(task);
    }
    let mut producers = JoinSet::new();
    for client in clients.iter().cycle().take(args.producers as usize) {
        producers.spawn(load::produce(Arc::clone(&shared), client.clone()));
    }
    while producers.join_next().await.is_some() {}
    let enqueue_seconds = start.elapsed().as_secs_f64();

    let timed_out = drain(&shared, start + args.duration + args.drain, args.drain).await;
    // Receivers gone means every consumer already ended; nothing to stop.
    let _ = stop_tx.send(true);
    while consumers.join_next().await.is_some() {}
    shared.progress.finish_and_clear();
    let commits = commits::between(commits_before, commits::read(&client).await);
    let stages = stages::between(stages_before, stages::read(&client).await);

    let mut report = build_report(
        &args,
        &shared,
        queue.clone(),
        start,
        start_ms,
        enqueue_seconds,
        timed_out,
    );
    report.commits = commits.map(|(count, _)| count);
    report.commits_per_s = commits.map(|(_, rate)| rate);
    report.server_lateness = stages;
    report.still_queued = client
        .get_queue(&queue)
        .await
        .ok()
        .map(|q| q.stats.scheduled + q.stats.ready);
    if generated && !args.keep {
        // Best effort: a leftover bench queue is untidy, not wrong.
        let _ = client.delete_queue(&queue).await;
    }
    print_report(&report, args.conn.json)?;
    if !report.clean() {
        anyhow::bail!(
            "{} not delivered within the drain period ({} of them still queued: a backlog, \
             try more --consumers or a longer --drain), {} duplicates, {} early",
            report.lost,
            report.still_queued.map_or("?".into(), |n| n.to_string()),
            report.duplicates,
            report.early
        );
    }
    Ok(())
}

/// The clients the tasks share: `client` itself, or `--connections` new
/// ones (each its own connection pool) configured like it. Each new client
/// makes one request before the tasks start, so its connection is open and
/// the tasks' first requests, which start together, share it instead of
/// racing to open more (and connection set-up stays out of the timing).
async fn clients(args: &BenchArgs, client: &Client) -> anyhow::Result<Vec<Client>> {
    let Some(count) = args.connections else {
        return Ok(vec![client.clone()]);
    };
    let mut clients = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let client = args.conn.client()?.with_timeout(REQUEST_TIMEOUT);
        client
            .healthz()
            .await
            .context("opening a --connections connection")?;
        clients.push(client);
    }
    Ok(clients)
}

/// Waits until every enqueued message was delivered or `drain` after the
/// last due time (never past `hard_end`); true when a time bound ended it.
async fn drain(shared: &Shared, hard_end: Instant, drain: Duration) -> bool {
    let last_due_ms = shared.tally().last_due_ms;
    let until_due = Duration::from_millis(last_due_ms.saturating_sub(now_ms()));
    let deadline = (Instant::now() + until_due + drain).min(hard_end);
    loop {
        if shared.tally().complete() {
            return !shared.all_claimed();
        }
        tokio::select! {
            () = shared.delivered.notified() => {}
            () = tokio::time::sleep_until(deadline) => return true,
        }
    }
}

fn progress_bar(json: bool, messages: u64) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(messages);
    let template = "{elapsed_precise} [{bar:40}] {pos}/{len} delivered, {msg}";
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn build_report(
    args: &BenchArgs,
    shared: &Shared,
    queue: String,
    start: Instant,
    start_ms: u64,
    enqueue_seconds: f64,
    timed_out: bool,
) -> Report {
    let rate = |count: u64, seconds: f64| {
        if seconds > 0.0 {
            count as f64 / seconds
        } else {
            0.0
        }
    };
    let tally = shared.tally();
    let drain_per_second = shared.plan.due_together_ms.map(|due| {
        let last_ack = shared
            .last_acked_ms
            .load(std::sync::atomic::Ordering::SeqCst);
        rate(
            tally.delivered_unique,
            last_ack.saturating_sub(due) as f64 / 1000.0,
        )
    });
    let delivery_seconds = tally.last_received_ms.saturating_sub(start_ms) as f64 / 1000.0;
    Report {
        queue,
        producers: args.producers,
        consumers: args.consumers,
        http2: args.conn.http2,
        connections: args.connections,
        keys: args.keys,
        messages: args.messages,
        enqueued: tally.enqueued_count,
        enqueue_errors: tally.enqueue_errors,
        delivered: tally.delivered_unique,
        lost: tally.lost(),
        still_queued: None,
        duplicates: tally.duplicates,
        redeliveries: tally.redeliveries,
        early: tally.early,
        foreign: tally.foreign,
        lease_errors: tally.lease_errors,
        ack_errors: tally.ack_errors,
        timed_out,
        enqueue_seconds,
        enqueue_per_second: rate(tally.enqueued_count, enqueue_seconds),
        delivery_seconds,
        delivery_per_second: rate(tally.delivered_unique, delivery_seconds),
        elapsed_seconds: start.elapsed().as_secs_f64(),
        commits: None,
        commits_per_s: None,
        lateness_ms: tally.lateness(),
        drain_per_second,
        server_lateness: Vec::new(),
    }
}

fn print_report(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        crate::output::print_json(report)?;
    } else {
        crate::output::outln!("{}", report.table().trim_end())?;
    }
    Ok(())
}
