//! Server-wide counters and the three YAML documents (`stats`, `stats-job`,
//! `stats-tube`) with exactly beanstalkd 1.13's keys, in its order.

use std::sync::atomic::{AtomicU64, Ordering};

use delayd_core::{Message, MessageState, QueueInfo, QueueStats};

use crate::proto::Command;
use crate::reply::YamlDict;
use crate::tubes::TubeEntry;

/// Counter: commands executed, label `command` (the beanstalkd name).
pub const COMMANDS_TOTAL: &str = "delayd_beanstalk_commands_total";
/// Gauge: open beanstalkd connections.
pub const CONNECTIONS: &str = "delayd_beanstalk_connections";
/// Gauge: the most open beanstalkd connections (`BeanstalkConfig::max_connections`).
pub const MAX_CONNECTIONS: &str = "delayd_beanstalk_max_connections";
/// Counter: connections closed at once because the limit was reached.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "delayd_beanstalk_connections_refused_total";

/// Commands with a `cmd-*` counter, in beanstalkd's stats order.
const COUNTED: [&str; 25] = [
    "put",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve",
    "reserve-with-timeout",
    "delete",
    "release",
    "use",
    "watch",
    "ignore",
    "bury",
    "kick",
    "touch",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
    "pause-tube",
    // Counted, but beanstalkd's stats do not show these.
    "kick-job",
    "reserve-job",
    "quit",
];

/// The beanstalkd name of a command (its `cmd-*` key and metric label).
pub(crate) fn command_name(command: &Command) -> &'static str {
    use Command as C;
    match command {
        C::Put { .. } => "put",
        C::Peek(_) => "peek",
        C::PeekReady => "peek-ready",
        C::PeekDelayed => "peek-delayed",
        C::PeekBuried => "peek-buried",
        C::Reserve => "reserve",
        C::ReserveWithTimeout(_) => "reserve-with-timeout",
        C::Delete(_) => "delete",
        C::Release { .. } => "release",
        C::Use(_) => "use",
        C::Watch(_) => "watch",
        C::Ignore(_) => "ignore",
        C::Bury { .. } => "bury",
        C::Kick(_) => "kick",
        C::Touch(_) => "touch",
        C::Stats => "stats",
        C::StatsJob(_) => "stats-job",
        C::StatsTube(_) => "stats-tube",
        C::ListTubes => "list-tubes",
        C::ListTubeUsed => "list-tube-used",
        C::ListTubesWatched => "list-tubes-watched",
        C::PauseTube { .. } => "pause-tube",
        C::KickJob(_) => "kick-job",
        C::ReserveJob(_) => "reserve-job",
        C::Quit => "quit",
    }
}

/// Counters since this listener started (beanstalkd's "cumulative" figures
/// reset on restart too).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    commands: [AtomicU64; COUNTED.len()],
    pub total_jobs: AtomicU64,
    pub current_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub current_producers: AtomicU64,
    pub current_workers: AtomicU64,
    pub current_waiting: AtomicU64,
}

impl Counters {
    pub(crate) fn count_command(&self, command: &Command) {
        let name = command_name(command);
        if let Some(i) = COUNTED.iter().position(|c| *c == name) {
            self.commands[i].fetch_add(1, Ordering::Relaxed);
        }
        metrics::counter!(COMMANDS_TOTAL, "command" => name).increment(1);
    }

    fn command(&self, i: usize) -> u64 {
        self.commands[i].load(Ordering::Relaxed)
    }
}

/// Facts about the process that `stats` shows besides the counters.
#[derive(Debug)]
pub(crate) struct ServerFacts {
    pub max_job_size: usize,
    pub current_tubes: usize,
    pub uptime_secs: u64,
    pub draining: bool,
    pub instance_id: String,
    pub hostname: String,
    pub os: String,
}

/// The `stats` document. Figures delayd does not keep (`job-timeouts`,
/// `rusage-*`, `binlog-*`) are 0; docs/beanstalk.md lists them.
pub(crate) fn server_stats(
    totals: &QueueStats,
    counters: &Counters,
    facts: &ServerFacts,
) -> String {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut doc = YamlDict::new()
        .raw("current-jobs-urgent", totals.ready_urgent)
        .raw("current-jobs-ready", totals.ready)
        .raw("current-jobs-reserved", totals.leased)
        .raw("current-jobs-delayed", totals.scheduled)
        .raw("current-jobs-buried", totals.dead);
    for (i, name) in COUNTED.iter().enumerate().take(22) {
        doc = doc.raw(&format!("cmd-{name}"), counters.command(i));
    }
    doc.raw("job-timeouts", 0)
        .raw("total-jobs", load(&counters.total_jobs))
        .raw("max-job-size", facts.max_job_size)
        .raw("current-tubes", facts.current_tubes)
        .raw("current-connections", load(&counters.current_connections))
        .raw("current-producers", load(&counters.current_producers))
        .raw("current-workers", load(&counters.current_workers))
        .raw("current-waiting", load(&counters.current_waiting))
        .raw("total-connections", load(&counters.total_connections))
        .raw("pid", std::process::id())
        .quoted("version", concat!("delayd-", env!("CARGO_PKG_VERSION")))
        .raw("rusage-utime", "0.000000")
        .raw("rusage-stime", "0.000000")
        .raw("uptime", facts.uptime_secs)
        .raw("binlog-oldest-index", 0)
        .raw("binlog-current-index", 0)
        .raw("binlog-records-migrated", 0)
        .raw("binlog-records-written", 0)
        .raw("binlog-max-size", 0)
        .raw("draining", facts.draining)
        .raw("id", &facts.instance_id)
        .quoted("hostname", &facts.hostname)
        .quoted("os", &facts.os)
        .quoted("platform", std::env::consts::ARCH)
        .finish()
}

/// beanstalkd's name for a message state.
pub(crate) fn job_state(state: MessageState) -> &'static str {
    match state {
        MessageState::Scheduled => "delayed",
        MessageState::Ready => "ready",
        MessageState::Leased => "reserved",
        MessageState::Dead => "buried",
        // Never shown: the protocol finds jobs by seq, and `get_by_seq`
        // answers live messages only.
        MessageState::Acked | MessageState::Cancelled => "deleted",
    }
}

/// The `stats-job` document. `ttr_ms` is the message's lease length (its
/// queue's when the message has none).
pub(crate) fn job_stats(message: &Message, ttr_ms: u64, now_ms: u64) -> String {
    let deadline = match message.state {
        MessageState::Leased => message.lease_until,
        MessageState::Scheduled => Some(message.deliver_at),
        MessageState::Ready
        | MessageState::Dead
        | MessageState::Acked
        | MessageState::Cancelled => None,
    };
    let time_left = deadline.map_or(0, |at| whole_seconds_left(at, now_ms));
    let c = message.counters;
    YamlDict::new()
        .raw("id", message.seq)
        .quoted("tube", message.queue.as_str())
        .raw("state", job_state(message.state))
        .raw("pri", message.priority)
        .raw("age", now_ms.saturating_sub(message.enqueued_at) / 1000)
        .raw(
            "delay",
            message.deliver_at.saturating_sub(message.enqueued_at) / 1000,
        )
        .raw("ttr", ttr_ms / 1000)
        .raw("time-left", time_left)
        .raw("file", 0)
        .raw("reserves", message.attempts)
        .raw("timeouts", c.timeouts)
        .raw("releases", c.releases)
        .raw("buries", c.buries)
        .raw("kicks", c.kicks)
        .finish()
}

/// The `stats-tube` document; `info` is `None` for a tube whose queue does
/// not exist yet (only referenced by connections).
pub(crate) fn tube_stats(
    name: &str,
    info: Option<&QueueInfo>,
    entry: TubeEntry,
    now_ms: u64,
) -> String {
    let stats = info.map(|i| i.stats).unwrap_or_default();
    let paused_until = info.filter(|i| i.paused).and_then(|i| i.paused_until);
    let (pause, time_left) = match paused_until {
        Some(until) => (entry.pause_secs, whole_seconds_left(until, now_ms)),
        None => (0, 0),
    };
    YamlDict::new()
        .quoted("name", name)
        .raw("current-jobs-urgent", stats.ready_urgent)
        .raw("current-jobs-ready", stats.ready)
        .raw("current-jobs-reserved", stats.leased)
        .raw("current-jobs-delayed", stats.scheduled)
        .raw("current-jobs-buried", stats.dead)
        .raw("total-jobs", entry.total_jobs)
        .raw("current-using", entry.using)
        .raw("current-watching", entry.watching)
        .raw("current-waiting", entry.waiting)
        .raw("cmd-delete", entry.cmd_delete)
        .raw("cmd-pause-tube", entry.cmd_pause_tube)
        .raw("pause", pause)
        .raw("pause-time-left", time_left)
        .finish()
}

/// Whole seconds left until `deadline`, truncated, as beanstalkd counts
/// them. beanstalkd's clock has nanoseconds, so right after a reserve with
/// TTR 10 some time has passed and it says 9; ours has milliseconds, so in
/// the same millisecond the difference is exactly 10 000 ms. Counting the
/// current millisecond as partly gone gives beanstalkd's answer.
pub(crate) fn whole_seconds_left(deadline: u64, now_ms: u64) -> u64 {
    deadline.saturating_sub(now_ms).saturating_sub(1) / 1000
}

#[cfg(test)]
mod time_left {
    use super::whole_seconds_left;

    #[test]
    fn truncated_like_beanstalkd() {
        assert_eq!(
            whole_seconds_left(10_000, 0),
            9,
            "right after a reserve, TTR 10"
        );
        assert_eq!(whole_seconds_left(10_000, 1), 9);
        assert_eq!(whole_seconds_left(10_000, 999), 9);
        assert_eq!(whole_seconds_left(10_000, 1_000), 8, "one second later");
        assert_eq!(whole_seconds_left(10_000, 10_000), 0);
        assert_eq!(whole_seconds_left(10_000, 20_000), 0, "past the deadline");
    }
}
