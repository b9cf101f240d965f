//! Crash test: a child process runs a LocalBroker under concurrent load and
//! reports every acknowledged operation; the parent SIGKILLs it at random
//! moments, reopens the store and checks that no acknowledged enqueue is
//! missing, no acknowledged ack or cancel is undone, nothing is duplicated,
//! and no seq is ever reused. Schedules fire in the child meanwhile (and
//! catch up after each restart): each fire time's message exists iff the
//! schedule's cursor moved past it, and none is enqueued twice.
//!
//! Each round is also recorded as a history (crates/history) and the one
//! history checker runs on all rounds at the end: the child reports no
//! times, so its calls span the whole round (from its start to the kill),
//! an ack or cancel it reports is an acknowledged end of the message and
//! one it was about to make an end that may have happened, every kill is
//! a crash and every child start a restart; the reads after each kill and
//! the schedule's listed fire messages are the observations. The checker
//! then proves again, by its own rules: nothing acknowledged lost, no
//! acknowledged end undone, no seq on two ids, each fire time once.
//!
//! The kill times come from a seeded generator; the seed is printed first
//! (`DELAYD_SEED=<n>` replays its kill times; the child's own progress
//! between them runs on real time, which is what a crash test is for).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use delayd_core::testkit::support::list_by_state;
use delayd_core::{
    Broker, BrokerError, ListQuery, ManualClock, MessageId, MessageState, QueueName,
};
use delayd_history::{
    Crash, Enqueue, Fire, History, MessageCall, Observe, Observed, Op, Outcome, Span, Stop,
};
use delayd_local::{LocalBroker, LocalConfig};
use rand::rngs::StdRng;

use crate::child::Reporting;
use rand::{Rng, SeedableRng};

const ROUNDS: usize = 20;

#[derive(Default)]
struct Acknowledged {
    /// id -> seq of every acknowledged enqueue.
    enqueued: BTreeMap<String, u64>,
    /// ids acknowledged as acked or cancelled.
    gone: BTreeSet<String>,
    /// ids about to be acked or cancelled: the ack or cancel may have
    /// happened unreported.
    maybe_gone: BTreeSet<String>,
    /// ids a lease returned (before its own fsync): unless about to be
    /// acked, they must survive the crash.
    leased: BTreeSet<String>,
    /// When the child was started, answered READY, and was killed (sent,
    /// reaped): wall-clock ms.
    spawned: u64,
    started: u64,
    killed: (u64, u64),
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// One round as history lines: the child's calls span the round.
fn record_round(history: &mut History, acked: &Acknowledged) {
    let queue = "crash";
    history.push(Op::Restart(Span {
        invoke: acked.spawned,
        complete: acked.started,
    }));
    let (invoke, complete) = (acked.spawned, acked.killed.0);
    for (id, seq) in &acked.enqueued {
        history.push(Op::Enqueue(Enqueue {
            invoke,
            complete,
            queue: queue.into(),
            id: id.clone(),
            outcome: Outcome::Ok,
            seq: Some(*seq),
            ..Enqueue::default()
        }));
    }
    let ends = acked.gone.iter().map(|id| (id, Outcome::Ok));
    let maybe = acked
        .maybe_gone
        .iter()
        .filter(|id| !acked.gone.contains(*id));
    for (id, outcome) in ends.chain(maybe.map(|id| (id, Outcome::Unknown))) {
        history.push(Op::Cancel(MessageCall {
            invoke,
            complete,
            queue: queue.into(),
            id: id.clone(),
            outcome,
        }));
    }
    history.push(Op::Crash(Crash {
        invoke: acked.killed.0,
        complete: acked.killed.1,
        ends_leases: true,
        maybe: false,
    }));
}

/// Runs one child until a random moment, SIGKILLs it, returns its report.
fn run_child(
    dir: &std::path::Path,
    prefix: &str,
    schedule_start: u64,
    kill_after: Duration,
) -> Acknowledged {
    let mut acked = Acknowledged {
        spawned: wall_ms(),
        ..Acknowledged::default()
    };
    let child = Reporting::spawn(
        Command::new(env!("CARGO_BIN_EXE_delayd-local-crashchild"))
            .arg(dir)
            .arg(prefix)
            .arg(schedule_start.to_string()),
    );
    child.wait_ready();
    acked.started = wall_ms();
    // The kill is at a moment of real time: the point of the test is to
    // catch the child's real threads wherever they are.
    std::thread::sleep(kill_after);
    let killed = wall_ms();
    let lines = child.kill();
    acked.killed = (killed, wall_ms());
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["E", id, seq] => {
                let seq = seq.parse().expect("seq");
                assert!(
                    acked.enqueued.insert(id.to_string(), seq).is_none(),
                    "enqueue of {id} reported twice"
                );
            }
            ["L", id] => {
                acked.leased.insert(id.to_string());
            }
            ["K", id] | ["X", id] => {
                acked.maybe_gone.insert(id.to_string());
            }
            ["A", id] | ["C", id] => {
                acked.gone.insert(id.to_string());
            }
            _ => {}
        }
    }
    acked
}

async fn check_store(
    dir: &std::path::Path,
    acked: &Acknowledged,
    (all_seqs, max_seq_before): (&mut HashSet<u64>, u64),
    fired: &mut Fired,
    held: &mut usize,
    history: &mut History,
) -> u64 {
    // A clock at 0: no schedule is due, so none fires while the store is
    // inspected (what is stored is what the killed child left).
    let mut config = LocalConfig::new(dir);
    config.clock = std::sync::Arc::new(ManualClock::new(0));
    let broker = LocalBroker::open(config).await.expect("reopen");
    check_schedules(&broker, fired, history).await;
    check_flow(&broker).await;
    let queue = QueueName::new("crash").unwrap();
    let mut max_seq = max_seq_before;
    for (id, seq) in &acked.enqueued {
        assert!(
            *seq > max_seq_before,
            "seq {seq} of {id} reuses an earlier round's seq"
        );
        assert!(all_seqs.insert(*seq), "seq {seq} handed out twice");
        max_seq = max_seq.max(*seq);
        let read_at = wall_ms();
        let got = broker
            .get(&queue, &MessageId::new(id.as_str()).unwrap())
            .await;
        history.push(Op::Observe(Observe {
            invoke: read_at,
            complete: wall_ms(),
            queue: "crash".into(),
            id: id.clone(),
            state: match &got {
                Ok(m) if m.state == MessageState::Dead => Observed::Dead,
                Ok(_) => Observed::Live,
                Err(_) => Observed::Absent,
            },
            seq: got.as_ref().ok().map(|m| m.seq),
        }));
        if acked.gone.contains(id) {
            assert!(
                matches!(got, Err(BrokerError::MessageNotFound { .. })),
                "acknowledged ack/cancel of {id} undone: {got:?}"
            );
        } else if !acked.maybe_gone.contains(id) {
            let leased = if acked.leased.contains(id) {
                *held += 1;
                " (leased, no ack sent)"
            } else {
                ""
            };
            let message =
                got.unwrap_or_else(|e| panic!("acknowledged enqueue {id}{leased} missing: {e}"));
            assert_eq!(message.seq, *seq, "{id} has another seq");
        } else if let Ok(message) = got {
            assert_eq!(message.seq, *seq, "{id} has another seq");
        }
    }
    // No duplicates: no id with two seqs, no seq with two ids, nothing
    // twice within one listing. (Between two listings time passes, so a
    // message may be seen as scheduled and then as ready: same id, same seq.)
    let mut seq_of = std::collections::HashMap::new();
    let mut id_of = std::collections::HashMap::new();
    for (state, messages) in list_by_state(&broker, &queue, u32::MAX).await {
        let mut in_this_list = HashSet::new();
        for m in messages {
            assert!(
                in_this_list.insert(m.id.clone()),
                "{} listed twice as {state}",
                m.id
            );
            let seq = *seq_of.entry(m.id.clone()).or_insert(m.seq);
            assert_eq!(
                seq, m.seq,
                "{} exists twice, with seqs {seq} and {}",
                m.id, m.seq
            );
            let id = id_of.entry(m.seq).or_insert(m.id.clone()).clone();
            assert_eq!(id, m.id, "seq {} used by {id} and {}", m.seq, m.id);
        }
    }
    broker.shutdown().await.expect("shutdown");
    drop(broker);
    max_seq
}

/// The ordered flow queue `crash-flow` after a kill: no slot outlived its
/// lease (nothing is leased after the restart, and the key's slot is
/// free: the keys hold no leased count), and no ordered key ever had two
/// messages out at once (at most one message of a key was delivered and
/// came back: its holder, which stays its next message across restarts).
async fn check_flow(broker: &LocalBroker) {
    let queue = QueueName::new("crash-flow").unwrap();
    let Ok(info) = broker.get_queue(&queue).await else {
        return; // the first child was killed before it made the queue
    };
    assert_eq!(info.stats.leased, 0, "a lease outlived the kill: {info:?}");
    let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (state, messages) in list_by_state(broker, &queue, u32::MAX).await {
        for m in messages {
            let key = m.key.clone().expect("every crash-flow message has a key");
            if state != MessageState::Dead && (m.attempts > 0 || m.deferrals > 0) {
                holders
                    .entry(key.to_string())
                    .or_default()
                    .push(m.id.to_string());
            }
        }
    }
    for (key, held) in &holders {
        assert!(
            held.len() <= 1,
            "ordered key {key} had several messages out at once: {held:?}"
        );
        let info = broker
            .key_info(&queue, &delayd_core::FlowKey::new(key.as_str()).unwrap())
            .await
            .expect("key_info");
        assert_eq!(
            info.leased, 0,
            "a slot of {key} outlived its lease: {info:?}"
        );
    }
}

/// (schedule id, fire time) -> seq of its message, over all rounds.
type Fired = BTreeMap<(String, u64), u64>;

/// Every fire time before a schedule's cursor has its message (`fires` of
/// them: `catchup: all` in a day's window misses none), and so does the
/// cursor exactly when the record says it was written ahead (the message
/// and the record are one atomic write), none after it does, and no fire
/// time's message was ever enqueued again (same seq in every round; nothing
/// consumes these messages).
async fn check_schedules(broker: &LocalBroker, fired: &mut Fired, history: &mut History) {
    let queue = QueueName::new("crash-sched").unwrap();
    let schedules = match broker.list_schedules(&queue).await {
        Ok(schedules) => schedules,
        Err(BrokerError::QueueNotFound(_)) => return,
        Err(e) => panic!("list_schedules: {e}"),
    };
    let query = ListQuery {
        state: MessageState::Scheduled,
        after: None,
        limit: u32::MAX,
    };
    let mut messages: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
    for m in broker.list(&queue, query).await.expect("list") {
        let (schedule, t) = m.id.as_str().split_once(':').expect("<schedule>:<t>");
        let t: u64 = t.parse().expect("fire time");
        assert_eq!(m.deliver_at, t, "{}", m.id);
        let now = wall_ms();
        history.push(Op::Fire(Fire {
            invoke: now,
            complete: now,
            queue: "crash-sched".into(),
            schedule: schedule.into(),
            fire_at: t,
            seq: m.seq,
        }));
        let times = messages.entry(schedule.to_string()).or_default();
        assert!(times.insert(t, m.seq).is_none(), "{} listed twice", m.id);
    }
    for record in &schedules {
        let id = record.id.as_str().to_string();
        let times = messages.remove(&id).unwrap_or_default();
        let cursor = record.next_fire_at.expect("an endless schedule");
        let mut expected: Vec<u64> = (1..=record.fires)
            .rev()
            .map(|k| cursor - k * 1_000)
            .collect();
        if let Some(ahead) = record.ahead {
            assert_eq!(ahead, cursor, "{id}: written ahead is the cursor");
            expected.push(ahead);
        }
        let found: Vec<u64> = times.keys().copied().collect();
        assert_eq!(
            found, expected,
            "{id}: fires {}, cursor {cursor}",
            record.fires
        );
        let before_cursor = expected.iter().rev().find(|&&t| t < cursor).copied();
        assert_eq!(record.last_fire_at, before_cursor, "{id}");
        for (t, seq) in times {
            let first = *fired.entry((id.clone(), t)).or_insert(seq);
            assert_eq!(first, seq, "{id}: fire time {t} enqueued twice");
        }
    }
    assert!(messages.is_empty(), "messages of no schedule: {messages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_operations_survive_sigkill() {
    let seed = std::env::var("DELAYD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("crash_kill9: seed {seed} (replay the kill times with DELAYD_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut all_seqs = HashSet::new();
    let mut max_seq = 0;
    let mut total_ops = 0;
    let mut fired = Fired::new();
    let mut history = History::new();
    // Messages leased and held without an ack when the child was killed.
    let mut held = 0;
    let schedule_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64;
    for round in 0..ROUNDS {
        let kill_after = Duration::from_millis(rng.random_range(20..250));
        let t0 = Instant::now();
        let prefix = format!("r{round}");
        let acked = run_child(dir.path(), &prefix, schedule_start, kill_after);
        record_round(&mut history, &acked);
        let t1 = Instant::now();
        total_ops += acked.enqueued.len() + acked.gone.len();
        max_seq = check_store(
            dir.path(),
            &acked,
            (&mut all_seqs, max_seq),
            &mut fired,
            &mut held,
            &mut history,
        )
        .await;
        eprintln!(
            "round {round}: child {:?}, check {:?}",
            t1 - t0,
            t1.elapsed()
        );
    }
    history.push(Op::Stop(Stop {
        at: wall_ms(),
        drained: false,
    }));
    let report = delayd_history::check(&history);
    assert!(report.ok(), "the history checker: {report}");
    eprintln!("history checker: {report}");
    assert!(
        total_ops > ROUNDS,
        "the child did too little work to test anything: {total_ops}"
    );
    assert!(
        held > ROUNDS,
        "too few leases were held at a kill to test anything: {held}"
    );
    assert!(
        fired.len() > ROUNDS,
        "schedules fired too little to test anything: {}",
        fired.len()
    );
    eprintln!(
        "{ROUNDS} rounds, {total_ops} acknowledged ops, {} fire times, {:?}",
        fired.len(),
        started.elapsed()
    );
}
