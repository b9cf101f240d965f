//! The bench's result: one JSON object with `--json`, else a table.

use serde::Serialize;

use crate::bench::stages::StageLateness;

/// Lateness = receive time - `deliver_at`, in milliseconds, over all
/// deliveries that were not early.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Lateness {
    pub samples: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub queue: String,
    pub producers: u32,
    pub consumers: u32,
    /// `--http2`: the requests went over HTTP/2.
    pub http2: bool,
    /// `--connections` (`null`: one client, one pool, for every task).
    pub connections: Option<u32>,
    /// `--keys` (`null`: the messages had no flow key).
    pub keys: Option<u64>,
    /// `--messages`: how many the run tried to enqueue.
    pub messages: u64,
    pub enqueued: u64,
    pub enqueue_errors: u64,
    /// Distinct messages delivered.
    pub delivered: u64,
    /// Enqueued but never delivered by the end of the drain period.
    pub lost: u64,
    /// Scheduled or ready messages left in the queue at the end (`null`
    /// when the queue could not be read): the part of `lost` that is a
    /// backlog (consumers too slow, drain too short) rather than gone.
    pub still_queued: Option<u64>,
    /// A first delivery (attempt 1) seen more than once.
    pub duplicates: u64,
    /// Deliveries with attempt > 1.
    pub redeliveries: u64,
    /// Received before `deliver_at`; must be 0.
    pub early: u64,
    /// Deliveries that were not this run's messages.
    pub foreign: u64,
    pub lease_errors: u64,
    pub ack_errors: u64,
    /// Whether the run stopped at a time bound rather than because every
    /// message was enqueued and delivered.
    pub timed_out: bool,
    pub enqueue_seconds: f64,
    pub enqueue_per_second: f64,
    pub delivery_seconds: f64,
    pub delivery_per_second: f64,
    pub elapsed_seconds: f64,
    /// The server's storage commits (`delayd_commits_total`) between a
    /// `/metrics` read before the run and one after it; `null` when
    /// `/metrics` was unreadable or has no such counter (a Redis store).
    pub commits: Option<u64>,
    /// `commits` per second over the time between the two reads.
    pub commits_per_s: Option<f64>,
    pub lateness_ms: Lateness,
    /// With `--due-together`: delivered / (last ack - the common due
    /// instant), in messages per second; `null` otherwise.
    pub drain_per_second: Option<f64>,
    /// The server's lateness by stage over the run (its
    /// `delayd_delivery_lateness_seconds` histogram); empty when
    /// `/metrics` was unreadable or has no such histogram.
    pub server_lateness: Vec<StageLateness>,
}

impl Report {
    /// Whether the server kept its promises in this run.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicates == 0 && self.early == 0
    }

    pub fn table(&self) -> String {
        let l = &self.lateness_ms;
        let rows: Vec<(&str, String)> = vec![
            ("queue", self.queue.clone()),
            (
                "producers / consumers",
                format!("{} / {}", self.producers, self.consumers),
            ),
            ("connections", self.connections_text()),
            (
                "enqueued",
                format!(
                    "{} of {} ({} errors)",
                    self.enqueued, self.messages, self.enqueue_errors
                ),
            ),
            (
                "enqueue rate",
                format!(
                    "{:.0} msg/s over {:.2}s",
                    self.enqueue_per_second, self.enqueue_seconds
                ),
            ),
            ("delivered", self.delivered.to_string()),
            (
                "delivery rate",
                format!(
                    "{:.0} msg/s over {:.2}s",
                    self.delivery_per_second, self.delivery_seconds
                ),
            ),
            ("server commits", self.commits_text()),
            (
                "drain rate (after the due instant)",
                self.drain_per_second
                    .map_or("-".into(), |r| format!("{r:.0} msg/s")),
            ),
            ("lateness p50 / p99", format!("{} / {} ms", l.p50, l.p99)),
            ("lateness p999 / max", format!("{} / {} ms", l.p999, l.max)),
            ("server lateness by stage", self.stages_text()),
            ("early", self.early.to_string()),
            ("lost", self.lost.to_string()),
            (
                "still queued at the end",
                self.still_queued.map_or("?".into(), |n| n.to_string()),
            ),
            ("duplicates", self.duplicates.to_string()),
            ("redeliveries", self.redeliveries.to_string()),
            (
                "lease / ack errors",
                format!("{} / {}", self.lease_errors, self.ack_errors),
            ),
            ("foreign messages", self.foreign.to_string()),
            (
                "stopped by time bound",
                if self.timed_out { "yes" } else { "no" }.to_owned(),
            ),
            ("elapsed", format!("{:.2}s", self.elapsed_seconds)),
        ];
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        rows.iter()
            .map(|(k, v)| format!("{k:<width$}  {v}\n"))
            .collect()
    }

    fn connections_text(&self) -> String {
        let version = if self.http2 { "HTTP/2" } else { "HTTP/1.1" };
        match self.connections {
            Some(n) => format!("{version}, {n} clients"),
            None => format!("{version}, one client"),
        }
    }

    fn stages_text(&self) -> String {
        if self.server_lateness.is_empty() {
            return "n/a".into();
        }
        let bound = |ms: Option<f64>| ms.map_or("beyond 60 s".into(), |ms| format!("<= {ms} ms"));
        self.server_lateness
            .iter()
            .map(|s| {
                format!(
                    "{}: p50 {}, p99 {}",
                    s.stage,
                    bound(s.p50_ms_at_most),
                    bound(s.p99_ms_at_most)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn commits_text(&self) -> String {
        match (self.commits, self.commits_per_s) {
            (Some(count), Some(rate)) => format!("{count} ({rate:.0}/s)"),
            _ => "? (/metrics unreadable or without delayd_commits_total)".to_owned(),
        }
    }
}
