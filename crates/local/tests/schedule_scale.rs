//! 100,000 schedules: restart fires the due ones (the time to the first
//! fire is printed; the benchmark judges it), and memory per
//! schedule stays small (what an armed schedule keeps in memory: its index
//! entry and one timer; the record stays on disk). A debug build, so the
//! bounds are loose; the numbers are printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, Catchup, EnqueueOptions, ManualClock, MessageTemplate, Overlap, QueueName, Recurrence,
    ScheduleDefinition, ScheduleId,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};

const T0: u64 = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;
const SCHEDULES: u64 = 100_000;
/// Start times are spread over an hour, this far apart.
const SPREAD_MS: u64 = HOUR / SCHEDULES;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn config(dir: &std::path::Path, clock: &ManualClock) -> LocalConfig {
    let mut config = LocalConfig::new(dir);
    config.clock = Arc::new(clock.clone());
    config.durability = Durability::Never;
    // Small, so the block cache does not count as schedule memory.
    config.payload_cache_bytes = 1 << 20;
    config
}

fn definition(i: u64) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence: Recurrence::Every { every_ms: HOUR },
        start_at: T0 + 1_000 + i * SPREAD_MS,
        end_at: None,
        max_fires: None,
        message: MessageTemplate {
            payload: format!("report {i}").into_bytes(),
            ..MessageTemplate::default()
        },
        catchup: Catchup::Latest,
        catchup_window_ms: HOUR,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    }
}

fn sid(i: u64) -> ScheduleId {
    ScheduleId::new(format!("report-{i:06}")).expect("schedule id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_100k_schedules_fires_soon_in_little_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(T0);
    let queue = QueueName::new("reports").expect("queue");
    let broker = LocalBroker::open(config(dir.path(), &clock))
        .await
        .expect("open");
    for i in 0..SCHEDULES {
        broker
            .put_schedule(&queue, &sid(i), definition(i), EnqueueOptions::default())
            .await
            .expect("put");
    }
    broker.shutdown().await.expect("shutdown");
    drop(broker);

    // Closed past the first 1000 start times: they are due at open.
    clock.set(T0 + 1_000 + 1_000 * SPREAD_MS);
    let rss_before = rss_bytes();
    let started = Instant::now();
    let broker = LocalBroker::open(config(dir.path(), &clock))
        .await
        .expect("reopen");
    let opened = started.elapsed();
    let first = sid(0).fire_message_id(T0 + 1_000);
    while broker.get(&queue, &first).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "never fired");
        // Polls: the driver's fire has no event this test can await.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first_fire = started.elapsed();
    let report = broker.recovery_report().clone();
    assert_eq!(report.schedules_armed, SCHEDULES);
    let growth = rss_bytes().saturating_sub(rss_before);
    let per_schedule = growth / SCHEDULES;
    eprintln!(
        "{SCHEDULES} schedules: open {opened:?}, first fire {first_fire:?}, \
         rss growth {growth} bytes = {per_schedule} bytes/schedule"
    );
    // The catch-up of the due ones follows.
    let last_due = sid(999);
    let started_catchup = Instant::now();
    loop {
        let record = broker.get_schedule(&queue, &last_due).await.expect("get");
        if record.fires == 1 {
            break;
        }
        assert!(
            started_catchup.elapsed() < Duration::from_secs(30),
            "catch-up never reached {last_due}"
        );
        // Polls: the driver's catch-up has no event this test can await.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let not_due = broker.get_schedule(&queue, &sid(1_001)).await.expect("get");
    assert_eq!(not_due.fires, 0);
    // The time to the first fire is printed, not judged: it is the
    // machine's speed (a loaded CI machine took 6 s in a debug build);
    // the restart target (1.5 s, release) is measured by
    // `scripts/schedule-bench.py memory` (docs/BENCHMARKS.md). Memory is
    // the design's (target 512 B in release; debug allocates more).
    assert!(per_schedule <= 1024, "{per_schedule} bytes per schedule");
    broker.shutdown().await.expect("shutdown");
}
