//! `delayd message QUEUE ID`: one message by id (`GET
//! /v1/queues/{queue}/messages/{id}`), without leasing it. It is how a
//! person sees a message in any state, a retained `acked` or `cancelled`
//! one included (its queue's `retain_ms`): with its `ended_at`, and no
//! payload, which is not kept. `delayd events QUEUE ID`: its history, as a
//! table.

use clap::Args;
use delayd_client::{EventKind, History, MessageView};

use crate::commands::{format_time, print_payload};
use crate::output::{outln, print_json};
use crate::Connection;

#[derive(Debug, Args)]
pub struct MessageArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
}

pub async fn show(args: MessageArgs) -> anyhow::Result<()> {
    let message = args
        .conn
        .client()?
        .get_message(&args.queue, &args.id)
        .await?;
    if args.conn.json {
        return print_json(&message);
    }
    print_message(&message)
}

/// The states of a message that ended and is only retained.
const ENDED: [&str; 2] = ["acked", "cancelled"];

/// One field a line, then the headers and the payload; a time the message
/// does not have (`lease_until` while not leased...) gets no line.
fn print_message(m: &MessageView) -> anyhow::Result<()> {
    outln!("id          {}", m.id)?;
    outln!("queue       {}", m.queue)?;
    outln!("state       {}", m.state)?;
    outln!("seq         {}", m.seq)?;
    outln!("deliver_at  {}", format_time(m.deliver_at))?;
    outln!("enqueued_at {}", format_time(m.enqueued_at))?;
    let attempts = match m.max_attempts {
        Some(max) => format!("{} of {max}", m.attempts),
        None => m.attempts.to_string(),
    };
    outln!("attempts    {attempts}")?;
    outln!("priority    {}", m.priority)?;
    if let Some(key) = &m.key {
        outln!("key         {key}")?;
    }
    if m.deferrals > 0 {
        outln!("deferrals   {}", m.deferrals)?;
    }
    let times = [
        ("lease_until", m.lease_until),
        ("died_at    ", m.died_at),
        ("ended_at   ", m.ended_at),
    ];
    for (label, time) in times {
        if let Some(time) = time {
            outln!("{label} {}", format_time(time))?;
        }
    }
    if let Some(error) = &m.last_error {
        outln!("last_error  {error}")?;
    }
    for (name, value) in &m.headers {
        outln!("header      {name}: {value}")?;
    }
    if ENDED.contains(&m.state.as_str()) {
        outln!("payload     none kept (the message ended; only its record is retained)")?;
        return Ok(());
    }
    print_payload(&m.payload)
}

/// `delayd events QUEUE ID`: a message's history (`GET
/// /v1/queues/{queue}/messages/{id}/events`), oldest first.
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
}

pub async fn events(args: EventsArgs) -> anyhow::Result<()> {
    let history = args.conn.client()?.events(&args.queue, &args.id).await?;
    if args.conn.json {
        return print_json(&history);
    }
    outln!("{}", events_table(&history).trim_end())?;
    Ok(())
}

/// TIME, TYPE, ATTEMPT, DETAILS; each column as wide as its widest cell
/// (the last one unpadded), and a line for the events dropped before.
fn events_table(history: &History) -> String {
    let header = ["TIME", "TYPE", "ATTEMPT", "DETAILS"].map(String::from);
    let rows: Vec<[String; 4]> = history
        .events
        .iter()
        .map(|e| {
            [
                format_time(e.at),
                e.kind.name().to_owned(),
                e.attempt.to_string(),
                details(&e.kind),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    if history.dropped > 0 {
        out.push_str(&format!("({} older events dropped)\n", history.dropped));
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// An event's own fields as `name=value`: times as RFC 3339, texts quoted
/// (so a newline in an error stays on its row), absent values left out.
fn details(kind: &EventKind) -> String {
    let quoted = |text: &str| format!("{text:?}");
    let fields: Vec<(&str, Option<String>)> = match kind {
        EventKind::Replaced { after_lease } => vec![("after_lease", Some(after_lease.to_string()))],
        EventKind::Leased { lease_until, via } => vec![
            ("via", Some(via.clone())),
            ("lease_until", Some(format_time(*lease_until))),
        ],
        EventKind::Nacked { delay_ms, error } => vec![
            ("delay_ms", delay_ms.map(|ms| ms.to_string())),
            ("error", error.as_deref().map(quoted)),
        ],
        EventKind::Deferred { until, reason } => vec![
            ("reason", Some(reason.clone())),
            ("until", Some(format_time(*until))),
        ],
        EventKind::PushFailed {
            status,
            error,
            duration_ms,
        } => vec![
            ("status", status.map(|s| s.to_string())),
            ("duration_ms", Some(duration_ms.to_string())),
            ("error", Some(quoted(error))),
        ],
        EventKind::Dead { reason } => vec![("reason", Some(reason.clone()))],
        EventKind::Other { fields, .. } => fields
            .iter()
            .map(|(name, value)| (name.as_str(), Some(value.to_string())))
            .collect(),
        EventKind::Enqueued
        | EventKind::Rescheduled
        | EventKind::Acked
        | EventKind::Expired
        | EventKind::Redriven
        | EventKind::Cancelled => Vec::new(),
    };
    fields
        .into_iter()
        .filter_map(|(name, value)| value.map(|value| format!("{name}={value}")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayd_client::Event;

    #[test]
    fn table_lines_up_and_notes_the_dropped() {
        let history = History {
            events: vec![
                Event {
                    at: 0,
                    attempt: 1,
                    kind: EventKind::Leased {
                        lease_until: 30_000,
                        via: "push".into(),
                    },
                },
                Event {
                    at: 1_000,
                    attempt: 1,
                    kind: EventKind::PushFailed {
                        status: None,
                        error: "connect failed:\nrefused".into(),
                        duration_ms: 3,
                    },
                },
            ],
            dropped: 2,
        };
        let table = events_table(&history);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "(2 older events dropped)");
        assert_eq!(
            lines[1],
            "TIME                      TYPE         ATTEMPT  DETAILS"
        );
        assert_eq!(
            lines[2],
            "1970-01-01T00:00:00.000Z  leased       1        via=push lease_until=1970-01-01T00:00:30.000Z"
        );
        assert_eq!(
            lines[3],
            "1970-01-01T00:00:01.000Z  push_failed  1        duration_ms=3 error=\"connect failed:\\nrefused\""
        );
    }
}
