//! Operator subcommands: dead letters (dead, redrive), pausing (pause,
//! resume), moving a message in time (reschedule), queue configuration
//! (queue show/list/set, its flow options in `flow`) and deleting a queue. Each is one HTTP call of
//! api.md through `delayd-client` (queue set may read the queue first), and
//! prints text, or with `--json` the API's JSON object.

use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};
use delayd_client::{Client, ClientError, PushSpec, QueuePut, Reschedule, Retry};
use serde_json::json;

use crate::commands::{self, format_time, print_payload, print_queue};
use crate::duration::{millis, parse_at, parse_duration};
use crate::output::{outln, print_json};
use crate::{Connection, UsageError};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// List a queue's dead letters, oldest death first.
    Dead(DeadArgs),
    /// Move dead letters back to ready with attempts reset (all when no ID
    /// is given).
    Redrive(RedriveArgs),
    /// Stop handing out leases and pushing (enqueues still accepted).
    Pause(QueueArg),
    /// Undo `pause`.
    Resume(QueueArg),
    /// Change when a scheduled or ready message is delivered, or its
    /// priority.
    Reschedule(RescheduleArgs),
    /// Show, list or configure queues.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Delete a queue and every message in it (needs --yes).
    DeleteQueue(DeleteQueueArgs),
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Show one queue: config, pause state and counts (same as `stats`).
    Show(commands::StatsArgs),
    /// List queues with their message counts (same as `queues`).
    List(commands::QueuesArgs),
    /// Create a queue or change its config; absent options keep their value.
    // Boxed: its options (retry, push, flow) make it far larger than the
    // other subcommands' arguments.
    Set(Box<QueueSetArgs>),
}

pub async fn run(command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::Dead(args) => dead(args).await,
        AdminCommand::Redrive(args) => redrive(args).await,
        AdminCommand::Pause(args) => pause_or_resume(args, true).await,
        AdminCommand::Resume(args) => pause_or_resume(args, false).await,
        AdminCommand::Reschedule(args) => reschedule(args).await,
        AdminCommand::Queue(QueueCommand::Show(args)) => commands::stats(args).await,
        AdminCommand::Queue(QueueCommand::List(args)) => commands::queues(args).await,
        AdminCommand::Queue(QueueCommand::Set(args)) => queue_set(*args).await,
        AdminCommand::DeleteQueue(args) => delete_queue(args).await,
    }
}

#[derive(Debug, Args)]
pub struct QueueArg {
    #[command(flatten)]
    conn: Connection,
    queue: String,
}

#[derive(Debug, Args)]
pub struct DeadArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// At most this many (1..1000; the server's default is 100).
    #[arg(long)]
    limit: Option<u32>,
    /// Start after this id: the last id of the previous page.
    #[arg(long, value_name = "ID")]
    after: Option<String>,
}

async fn dead(args: DeadArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let messages = client
        .dead(&args.queue, args.limit, args.after.as_deref())
        .await?;
    if args.conn.json {
        return print_json(&json!({ "messages": messages }));
    }
    if messages.is_empty() {
        eprintln!("no dead messages in {}", args.queue);
    }
    for message in &messages {
        outln!(
            "id {}  attempts {}  priority {}  deliver_at {}  enqueued_at {}",
            message.id,
            message.attempts,
            message.priority,
            format_time(message.deliver_at),
            format_time(message.enqueued_at)
        )?;
        print_payload(&message.payload)?;
    }
    // A full page may have a next one; say how to get it (on stderr, so
    // the listing itself stays clean).
    let page = args.limit.map_or(100, |limit| limit as usize);
    if let (Some(last), true) = (messages.last(), messages.len() >= page) {
        eprintln!("more may follow: --after {}", last.id);
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct RedriveArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// Dead messages to redrive; none means all of the queue's dead
    /// letters. Ids that are not dead are ignored.
    ids: Vec<String>,
}

async fn redrive(args: RedriveArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let ids = (!args.ids.is_empty()).then_some(args.ids.as_slice());
    let redriven = client.redrive(&args.queue, ids).await?;
    if args.conn.json {
        return print_json(&json!({ "redriven": redriven }));
    }
    outln!("redriven {redriven}")?;
    Ok(())
}

async fn pause_or_resume(args: QueueArg, pause: bool) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let queue = if pause {
        client.pause(&args.queue).await?
    } else {
        client.resume(&args.queue).await?
    };
    if args.conn.json {
        return print_json(&queue);
    }
    let what = if queue.paused { "paused" } else { "resumed" };
    outln!("{what} {}", queue.name)?;
    Ok(())
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("change").required(true).multiple(true)))]
pub struct RescheduleArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
    /// Deliver this long from now (e.g. 30s, 48h).
    #[arg(long, value_parser = parse_duration, group = "change", conflicts_with = "at")]
    delay: Option<Duration>,
    /// Deliver at this time: epoch ms or RFC 3339 (2030-01-02T03:04:05Z).
    #[arg(long, value_parser = parse_at, group = "change")]
    at: Option<u64>,
    /// New priority (lower is delivered first).
    #[arg(long, group = "change")]
    priority: Option<u32>,
}

async fn reschedule(args: RescheduleArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let change = Reschedule {
        delay_ms: args.delay.map(millis),
        deliver_at: args.at,
        priority: args.priority,
    };
    let message = client.reschedule(&args.queue, &args.id, &change).await?;
    if args.conn.json {
        return print_json(&message);
    }
    outln!(
        "rescheduled {}: {} deliver_at {} priority {}",
        message.id,
        message.state,
        format_time(message.deliver_at),
        message.priority
    )?;
    Ok(())
}

#[derive(Debug, Args)]
pub struct QueueSetArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// How long a lease lasts unless the consumer asks otherwise.
    #[arg(long, value_parser = parse_duration)]
    lease: Option<Duration>,
    /// Deliveries before a message goes dead.
    #[arg(long)]
    max_attempts: Option<u32>,
    /// First retry delay; retry options not given keep the queue's value.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    retry_initial: Option<Duration>,
    /// Longest retry delay.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    retry_max: Option<Duration>,
    /// Growth of the retry delay per attempt (>= 1.0).
    #[arg(long, value_name = "FACTOR")]
    retry_multiplier: Option<f64>,
    /// Push each due message to this URL (replaces the whole push config:
    /// options not given take the server's defaults, the secret is removed).
    #[arg(long, value_name = "URL", conflicts_with = "no_push")]
    push_url: Option<String>,
    /// How long the push target may take to answer.
    #[arg(long, value_parser = parse_duration, requires = "push_url", value_name = "DURATION")]
    push_timeout: Option<Duration>,
    /// Push requests in flight at most for the queue.
    #[arg(long, requires = "push_url", value_name = "N")]
    push_concurrency: Option<u32>,
    /// Sign pushes with HMAC-SHA256 under this secret.
    #[arg(long, requires = "push_url", value_name = "SECRET")]
    push_secret: Option<String>,
    /// Send this header with every push request, as `NAME: VALUE` (for
    /// example `Authorization: Bearer ...`); repeatable, up to 16.
    #[arg(long, requires = "push_url", value_name = "NAME: VALUE", value_parser = parse_header)]
    push_header: Vec<(String, String)>,
    /// Remove the push target: consumers lease instead.
    #[arg(long)]
    no_push: bool,
    /// Keep a message that ended (acked or cancelled) this long without its
    /// payload: `delayd message` shows it, and its id stays taken (0s: not
    /// kept; at most 30d).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    retain: Option<Duration>,
    #[command(flatten)]
    flow: crate::flow::FlowArgs,
}

async fn queue_set(args: QueueSetArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let body = QueuePut {
        lease_ms: args.lease.map(millis),
        max_attempts: args.max_attempts,
        retry: retry_change(&client, &args).await?,
        push: push_change(&args),
        flow: crate::flow::flow_change(&client, &args.queue, &args.flow).await?,
        retain_ms: args.retain.map(millis),
    };
    let done = client.put_queue(&args.queue, &body).await?;
    if args.conn.json {
        return print_json(&done.queue);
    }
    let what = if done.created { "created" } else { "updated" };
    outln!("{what} {}", done.queue.name)?;
    print_queue(&done.queue)
}

/// api.md replaces `retry` as a whole, so options not given are filled in
/// from the queue's current values (the defaults when it does not exist).
async fn retry_change(client: &Client, args: &QueueSetArgs) -> anyhow::Result<Option<Retry>> {
    let (initial, max, multiplier) = (args.retry_initial, args.retry_max, args.retry_multiplier);
    if initial.is_none() && max.is_none() && multiplier.is_none() {
        return Ok(None);
    }
    let current = match (initial, max, multiplier) {
        (Some(_), Some(_), Some(_)) => DEFAULT_RETRY,
        _ => match client.get_queue(&args.queue).await {
            Ok(queue) => {
                let r = queue.config.retry;
                Retry {
                    initial_ms: r.initial_ms,
                    max_ms: r.max_ms,
                    multiplier: r.multiplier,
                }
            }
            Err(ClientError::Api { code, .. }) if code == "queue_not_found" => DEFAULT_RETRY,
            Err(err) => return Err(err.into()),
        },
    };
    Ok(Some(Retry {
        initial_ms: initial.map_or(current.initial_ms, millis),
        max_ms: max.map_or(current.max_ms, millis),
        multiplier: multiplier.unwrap_or(current.multiplier),
    }))
}

/// api.md's defaults for a new queue's `retry`.
const DEFAULT_RETRY: Retry = Retry {
    initial_ms: delayd_api::DEFAULT_RETRY_INITIAL_MS,
    max_ms: delayd_api::DEFAULT_RETRY_MAX_MS,
    multiplier: delayd_api::DEFAULT_RETRY_MULTIPLIER,
};

/// `Some(None)` sends `"push": null` (remove); `None` leaves push alone.
fn push_change(args: &QueueSetArgs) -> Option<Option<PushSpec>> {
    if args.no_push {
        return Some(None);
    }
    let url = args.push_url.clone()?;
    Some(Some(PushSpec {
        url,
        timeout_ms: args.push_timeout.map(millis),
        concurrency: args.push_concurrency,
        secret: args.push_secret.clone(),
        headers: (!args.push_header.is_empty()).then(|| args.push_header.iter().cloned().collect()),
    }))
}

/// `NAME: VALUE` (or `NAME=VALUE`) as a header pair.
fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .or_else(|| text.split_once('='))
        .ok_or_else(|| format!("expected NAME: VALUE, got {text:?}"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("empty header name in {text:?}"));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

#[derive(Debug, Args)]
pub struct DeleteQueueArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// Confirm: every message of the queue is deleted, in every state.
    #[arg(long)]
    yes: bool,
}

async fn delete_queue(args: DeleteQueueArgs) -> anyhow::Result<()> {
    if !args.yes {
        return Err(UsageError(format!(
            "refusing to delete queue {:?} without --yes: it deletes every message in it \
             (scheduled, ready, leased and dead)",
            args.queue
        ))
        .into());
    }
    args.conn.client()?.delete_queue(&args.queue).await?;
    if args.conn.json {
        return print_json(&json!({ "queue": args.queue, "deleted": true }));
    }
    outln!("deleted queue {}", args.queue)?;
    Ok(())
}
