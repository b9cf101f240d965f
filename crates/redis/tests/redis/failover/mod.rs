//! The failover scenario shared by `replica_failover.rs`'s tests: a primary
//! and a replica (linked through [`link::Link`]), one delayd node on the
//! primary, three phases of clients, and the comparison of the clients'
//! records with what the promoted replica holds.

mod history;
mod link;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, BrokerError, Clock, EnqueueOptions, EnqueueRequest, MessageId, Overlap, QueueName,
    ScheduleId, SystemClock,
};
use delayd_redis::{RedisBroker, ReplicaWait};
use history::{run_phase, History};
use link::Link;

use crate::support::{config, every_second, unique_prefix, RedisServer, EVERY_MS};

#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Redis's default: writes are acknowledged by the primary alone.
    Async,
    /// The primary runs with `min-replicas-to-write 1`,
    /// `min-replicas-max-lag 1`.
    MinReplicas,
    /// delayd's `wait_replicas`.
    Wait(ReplicaWait),
}

/// What the promoted replica lacks or holds again, counted from the
/// clients' records.
#[derive(Debug, Default)]
pub struct Report {
    /// Enqueues acknowledged during the stall.
    pub phase2_enqueued: usize,
    /// ... of which no ack was acknowledged.
    pub phase2_enqueued_unacked: usize,
    /// Acks acknowledged during the stall of messages enqueued before it.
    pub phase2_acks_of_phase1: usize,
    /// Calls that failed `Unavailable` during the stall.
    pub phase2_refused: u64,
    /// Acknowledged enqueues, not acked, absent after the failover.
    pub lost_enqueues: usize,
    /// Acknowledged acks whose message is present after the failover.
    pub undone_acks: usize,
    /// Fire messages delivered again after the failover although their
    /// ack had been acknowledged (a fire time enqueued twice).
    pub refired: usize,
    /// Fire times due before the end that were never delivered.
    pub missing_fires: usize,
    /// Schedule fires delivered in all.
    pub fires_delivered: usize,
    /// The first seq handed out after the failover is not above every
    /// acknowledged one.
    pub seq_reused: bool,
    /// Anomalies of anything acknowledged before the stall (replicated).
    pub phase1_anomalies: usize,
}

const SCHEDULE: &str = "tick";

fn wait_until(server: &RedisServer, needles: &[&str], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = server.cli(&["info", "replication"]);
        if needles.iter().all(|n| info.contains(n)) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {info}");
        // Polls: Redis replication state has no event this test can await.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes once on the primary and waits (Redis `WAIT`) until the replica
/// has everything up to that write: all that came before is replicated.
async fn replica_caught_up(primary: &RedisServer) {
    let client = redis::Client::open(primary.url()).expect("client");
    let options =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&options)
        .await
        .expect("connect to primary");
    let _: () = redis::cmd("SET")
        .arg("failover-test-sync")
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("SET");
    let replicas: u32 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query_async(&mut conn)
        .await
        .expect("WAIT");
    assert_eq!(replicas, 1, "the replica did not catch up");
}

pub async fn run_failover(mode: Mode) -> Report {
    let primary_options: &[&str] = match mode {
        Mode::MinReplicas => &[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "1",
        ],
        _ => &[],
    };
    let mut primary = RedisServer::start_with(primary_options);
    let link = Link::start(primary.port).await;
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link.port.to_string()]);
    wait_until(
        &replica,
        &["master_link_status:up", "master_sync_in_progress:0"],
        "replica never synced",
    );
    // Online only after its first acknowledgement (sent once a second);
    // until then `WAIT` does not count it.
    wait_until(
        &primary,
        &["connected_slaves:1", "state=online"],
        "replica not online",
    );

    let prefix = unique_prefix();
    let mut first = config(vec![primary.url()], 1, &prefix);
    if let Mode::Wait(wait) = mode {
        first.wait_replicas = Some(wait);
    }
    let node = Arc::new(RedisBroker::connect(first).await.expect("connect"));
    let q = QueueName::new("jobs").expect("queue");
    let start_at = SystemClock.now_ms() + 100;
    node.put_schedule(
        &q,
        &ScheduleId::new(SCHEDULE).expect("schedule id"),
        every_second(start_at, Overlap::Allow),
        EnqueueOptions::default(),
    )
    .await
    .expect("put_schedule");

    let history = Arc::new(Mutex::new(History::default()));
    run_phase(&node, &q, 1, true, Duration::from_secs(2), &history).await;
    replica_caught_up(&primary).await;
    link.stall();
    run_phase(&node, &q, 2, true, Duration::from_secs(3), &history).await;

    // The failover: the primary dies with the stall's writes, the replica
    // is promoted, delayd is repointed at it.
    primary.kill();
    link.cut();
    drop(node);
    let promoted = replica.cli(&["replicaof", "no", "one"]);
    assert!(promoted.contains("OK"), "REPLICAOF NO ONE: {promoted}");
    wait_until(&replica, &["role:master"], "replica not promoted");
    // Nothing replicates from the new primary (until the operator adds a
    // replica), so the new node cannot wait for one.
    let node = Arc::new(
        RedisBroker::connect(config(vec![replica.url()], 1, &prefix))
            .await
            .expect("connect to the promoted replica"),
    );
    let mut report = compare(&node, &q, &history).await;
    report.seq_reused = seq_reused(&node, &q, &history).await;

    run_phase(&node, &q, 3, false, Duration::from_secs(3), &history).await;
    let end = SystemClock.now_ms();
    count_fires(
        &mut report,
        start_at,
        end,
        &history.lock().expect("history"),
    );
    report
}

/// Looks up every acknowledged enqueue on the promoted replica.
async fn compare(node: &RedisBroker, q: &QueueName, history: &Mutex<History>) -> Report {
    let (enqueued, acked) = {
        let h = history.lock().expect("history");
        (h.enqueued.clone(), h.acked.clone())
    };
    let mut report = Report {
        phase2_refused: history.lock().expect("history").refused[2],
        ..Report::default()
    };
    for (id, &(phase, _)) in &enqueued {
        let ack = acked.get(id).copied();
        if phase == 2 {
            report.phase2_enqueued += 1;
            report.phase2_enqueued_unacked += usize::from(ack.is_none());
        } else if ack == Some(2) {
            report.phase2_acks_of_phase1 += 1;
        }
        let present = match node.get(q, id).await {
            Ok(_) => true,
            Err(BrokerError::MessageNotFound { .. }) => false,
            Err(err) => panic!("get {id} after the failover: {err:?}"),
        };
        let anomaly = match (present, ack) {
            (false, None) => {
                report.lost_enqueues += 1;
                phase
            }
            (true, Some(acked_in)) => {
                report.undone_acks += 1;
                acked_in
            }
            _ => continue,
        };
        report.phase1_anomalies += usize::from(anomaly == 1);
    }
    report
}

/// Enqueues one message after the failover: is its seq above every seq
/// acknowledged before?
async fn seq_reused(node: &RedisBroker, q: &QueueName, history: &Mutex<History>) -> bool {
    let highest = history
        .lock()
        .expect("history")
        .enqueued
        .values()
        .map(|&(_, seq)| seq)
        .max()
        .unwrap_or(0);
    let probe = EnqueueRequest {
        id: Some(MessageId::new("after-failover").expect("id")),
        payload: b"probe".to_vec(),
        ..Default::default()
    };
    let outcome = node
        .enqueue(q, vec![probe], EnqueueOptions::default())
        .await
        .expect("enqueue after the failover");
    let seq = outcome[0].as_ref().expect("probe").seq;
    seq <= highest
}

/// Fire messages are `<schedule>:<fire time>`.
fn fire_time(id: &MessageId) -> Option<u64> {
    let (schedule, t) = id.as_str().rsplit_once(':')?;
    (schedule == SCHEDULE).then(|| t.parse().ok())?
}

fn count_fires(report: &mut Report, start_at: u64, end: u64, history: &History) {
    let delivered: BTreeSet<u64> = history.delivered.iter().filter_map(fire_time).collect();
    report.fires_delivered = delivered.len();
    // Each fire time up to 1.5 s before the end was due long enough
    // ago to have been fired and delivered.
    report.missing_fires = (start_at..end.saturating_sub(1_500))
        .step_by(EVERY_MS as usize)
        .filter(|t| !delivered.contains(t))
        .count();
    for (id, acked_in, delivered_in) in &history.after_ack {
        if fire_time(id).is_some() && *delivered_in == 3 {
            report.refired += 1;
            report.phase1_anomalies += usize::from(*acked_in == 1);
        }
    }
}
