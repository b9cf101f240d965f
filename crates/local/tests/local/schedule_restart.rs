//! Schedules across restarts: records and cursors come back from the store
//! exactly, and fire times that passed while the broker was closed are
//! caught up at open by the `catchup` rules (`all`, `latest`, inside and
//! outside the window). Also: a fire the store refuses (below the disk
//! reserve) changes nothing and is carried out once writes are taken
//! again. The clock is a ManualClock moved while the broker is closed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, BrokerError, Catchup, EnqueueOptions, ManualClock, MessageState, MessageTemplate,
    Overlap, QueueName, Recurrence, ScheduleDefinition, ScheduleId, ScheduleRecord,
};
use delayd_local::{LocalBroker, LocalConfig};

const T0: u64 = 1_700_000_000_000;
const MINUTE: u64 = 60_000;

fn queue() -> QueueName {
    QueueName::new("reports").expect("queue")
}

fn sid(name: &str) -> ScheduleId {
    ScheduleId::new(name).expect("schedule id")
}

fn every_minute(catchup: Catchup, window_ms: u64) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence: Recurrence::Every { every_ms: MINUTE },
        start_at: T0 + MINUTE,
        end_at: None,
        max_fires: None,
        message: MessageTemplate {
            payload: b"tick".to_vec(),
            ..MessageTemplate::default()
        },
        catchup,
        catchup_window_ms: window_ms,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    }
}

async fn open(dir: &Path, clock: &ManualClock, reserve: u64) -> LocalBroker {
    let mut config = LocalConfig::new(dir);
    config.clock = Arc::new(clock.clone());
    config.disk_reserve = reserve;
    LocalBroker::open(config).await.expect("open")
}

async fn close(broker: LocalBroker) {
    broker.shutdown().await.expect("shutdown");
    drop(broker);
}

/// Waits (real time; the driver looks at the clock every 100 ms) until
/// the schedule's record satisfies `done`.
async fn wait_for(
    broker: &LocalBroker,
    id: &ScheduleId,
    done: impl Fn(&ScheduleRecord) -> bool,
) -> ScheduleRecord {
    let started = Instant::now();
    loop {
        let record = broker.get_schedule(&queue(), id).await.expect("get");
        if done(&record) {
            return record;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "schedule {id} never got there: {record:?}"
        );
        // Polls: the driver's fire has no event this test can await.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fire times whose messages exist, in order.
async fn fired(broker: &LocalBroker, id: &ScheduleId, candidates: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    for &t in candidates {
        match broker.get(&queue(), &id.fire_message_id(t)).await {
            Ok(message) => {
                assert_eq!(message.deliver_at, t);
                assert_eq!(message.state, MessageState::Ready);
                out.push(t);
            }
            Err(BrokerError::MessageNotFound { .. }) => {}
            Err(e) => panic!("get: {e}"),
        }
    }
    out
}

fn minutes(from: u64, to: u64) -> Vec<u64> {
    (from..=to).map(|m| T0 + m * MINUTE).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_and_cursors_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(T0);
    let broker = open(dir.path(), &clock, 0).await;
    let options = EnqueueOptions::default();
    let q = queue();
    for name in ["a", "b", "paused", "once"] {
        let mut definition = every_minute(Catchup::All, 3_600_000);
        definition.paused = name == "paused";
        definition.max_fires = (name == "once").then_some(1);
        broker
            .put_schedule(&q, &sid(name), definition, options)
            .await
            .expect("put");
    }
    clock.set(T0 + MINUTE);
    wait_for(&broker, &sid("once"), |r| r.next_fire_at.is_none()).await;
    wait_for(&broker, &sid("a"), |r| r.fires == 1).await;
    wait_for(&broker, &sid("b"), |r| r.fires == 1).await;
    let before = broker.list_schedules(&q).await.expect("list");
    close(broker).await;

    let broker = open(dir.path(), &clock, 0).await;
    assert_eq!(broker.recovery_report().schedules_armed, 2, "a and b");
    let after = broker.list_schedules(&q).await.expect("list");
    assert_eq!(after, before);
    let ids: Vec<_> = after.iter().map(|r| r.id.as_str().to_string()).collect();
    assert_eq!(ids, ["a", "b", "once", "paused"], "by id");
    // The armed ones keep firing; the finished and paused ones do not.
    clock.set(T0 + 2 * MINUTE);
    wait_for(&broker, &sid("a"), |r| r.fires == 2).await;
    wait_for(&broker, &sid("b"), |r| r.fires == 2).await;
    let once = broker.get_schedule(&q, &sid("once")).await.expect("get");
    assert_eq!((once.fires, once.next_fire_at), (1, None));
    assert_eq!(
        fired(&broker, &sid("paused"), &minutes(1, 2)).await,
        Vec::<u64>::new()
    );
    close(broker).await;

    // `delayd check` reads and decodes the schedule records too.
    let scratch = tempfile::tempdir().expect("tempdir");
    let report =
        delayd_local::check::check(dir.path(), &scratch.path().join("copy")).expect("check");
    assert!(!report.damaged(), "{:#?}", report.findings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_queue_deletes_its_schedules_for_good() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(T0);
    let broker = open(dir.path(), &clock, 0).await;
    let definition = every_minute(Catchup::All, 3_600_000);
    let options = EnqueueOptions::default();
    broker
        .put_schedule(&queue(), &sid("s"), definition.clone(), options)
        .await
        .expect("put");
    broker.delete_queue(&queue()).await.expect("delete queue");
    assert!(matches!(
        broker.list_schedules(&queue()).await,
        Err(BrokerError::QueueNotFound(_))
    ));
    close(broker).await;

    clock.set(T0 + 2 * MINUTE);
    let broker = open(dir.path(), &clock, 0).await;
    assert_eq!(broker.recovery_report().schedules_armed, 0);
    broker
        .put_queue(&queue(), Default::default())
        .await
        .expect("queue again");
    let listed = broker.list_schedules(&queue()).await.expect("list");
    assert!(listed.is_empty(), "{listed:?}");
    // A schedule of the new queue starts afresh: revision 1, no fires.
    let (_, record) = broker
        .put_schedule(&queue(), &sid("s"), definition, options)
        .await
        .expect("put");
    assert_eq!((record.revision, record.fires), (1, 0));
    assert_eq!(record.next_fire_at, Some(T0 + 2 * MINUTE));
    close(broker).await;
}

/// Puts one schedule, fires it once at minute 1, closes, moves the clock
/// ten minutes on (fire times of minutes 2..=11 pass while closed),
/// reopens, and waits for the catch-up; returns the broker and record.
async fn downtime(dir: &Path, catchup: Catchup, window_ms: u64) -> (LocalBroker, ScheduleRecord) {
    let clock = ManualClock::new(T0);
    let broker = open(dir, &clock, 0).await;
    let id = sid("s");
    let definition = every_minute(catchup, window_ms);
    broker
        .put_schedule(&queue(), &id, definition, EnqueueOptions::default())
        .await
        .expect("put");
    clock.set(T0 + MINUTE);
    wait_for(&broker, &id, |r| r.fires == 1).await;
    close(broker).await;
    clock.set(T0 + 11 * MINUTE);
    let broker = open(dir, &clock, 0).await;
    let record = wait_for(&broker, &id, |r| r.next_fire_at == Some(T0 + 12 * MINUTE)).await;
    (broker, record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catchup_all_inside_the_window_fires_each_missed_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, record) = downtime(dir.path(), Catchup::All, 3_600_000).await;
    assert_eq!(record.fires, 11);
    assert_eq!(record.last_fire_at, Some(T0 + 11 * MINUTE));
    let fired = fired(&broker, &record.id, &minutes(0, 12)).await;
    assert_eq!(fired, minutes(1, 11));
    close(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catchup_all_outside_the_window_drops_the_old_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A 5-minute window at minute 11: minutes 6..=11 are inside.
    let (broker, record) = downtime(dir.path(), Catchup::All, 5 * MINUTE).await;
    assert_eq!(record.fires, 1 + 6);
    let fired = fired(&broker, &record.id, &minutes(0, 12)).await;
    let mut expected = vec![T0 + MINUTE];
    expected.extend(minutes(6, 11));
    assert_eq!(fired, expected);
    close(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catchup_latest_fires_only_the_newest_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, record) = downtime(dir.path(), Catchup::Latest, 3_600_000).await;
    assert_eq!(record.fires, 2);
    let fired = fired(&broker, &record.id, &minutes(0, 12)).await;
    assert_eq!(fired, [T0 + MINUTE, T0 + 11 * MINUTE]);
    close(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catchup_latest_outside_the_window_fires_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(T0);
    let broker = open(dir.path(), &clock, 0).await;
    let id = sid("s");
    let definition = every_minute(Catchup::Latest, MINUTE / 2);
    broker
        .put_schedule(&queue(), &id, definition, EnqueueOptions::default())
        .await
        .expect("put");
    close(broker).await;
    // Minute 11 plus 40 s: the newest fire time is 40 s old, the window
    // 30 s; every passed time is missed.
    clock.set(T0 + 11 * MINUTE + 40_000);
    let broker = open(dir.path(), &clock, 0).await;
    let record = wait_for(&broker, &id, |r| r.next_fire_at == Some(T0 + 12 * MINUTE)).await;
    assert_eq!((record.fires, record.last_fire_at), (0, None));
    assert_eq!(
        fired(&broker, &id, &minutes(0, 11)).await,
        Vec::<u64>::new()
    );
    // The next fire, 20 s out, is written ahead (not yet a fire).
    let record = wait_for(&broker, &id, |r| r.ahead.is_some()).await;
    assert_eq!(record.ahead, Some(T0 + 12 * MINUTE));
    let next = broker
        .get(&queue(), &id.fire_message_id(T0 + 12 * MINUTE))
        .await;
    assert_eq!(next.expect("written ahead").state, MessageState::Scheduled);
    close(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fire_waits_and_catches_up_when_writes_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(T0);
    let broker = open(dir.path(), &clock, 0).await;
    let id = sid("s");
    broker
        .put_schedule(
            &queue(),
            &id,
            every_minute(Catchup::All, 3_600_000),
            EnqueueOptions::default(),
        )
        .await
        .expect("put");
    close(broker).await;

    // No filesystem has u64::MAX bytes free: every fire is refused.
    clock.set(T0 + 2 * MINUTE);
    let broker = open(dir.path(), &clock, u64::MAX).await;
    // Long enough for the first fire and a retry (1 s apart).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let record = broker.get_schedule(&queue(), &id).await.expect("get");
    assert_eq!((record.fires, record.next_fire_at), (0, Some(T0 + MINUTE)));
    assert_eq!(fired(&broker, &id, &minutes(1, 3)).await, Vec::<u64>::new());
    close(broker).await;

    clock.set(T0 + 3 * MINUTE);
    let broker = open(dir.path(), &clock, 0).await;
    let record = wait_for(&broker, &id, |r| r.fires == 3).await;
    assert_eq!(record.next_fire_at, Some(T0 + 4 * MINUTE));
    assert_eq!(fired(&broker, &id, &minutes(1, 4)).await, minutes(1, 3));
    close(broker).await;
}
