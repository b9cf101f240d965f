//! The people-facing subcommands: put, get, ack, nack, cancel, queues, stats.
//! Each prints text for a person, or with `--json` one JSON document on
//! stdout (diagnostics go to stderr, so stdout stays parseable).

use std::io::{IsTerminal, Read};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Args;
use delayd_client::{
    AckItem, Enqueued, LeaseOptions, Leased, NewMessage, OnConflict, Payload, Queue,
};
use serde_json::json;

use crate::duration::{millis, parse_at, parse_duration};
use crate::output::{outln, print_json};
use crate::{Connection, UsageError};

#[derive(Debug, Args)]
pub struct PutArgs {
    #[command(flatten)]
    conn: Connection,
    /// Queue to enqueue to (created with defaults when it does not exist).
    queue: String,
    /// Deliver after this long (e.g. 30s, 48h).
    #[arg(long, value_parser = parse_duration, conflicts_with = "at")]
    delay: Option<Duration>,
    /// Deliver at this time: RFC 3339 (2030-01-02T03:04:05Z) or epoch ms.
    #[arg(long, value_parser = parse_at)]
    at: Option<u64>,
    /// Idempotency key: enqueueing a live id again changes nothing (unless
    /// --replace or --debounce).
    #[arg(long)]
    id: Option<String>,
    /// Lower is delivered first (default 1024).
    #[arg(long)]
    priority: Option<u32>,
    /// A message header, `name=value` (repeatable).
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// The message's flow key (a tenant, a customer...): the queue's
    /// per-key limits apply to it (docs/flow.md).
    #[arg(long)]
    key: Option<String>,
    /// When the id names a live message: a scheduled or ready one takes this
    /// payload, headers, priority, key and due time (a leased one keeps
    /// them as its successor, applied when its lease ends).
    #[arg(long, requires = "id", conflicts_with = "debounce")]
    replace: bool,
    /// As --replace, with the due time capped at the live message's
    /// enqueue time plus --debounce-max (no cap without it).
    #[arg(long, requires = "id")]
    debounce: bool,
    /// Debounce's cap (e.g. 5m); needs --debounce.
    #[arg(long, value_parser = parse_duration, requires = "debounce")]
    debounce_max: Option<Duration>,
    /// The payload; `-` or absent reads stdin (when it is not a terminal).
    data: Option<String>,
}

pub(crate) fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("invalid header {text:?}: expected name=value")),
    }
}

/// DATA from the argument, else stdin; a terminal on stdin is a mistake
/// (the user would be left staring at a silent prompt).
pub(crate) fn read_payload(data: Option<String>) -> anyhow::Result<Payload> {
    match data.as_deref() {
        Some("-") | None => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(UsageError(
                    "no DATA given and stdin is a terminal; pass DATA, or pipe it in with -".into(),
                )
                .into());
            }
            let mut bytes = Vec::new();
            stdin
                .read_to_end(&mut bytes)
                .context("reading the payload from stdin")?;
            Ok(Payload::from_bytes(bytes))
        }
        Some(_) => Ok(Payload::Text(data.unwrap_or_default())),
    }
}

pub async fn put(args: PutArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let mut message = NewMessage::new(read_payload(args.data)?);
    message.id = args.id;
    message.delay_ms = args.delay.map(millis);
    message.deliver_at = args.at;
    message.priority = args.priority;
    message.headers = args.headers.into_iter().collect();
    message.key = args.key;
    message.on_conflict = match (args.replace, args.debounce) {
        (true, _) => Some(OnConflict::Replace),
        (_, true) => Some(OnConflict::Debounce),
        _ => None,
    };
    message.debounce_max_ms = args.debounce_max.map(millis);
    let done = client.enqueue(&args.queue, &message).await?;
    if args.conn.json {
        print_json(&done)?;
    } else {
        let what = match (done.created, done.replaced, done.after_lease) {
            (true, _, _) => "enqueued",
            (false, true, true) => "replaced after_lease (the leased message's successor)",
            (false, true, false) => "replaced",
            (false, false, _) => "already live (unchanged)",
        };
        print_enqueued(what, &done)?;
    }
    Ok(())
}

/// One line for an enqueued message (`put`, `schedule trigger`).
pub(crate) fn print_enqueued(what: &str, done: &Enqueued) -> anyhow::Result<()> {
    outln!(
        "{what}: id {} seq {} deliver_at {}",
        done.id,
        done.seq,
        format_time(done.deliver_at)
    )?;
    Ok(())
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// Wait up to this long for a message (at most 60s).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    wait: Duration,
    /// Receive at most this many messages (1..1000).
    #[arg(long, default_value_t = 1)]
    max: u32,
    /// Lease length (default: the queue's).
    #[arg(long, value_parser = parse_duration)]
    lease: Option<Duration>,
    /// Acknowledge each message after printing it.
    #[arg(long)]
    ack: bool,
}

pub async fn get(args: GetArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let options = LeaseOptions {
        max: args.max,
        wait_ms: millis(args.wait),
        lease_ms: args.lease.map(millis),
    };
    let messages = client.lease(&args.queue, options).await?;
    if args.conn.json {
        print_json(&json!({ "messages": messages }))?;
    } else if messages.is_empty() {
        eprintln!("no message ready in {}", args.queue);
    } else {
        for message in &messages {
            print_delivery(message)?;
        }
    }
    if args.ack {
        for message in &messages {
            client
                .ack(&args.queue, &message.id, &message.lease_id)
                .await
                .with_context(|| format!("acking {}", message.id))?;
        }
    }
    Ok(())
}

fn print_delivery(message: &Leased) -> anyhow::Result<()> {
    let key = message
        .key
        .as_deref()
        .map_or_else(String::new, |key| format!("  key {key}"));
    outln!(
        "id {}  lease_id {}  attempt {}  deliver_at {}{key}",
        message.id,
        message.lease_id,
        message.attempt,
        format_time(message.deliver_at)
    )?;
    print_payload(&message.payload)
}

/// The payload on its own line: as text, or base64 when it is not UTF-8.
pub fn print_payload(payload: &Payload) -> anyhow::Result<()> {
    match payload {
        Payload::Text(text) => outln!("{text}")?,
        Payload::Binary(bytes) => outln!(
            "(binary, base64) {}",
            delayd_client::wire::encode_base64(bytes)
        )?,
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct AckArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
    lease_id: String,
    /// More deliveries to ack, as `ID LEASE_ID` pairs: all of them go in one
    /// batch request (`POST .../acks`), each acked or failed on its own.
    #[arg(value_name = "ID LEASE_ID")]
    more: Vec<String>,
}

pub async fn ack(args: AckArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    if args.more.is_empty() {
        client.ack(&args.queue, &args.id, &args.lease_id).await?;
        return report_done(&args.conn, "acked", &args.id);
    }
    if !args.more.len().is_multiple_of(2) {
        return Err(UsageError("ack takes ID LEASE_ID pairs".into()).into());
    }
    let mut items = vec![AckItem {
        id: args.id.clone(),
        lease_id: args.lease_id.clone(),
    }];
    items.extend(args.more.chunks(2).map(|pair| AckItem {
        id: pair[0].clone(),
        lease_id: pair[1].clone(),
    }));
    let results = client.ack_many(&args.queue, &items).await?;
    let mut failed = 0;
    for (item, result) in items.iter().zip(&results) {
        match result {
            Ok(()) => report_done(&args.conn, "acked", &item.id)?,
            Err(error) => {
                failed += 1;
                if args.conn.json {
                    let line = json!({"id": item.id, "error": {"code": error.code, "message": error.message}});
                    print_json(&line)?;
                } else {
                    outln!("failed {} {}: {}", item.id, error.code, error.message)?;
                }
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} acks failed", items.len());
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct NackArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
    lease_id: String,
    /// Deliver again after this long (default: the queue's retry backoff).
    #[arg(long, value_parser = parse_duration)]
    delay: Option<Duration>,
    /// Defer instead of failing (queues with flow control): the delivery
    /// is not an attempt, and the message's key cools down until it is due
    /// again.
    #[arg(long)]
    defer: bool,
    /// Why the delivery failed (at most 1024 bytes): kept as the message's
    /// `last_error`.
    #[arg(long)]
    error: Option<String>,
}

pub async fn nack(args: NackArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let options = delayd_client::NackOptions {
        delay_ms: args.delay.map(millis),
        defer: args.defer,
        error: args.error,
    };
    client
        .nack_with(&args.queue, &args.id, &args.lease_id, &options)
        .await?;
    let done = if args.defer { "deferred" } else { "nacked" };
    report_done(&args.conn, done, &args.id)
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
}

pub async fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    client.cancel(&args.queue, &args.id).await?;
    report_done(&args.conn, "cancelled", &args.id)
}

fn report_done(conn: &Connection, what: &str, id: &str) -> anyhow::Result<()> {
    if conn.json {
        print_json(&json!({ "id": id, what: true }))?;
    } else {
        outln!("{what} {id}")?;
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    conn: Connection,
}

pub async fn queues(args: QueuesArgs) -> anyhow::Result<()> {
    let queues = args.conn.client()?.list_queues().await?;
    if args.conn.json {
        print_json(&json!({ "queues": queues }))?;
    } else {
        outln!("{}", queue_table(&queues).trim_end())?;
    }
    Ok(())
}

/// name, scheduled, ready, leased, dead, paused; columns as wide as their
/// widest cell.
fn queue_table(queues: &[Queue]) -> String {
    let header = ["NAME", "SCHEDULED", "READY", "LEASED", "DEAD", "PAUSED"].map(String::from);
    let rows: Vec<[String; 6]> = queues
        .iter()
        .map(|q| {
            let s = q.stats;
            [
                q.name.clone(),
                s.scheduled.to_string(),
                s.ready.to_string(),
                s.leased.to_string(),
                s.dead.to_string(),
                if q.paused { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
}

pub async fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let queue = args.conn.client()?.get_queue(&args.queue).await?;
    if args.conn.json {
        return print_json(&queue);
    }
    print_queue(&queue)
}

/// A queue's name, pause state, counts and config, one item a line.
pub fn print_queue(queue: &Queue) -> anyhow::Result<()> {
    let (c, s) = (&queue.config, queue.stats);
    outln!("queue      {}", queue.name)?;
    outln!("paused     {}", if queue.paused { "yes" } else { "no" })?;
    outln!(
        "scheduled  {}\nready      {}\nleased     {}\ndead       {}",
        s.scheduled,
        s.ready,
        s.leased,
        s.dead
    )?;
    outln!(
        "lease      {}ms\nattempts   {} max",
        c.lease_ms,
        c.max_attempts
    )?;
    outln!(
        "retry      {}ms x{} up to {}ms",
        c.retry.initial_ms,
        c.retry.multiplier,
        c.retry.max_ms
    )?;
    if c.retain_ms > 0 {
        outln!("retain     {}ms after ack or cancel", c.retain_ms)?;
    }
    if let Some(push) = &c.push {
        outln!(
            "push       {} (timeout {}ms, concurrency {}, {})",
            push.url,
            push.timeout_ms,
            push.concurrency,
            if push.secret_set {
                "signed"
            } else {
                "unsigned"
            }
        )?;
    }
    crate::flow::print_flow(c.flow.as_ref(), &s)
}

/// Epoch ms as RFC 3339 UTC with milliseconds.
pub fn format_time(epoch_ms: u64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(epoch_ms);
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse() {
        assert_eq!(parse_header("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_header("=x").is_err());
        assert!(parse_header("novalue").is_err());
    }

    #[test]
    fn time_formats() {
        assert_eq!(format_time(1_500), "1970-01-01T00:00:01.500Z");
    }
}
