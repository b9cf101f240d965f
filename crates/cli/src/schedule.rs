//! `delayd schedule ...`: recurring schedules (api.md, "Schedules"). Each
//! subcommand is one HTTP call through `delayd-client` and prints text, or
//! with `--json` the API's JSON object. Fire times print in the schedule's
//! zone (with its offset) and in UTC, so a DST shift is visible.

use std::str::FromStr as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use delayd_client::wire::{
    CatchupMode, OverlapMode, PreviewBody, Schedule, ScheduleMessageBody, SchedulePutBody,
};
use serde_json::json;

use crate::commands::{format_time, parse_header, print_enqueued, print_payload, read_payload};
use crate::duration::{millis, parse_at, parse_duration};
use crate::output::{outln, print_json};
use crate::Connection;

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create or replace a schedule (creates the queue like an enqueue).
    Put(PutArgs),
    /// Show one schedule with its next fire times.
    Get(ScheduleArg),
    /// List a queue's schedules, by id.
    List(ListArgs),
    /// Delete a schedule (messages it already enqueued stay).
    Delete(ScheduleArg),
    /// Stop firing until `resume`.
    Pause(ScheduleArg),
    /// Fire again; fire times that passed while paused do not fire.
    Resume(ScheduleArg),
    /// Enqueue one message from the schedule now (not counted as a fire).
    Trigger(ScheduleArg),
    /// Print the next fire times of a cron or interval; stores nothing.
    Preview(PreviewArgs),
}

pub async fn run(command: ScheduleCommand) -> anyhow::Result<()> {
    match command {
        ScheduleCommand::Put(args) => put(args).await,
        ScheduleCommand::Get(args) => get(args).await,
        ScheduleCommand::List(args) => list(args).await,
        ScheduleCommand::Delete(args) => delete(args).await,
        ScheduleCommand::Pause(args) => pause_or_resume(args, true).await,
        ScheduleCommand::Resume(args) => pause_or_resume(args, false).await,
        ScheduleCommand::Trigger(args) => trigger(args).await,
        ScheduleCommand::Preview(args) => preview(args).await,
    }
}

/// `--cron` with `--tz`, or `--every`: when the schedule fires.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("recurrence").required(true).args(["cron", "every"])))]
pub struct Recurrence {
    /// Cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), 6 with seconds first, or @daily, @hourly, ...
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// IANA time zone of --cron (default UTC), e.g. Europe/Paris.
    #[arg(long, conflicts_with = "every", value_name = "ZONE")]
    tz: Option<String>,
    /// Fire every this long from --start-at (at least 1s), e.g. 15m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    every: Option<Duration>,
    /// No fire before this time: RFC 3339 or epoch ms (default: now; a
    /// replace without it keeps the current one).
    #[arg(long, value_parser = parse_at, value_name = "AT")]
    start_at: Option<u64>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Catchup {
    Latest,
    All,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Overlap {
    Allow,
    Skip,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// Schedule id: [A-Za-z0-9._-]{1,128}.
    id: String,
    #[command(flatten)]
    recurrence: Recurrence,
    /// No fire at or after this time: RFC 3339 or epoch ms.
    #[arg(long, value_parser = parse_at, value_name = "AT")]
    end_at: Option<u64>,
    /// Stop after this many fires.
    #[arg(long, value_name = "N")]
    max_fires: Option<u64>,
    /// Priority of each fired message (lower first; default 1024).
    #[arg(long)]
    priority: Option<u32>,
    /// A header of each fired message, `name=value` (repeatable).
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// max_attempts of each fired message (default: the queue's).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Missed fire times to enqueue when the server gets to them: the
    /// newest only, or all (within --catchup-window).
    #[arg(long, value_enum)]
    catchup: Option<Catchup>,
    /// Missed fire times older than this are dropped (default 1h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    catchup_window: Option<Duration>,
    /// skip: enqueue nothing while the previous fire's message is live.
    #[arg(long, value_enum)]
    overlap: Option<Overlap>,
    /// Delay each fire by a stable amount in [0, this).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    jitter: Option<Duration>,
    /// Create (or replace) the schedule paused.
    #[arg(long)]
    paused: bool,
    /// The payload of each fired message; `-` or absent reads stdin.
    data: Option<String>,
}

async fn put(args: PutArgs) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let mut message = ScheduleMessageBody::new(read_payload(args.data)?);
    message.priority = args.priority;
    message.headers = args.headers.into_iter().collect();
    message.max_attempts = args.max_attempts;
    let recurrence = args.recurrence;
    let body = SchedulePutBody {
        cron: recurrence.cron,
        every_ms: recurrence.every.map(millis),
        tz: recurrence.tz,
        start_at: recurrence.start_at,
        end_at: args.end_at,
        max_fires: args.max_fires,
        message,
        catchup: args.catchup.map(|c| match c {
            Catchup::Latest => CatchupMode::Latest,
            Catchup::All => CatchupMode::All,
        }),
        catchup_window_ms: args.catchup_window.map(millis),
        overlap: args.overlap.map(|o| match o {
            Overlap::Allow => OverlapMode::Allow,
            Overlap::Skip => OverlapMode::Skip,
        }),
        jitter_ms: args.jitter.map(millis),
        paused: args.paused.then_some(true),
    };
    let put = client.put_schedule(&args.queue, &args.id, &body).await?;
    if args.conn.json {
        return print_json(&put.schedule);
    }
    let what = if put.created { "created" } else { "replaced" };
    outln!(
        "{what}: schedule {} revision {}",
        put.schedule.id,
        put.schedule.revision
    )?;
    print_schedule(&put.schedule)
}

#[derive(Debug, Args)]
pub struct ScheduleArg {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
}

async fn get(args: ScheduleArg) -> anyhow::Result<()> {
    let schedule = args
        .conn
        .client()?
        .get_schedule(&args.queue, &args.id)
        .await?;
    if args.conn.json {
        return print_json(&schedule);
    }
    print_schedule(&schedule)
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let schedules = args.conn.client()?.list_schedules(&args.queue).await?;
    if args.conn.json {
        return print_json(&json!({ "schedules": schedules }));
    }
    if schedules.is_empty() {
        eprintln!("no schedules in {}", args.queue);
    }
    for s in &schedules {
        let next = match (s.paused, s.next_fire_at) {
            (true, _) => "paused".to_owned(),
            (false, Some(t)) => format_time(t),
            (false, None) => "finished".to_owned(),
        };
        outln!(
            "{}  {}  fires {}  next {next}",
            s.id,
            recurrence_text(s),
            s.fires
        )?;
    }
    Ok(())
}

async fn delete(args: ScheduleArg) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    client.delete_schedule(&args.queue, &args.id).await?;
    if args.conn.json {
        return print_json(&json!({ "queue": args.queue, "id": args.id, "deleted": true }));
    }
    outln!("deleted schedule {}", args.id)?;
    Ok(())
}

async fn pause_or_resume(args: ScheduleArg, pause: bool) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let schedule = if pause {
        client.pause_schedule(&args.queue, &args.id).await?
    } else {
        client.resume_schedule(&args.queue, &args.id).await?
    };
    if args.conn.json {
        return print_json(&schedule);
    }
    print_schedule(&schedule)
}

async fn trigger(args: ScheduleArg) -> anyhow::Result<()> {
    let client = args.conn.client()?;
    let done = client.trigger_schedule(&args.queue, &args.id).await?;
    if args.conn.json {
        return print_json(&done);
    }
    print_enqueued("enqueued", &done)
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(flatten)]
    recurrence: Recurrence,
    /// How many fire times (1..100).
    #[arg(long, default_value_t = 10)]
    count: u32,
}

async fn preview(args: PreviewArgs) -> anyhow::Result<()> {
    let recurrence = args.recurrence;
    let zone = recurrence.cron.as_ref().map(|_| {
        recurrence
            .tz
            .clone()
            .unwrap_or_else(|| delayd_api::schedule::DEFAULT_TZ.to_owned())
    });
    let body = PreviewBody {
        cron: recurrence.cron,
        every_ms: recurrence.every.map(millis),
        tz: recurrence.tz,
        start_at: recurrence.start_at,
        count: Some(args.count),
    };
    let fires = args.conn.client()?.preview_schedule(&body).await?;
    if args.conn.json {
        return print_json(&json!({ "fires": fires }));
    }
    for t in fires {
        outln!("{}", fire_time_text(t, zone.as_deref()))?;
    }
    Ok(())
}

/// A schedule's definition and state, one item a line.
fn print_schedule(s: &Schedule) -> anyhow::Result<()> {
    outln!("schedule   {} (queue {})", s.id, s.queue)?;
    outln!("fires on   {}", recurrence_text(s))?;
    outln!("paused     {}", if s.paused { "yes" } else { "no" })?;
    outln!("start_at   {}", format_time(s.start_at))?;
    if let Some(end_at) = s.end_at {
        outln!("end_at     {}", format_time(end_at))?;
    }
    let max = s
        .max_fires
        .map_or(String::new(), |max| format!(" of {max}"));
    outln!("fires      {}{max}", s.fires)?;
    if let Some(last) = s.last_fire_at {
        outln!("last fire  {}", format_time(last))?;
    }
    outln!(
        "catchup    {} within {}ms; overlap {}; jitter {}ms",
        s.catchup,
        s.catchup_window_ms,
        s.overlap,
        s.jitter_ms
    )?;
    outln!("revision   {}", s.revision)?;
    if s.next_fires.is_empty() {
        outln!("next       none")?;
    }
    for t in &s.next_fires {
        outln!("next       {}", fire_time_text(*t, s.tz.as_deref()))?;
    }
    print_payload(&s.message.payload)
}

/// `cron "0 9 * * *" in Europe/Paris` or `every 60000ms`.
fn recurrence_text(s: &Schedule) -> String {
    match (&s.cron, s.every_ms) {
        (Some(cron), _) => format!("cron {cron:?} in {}", s.tz.as_deref().unwrap_or("UTC")),
        (None, Some(every_ms)) => format!("every {every_ms}ms"),
        (None, None) => "?".to_owned(),
    }
}

/// A fire time in `zone` with its offset, then in UTC:
/// `2026-03-29T03:00:00+02:00 Europe/Paris  2026-03-29T01:00:00.000Z`.
/// Without a zone (interval schedules), UTC only.
fn fire_time_text(epoch_ms: u64, zone: Option<&str>) -> String {
    let utc = format_time(epoch_ms);
    let local = zone.and_then(|name| {
        let tz = Tz::from_str(name).ok()?;
        let at = DateTime::<Utc>::from_timestamp_millis(i64::try_from(epoch_ms).ok()?)?;
        let text = at.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S%.3f%:z");
        Some(format!("{text} {name}"))
    });
    match local {
        Some(local) => format!("{local}  {utc}"),
        None => utc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fire_times_show_the_zone_offset_and_utc() {
        // 2026-07-01T07:00:00Z is 09:00 in Paris (CEST, +02:00).
        let t = 1_782_889_200_000;
        assert_eq!(
            fire_time_text(t, Some("Europe/Paris")),
            "2026-07-01T09:00:00.000+02:00 Europe/Paris  2026-07-01T07:00:00.000Z"
        );
        assert_eq!(fire_time_text(t, None), "2026-07-01T07:00:00.000Z");
        assert_eq!(
            fire_time_text(t, Some("UTC")),
            format!("2026-07-01T07:00:00.000+00:00 UTC  {}", format_time(t))
        );
    }
}
