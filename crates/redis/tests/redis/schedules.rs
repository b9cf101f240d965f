//! Recurring schedules on several RedisBroker nodes sharing one Redis (and
//! one Redis Cluster): every fire time is enqueued exactly once and never
//! leased early, whichever node's timer or sweep gets there first (or
//! writes it ahead), and the others
//! keep firing after a node is shut down.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{
    broker, every_second as every, shared_cluster, shared_single, unique_prefix, EVERY_MS,
};
use delayd_core::recurring::CREATION_SLACK_MS;
use delayd_core::testkit::support::eventually;
use delayd_core::{
    Broker, Clock, EnqueueOptions, LeaseRequest, Overlap, QueueName, ScheduleDefinition,
    ScheduleId, SystemClock, Upsert,
};
use delayd_redis::RedisBroker;

fn now() -> u64 {
    SystemClock.now_ms()
}

/// Leases and acks everything of `q` for `ms`, recording each delivered
/// message id (`<schedule>:<t>`) per schedule; fails on a second delivery
/// of one id (a fire time enqueued twice) or one leased before its `t`.
async fn drain(
    node: &RedisBroker,
    q: &QueueName,
    ms: u64,
    seen: &mut BTreeMap<String, BTreeSet<u64>>,
) {
    let end = now() + ms;
    while now() < end {
        let request = LeaseRequest {
            max: 100,
            wait_ms: 100,
            lease_ms: Some(60_000),
        };
        for d in node.lease(std::slice::from_ref(q), request).await.unwrap() {
            let (sid, t) = d.id.as_str().split_once(':').unwrap();
            let t: u64 = t.parse().unwrap();
            // Written ahead (enqueued up to 30 s before `t`), never
            // leased before it.
            assert!(d.lease_until - 60_000 >= t, "{} leased early", d.id);
            assert_eq!(d.deliver_at, t);
            assert!(
                seen.entry(sid.to_owned()).or_default().insert(t),
                "fire {} enqueued twice",
                d.id
            );
            node.ack(q, &d.id, &d.lease_id).await.unwrap();
        }
    }
}

/// `nodes` brokers, `count` schedules every second for ~3 s, then the first
/// node shut down and ~3 s more: each schedule's delivered fire times are
/// exactly its `fires`, contiguous from its start, and continue past the
/// shutdown.
async fn nodes_fire_each_time_once(nodes: Vec<RedisBroker>, count: usize) {
    let q = QueueName::new("ticks").unwrap();
    let start = now() + 500;
    // When each schedule was created: between its call and its answer.
    let mut created = BTreeMap::new();
    for i in 0..count {
        let node = &nodes[i % nodes.len()];
        let id = ScheduleId::new(format!("s{i}")).unwrap();
        let def = every(start + (i as u64 % 7) * 100, Overlap::Allow);
        let called = now();
        let (upsert, _) = node
            .put_schedule(&q, &id, def, EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(upsert, Upsert::Created);
        created.insert(id.to_string(), (called, now()));
    }
    let mut seen = BTreeMap::new();
    drain(&nodes[1], &q, 3_000, &mut seen).await;
    let mut nodes = nodes.into_iter();
    let first = nodes.next().unwrap();
    first.shutdown().await.unwrap();
    drop(first);
    let shut_at = now();
    let rest: Vec<RedisBroker> = nodes.collect();
    drain(&rest[0], &q, 3_000, &mut seen).await;
    // Stop firing, then take what was enqueued before the pause.
    let mut records = Vec::new();
    for i in 0..count {
        let id = ScheduleId::new(format!("s{i}")).unwrap();
        records.push(rest[0].set_schedule_paused(&q, &id, true).await.unwrap());
    }
    drain(&rest[0], &q, 1_000, &mut seen).await;
    for record in records {
        let times = seen.get(record.id.as_str()).cloned().unwrap_or_default();
        // Contiguous from the first fire time at or after the schedule's
        // creation (fire times before it are never enqueued; on a slow
        // machine creating them all may pass `start_at`). The creation is
        // between the call and the answer, and a `start_at` at most
        // `CREATION_SLACK_MS` before it counts as the creation time.
        let start_at = record.definition.start_at;
        let (called, answered) = created[record.id.as_str()];
        let called = called.saturating_sub(CREATION_SLACK_MS);
        let first_at_or_after =
            |t: u64| start_at + t.saturating_sub(start_at).div_ceil(EVERY_MS) * EVERY_MS;
        let first = times.first().copied().unwrap_or(u64::MAX);
        assert!(
            (first_at_or_after(called)..=first_at_or_after(answered)).contains(&first),
            "schedule {}: first fire {first}, created between {called} and {answered}",
            record.id
        );
        let expected: BTreeSet<u64> = (0..record.fires).map(|k| first + k * EVERY_MS).collect();
        assert_eq!(times, expected, "schedule {}", record.id);
        assert!(
            times.last().is_some_and(|t| *t > shut_at + 1_000),
            "schedule {} stopped firing after the shutdown: {times:?}",
            record.id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_one_redis_fire_each_time_once() {
    let server = shared_single();
    let prefix = unique_prefix();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(broker(vec![server.url()], 2, &prefix).await);
    }
    nodes_fire_each_time_once(nodes, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_a_cluster_fire_each_time_once() {
    let cluster = shared_cluster();
    let prefix = unique_prefix();
    let nodes = vec![
        broker(cluster.urls(), 3, &prefix).await,
        broker(cluster.urls(), 3, &prefix).await,
    ];
    nodes_fire_each_time_once(nodes, 12).await;
}

/// `overlap: skip` is checked inside the fire function: while the first
/// fire's message is not consumed, every later fire time is skipped (the
/// record counts one fire), whichever of the two nodes fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_holds_across_nodes() {
    let server = shared_single();
    let prefix = unique_prefix();
    let a = broker(vec![server.url()], 1, &prefix).await;
    let b = broker(vec![server.url()], 1, &prefix).await;
    let q = QueueName::new("skip").unwrap();
    let id = ScheduleId::new("one-at-a-time").unwrap();
    let def_start = now() + 200;
    let def = every(def_start, Overlap::Skip);
    a.put_schedule(&q, &id, def, EnqueueOptions::default())
        .await
        .unwrap();
    // Two fire times after the first have passed (skipped): waited for,
    // not guessed with a wall-clock sleep.
    eventually(20_000, "two fire times passed", || async {
        let record = b.get_schedule(&q, &id).await.unwrap();
        record
            .next_fire_at
            .is_some_and(|t| t > def_start + 2 * EVERY_MS)
    })
    .await;
    let record = b.get_schedule(&q, &id).await.unwrap();
    assert_eq!(record.fires, 1, "{record:?}");
    assert_eq!(a.get_queue(&q).await.unwrap().stats.ready, 1);
    // Consumed: the next fire time enqueues again.
    let got = b
        .lease(
            std::slice::from_ref(&q),
            LeaseRequest {
                max: 10,
                wait_ms: 0,
                lease_ms: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    b.ack(&q, &got[0].id, &got[0].lease_id).await.unwrap();
    eventually(20_000, "a fire after the ack", || async {
        a.get_schedule(&q, &id).await.unwrap().fires == 2
    })
    .await;
}

/// The schedule calls, on two shards: create, unchanged replace, list,
/// pause/resume, trigger, delete, and delete_queue dropping the schedules.
#[tokio::test]
async fn schedule_calls_round_trip() {
    let server = shared_single();
    let node = Arc::new(broker(vec![server.url()], 2, &unique_prefix()).await);
    let q = QueueName::new("calls").unwrap();
    let id = ScheduleId::new("daily").unwrap();
    let def = every(now() + 3_600_000, Overlap::Allow);
    let missing = node.get_schedule(&q, &id).await.unwrap_err();
    assert_eq!(missing.code(), "queue_not_found");
    let no_create = EnqueueOptions { auto_create: false };
    let refused = node.put_schedule(&q, &id, def.clone(), no_create).await;
    assert_eq!(refused.unwrap_err().code(), "queue_not_found");
    let (up, created) = node
        .put_schedule(&q, &id, def.clone(), EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!((up, created.revision), (Upsert::Created, 1));
    let (up, same) = node
        .put_schedule(&q, &id, def.clone(), EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!((up, &same), (Upsert::Updated, &created));
    let other = ScheduleId::new("another").unwrap();
    node.put_schedule(&q, &other, def, EnqueueOptions::default())
        .await
        .unwrap();
    let ids: Vec<String> = node
        .list_schedules(&q)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(ids, ["another", "daily"]);
    let paused = node.set_schedule_paused(&q, &id, true).await.unwrap();
    assert_eq!((paused.revision, paused.next_fire_at), (2, None));
    let again = node.set_schedule_paused(&q, &id, true).await.unwrap();
    assert_eq!(again, paused);
    let resumed = node.set_schedule_paused(&q, &id, false).await.unwrap();
    assert_eq!(resumed.revision, 3);
    assert!(resumed.next_fire_at.is_some());
    let outcome = node.trigger_schedule(&q, &id).await.unwrap();
    assert!(outcome.created);
    assert_eq!(node.get_queue(&q).await.unwrap().stats.ready, 1);
    node.delete_schedule(&q, &id).await.unwrap();
    let gone = node.get_schedule(&q, &id).await.unwrap_err();
    assert_eq!(gone.code(), "schedule_not_found");
    assert_eq!(node.get_queue(&q).await.unwrap().stats.ready, 1);
    node.delete_queue(&q).await.unwrap();
    node.put_queue(&q, Default::default()).await.unwrap();
    assert!(node.list_schedules(&q).await.unwrap().is_empty());
}

/// The schedule metrics, recorded by the node that fires: one created fire
/// per fire time (and one lateness sample each), one skip per fire time
/// `overlap: skip` passed over. A current-thread runtime keeps the node's
/// tasks on the thread whose local recorder the test installed.
#[tokio::test(flavor = "current_thread")]
async fn fires_and_skips_are_counted() {
    use delayd_core::metric;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let server = shared_single();
    let node = broker(vec![server.url()], 1, &unique_prefix()).await;
    let q = QueueName::new("counted").unwrap();
    let (allow, skip) = (
        ScheduleId::new("allow").unwrap(),
        ScheduleId::new("skip").unwrap(),
    );
    let start = now() + 200;
    for (id, overlap) in [(&allow, Overlap::Allow), (&skip, Overlap::Skip)] {
        let def = ScheduleDefinition {
            // Fire times start, +1 s, +2 s and no more, however late the
            // node gets to them (catch-up fires or skips each).
            end_at: Some(start + 2 * EVERY_MS + EVERY_MS / 2),
            ..every(start, overlap)
        };
        node.put_schedule(&q, id, def, EnqueueOptions::default())
            .await
            .unwrap();
    }
    // Nothing consumed; both schedules finish after their third fire time
    // (waited for as an event, not a wall-clock guess).
    let finished = |id: &ScheduleId| {
        let (node, q, id) = (&node, &q, id.clone());
        async move {
            let record = node.get_schedule(q, &id).await.unwrap();
            record.next_fire_at.is_none()
        }
    };
    eventually(20_000, "both schedules finished", || async {
        finished(&allow).await && finished(&skip).await
    })
    .await;
    let allowed = node.get_schedule(&q, &allow).await.unwrap().fires;
    let skipping = node.get_schedule(&q, &skip).await.unwrap();
    assert_eq!(allowed, 3);
    assert_eq!(skipping.fires, 1);
    let (mut fires, mut skipped, mut lateness) = (0, 0, 0);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labelled = key
            .key()
            .labels()
            .any(|l| l.key() == "queue" && l.value() == "counted");
        match (key.key().name(), value) {
            (metric::SCHEDULE_FIRES_TOTAL, DebugValue::Counter(n)) if labelled => fires += n,
            (metric::SCHEDULE_SKIPPED_TOTAL, DebugValue::Counter(n)) if labelled => skipped += n,
            (metric::SCHEDULE_FIRE_LATENESS_SECONDS, DebugValue::Histogram(v)) if labelled => {
                lateness += v.len() as u64;
            }
            _ => {}
        }
    }
    assert_eq!(fires, allowed + skipping.fires);
    assert_eq!(skipped, 2);
    // Every fire enqueued at or after its time is in the histogram; one
    // written ahead is not late and is not (`skip` is never written ahead,
    // `allow` usually is: its first fire 200 ms after the put, the next
    // ones at the fire before them).
    assert!(
        (skipping.fires..=fires).contains(&lateness),
        "lateness samples {lateness}, fires {fires}"
    );
}

/// Many schedules due at one instant are fired in one go: a promote reply
/// lists 100 due schedules, and the node promotes again at once while the
/// list is full, instead of leaving each further page to a sweep 500 ms
/// later. With the node's timers and sweeps held, one round
/// (`promote_now`, what a timer or a sweep runs) fires more than a page
/// (all 350 unless a fire fails and is left to the next round); a round
/// that stopped after a page would fire 100. `overlap: skip`, so nothing
/// is written ahead: every fire happens at its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_due_schedules_fires_in_one_round() {
    const COUNT: u64 = 350;
    // Due schedules one promote reply lists.
    const PAGE: u64 = 100;
    let server = shared_single();
    let node = broker(vec![server.url()], 1, &unique_prefix()).await;
    node.hold_timers(true);
    let q = QueueName::new("burst").unwrap();
    let start = now() + 200;
    for i in 0..COUNT {
        let id = ScheduleId::new(format!("s{i}")).unwrap();
        node.put_schedule(
            &q,
            &id,
            every(start, Overlap::Skip),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    }
    // The first fire time has come. A schedule created after `start` (on
    // a slow machine) has its first fire time a period later, not due yet.
    tokio::time::sleep(Duration::from_millis(start.saturating_sub(now()) + 10)).await;
    let at = now();
    let records = node.list_schedules(&q).await.unwrap();
    let expected = records
        .iter()
        .filter(|r| r.next_fire_at.is_some_and(|t| t <= at))
        .count() as u64;
    assert!(
        expected > 100,
        "only {expected} schedules due: the burst is too small"
    );
    assert_eq!(
        node.get_queue(&q).await.unwrap().stats.ready,
        0,
        "nothing fires while the timers are held"
    );
    node.promote_now(&q).await;
    // A fire that fails (a slow call on a loaded machine) is left to the
    // next round; what one round must show is that it went on past its
    // first page.
    let after_one = node.get_queue(&q).await.unwrap().stats.ready;
    assert!(
        after_one > PAGE,
        "one round fired {after_one} of {expected}: it stopped after a page"
    );
    // More rounds until none is left due at the round's start. On a
    // loaded machine more schedules come due meanwhile (those created late
    // have their first fire time a period later): they fire too, so the
    // count is judged against the records, not against `expected`.
    let mut last_round_at = at;
    for _ in 0..10 {
        let due_left = node
            .list_schedules(&q)
            .await
            .unwrap()
            .iter()
            .filter(|r| r.next_fire_at.is_some_and(|t| t <= last_round_at))
            .count();
        if due_left == 0 {
            break;
        }
        last_round_at = now();
        node.promote_now(&q).await;
    }
    let records = node.list_schedules(&q).await.unwrap();
    let left: Vec<_> = records
        .iter()
        .filter(|r| r.next_fire_at.is_some_and(|t| t <= last_round_at))
        .map(|r| r.id.to_string())
        .collect();
    assert!(left.is_empty(), "due schedules left unfired: {left:?}");
    let fired = records.iter().filter(|r| r.fires > 0).count() as u64;
    assert!(fired >= expected, "{fired} fired, {expected} were due");
    assert_eq!(
        node.get_queue(&q).await.unwrap().stats.ready,
        fired,
        "one message per fired schedule (overlap skip)"
    );
}
