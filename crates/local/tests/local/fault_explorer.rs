//! Seeded fault explorer: per seed, a random sequence of broker calls
//! (enqueue and batches, lease, ack, ack_many, nack, extend, cancel,
//! reschedule, bury, redrive, pipeline, queue put/pause/delete, schedule
//! put/pause/delete/trigger; the injected clock advancing) against a
//! LocalBroker whose fault seam fails a write, an fsync and a read after
//! random countdowns; then a crash at a random step (dropped without
//! shutdown), `check`, a reopen without faults, and a comparison with the
//! explorer's own record of what was acknowledged: nothing acknowledged
//! lost or resurrected, nothing delivered early, no seq reused, counts
//! consistent, `check` clean (no damage is injected into files here; the
//! torn-tail cases are in torn_pages.rs).
//!
//! A call that failed (`Unavailable`) may or may not have taken effect, so
//! the messages it touched become unknown until a later acknowledged call
//! settles them. The test runs a fixed number of seeds (`CASES`, or
//! `DELAYD_EXPLORER_CASES`) from `DELAYD_EXPLORER_FIRST_SEED` (default 1),
//! so its verdict does not depend on the machine's speed; a failing case
//! names its seed, and `DELAYD_EXPLORER_SEED=<n>` replays that one seed.
//! scripts/explore.sh runs it for hours (`DELAYD_EXPLORER_SECONDS` stops a
//! long run after that many seconds; unset, as in CI, there is no time
//! budget).
//!
//! Every seed also records its history (`fault_explorer/record.rs`: each
//! call with the injected clock's times and its outcome, the in-process
//! reopens after failed writes, the crash, the reads after the reopen) and
//! runs the one history checker (crates/history) on it: no acknowledged
//! enqueue lost, nothing early, every redelivery explained, attempts and
//! deferrals counted, no ack accepted after its lease ended, each fire time
//! once, and flow control on two flow queues (`fault_explorer/flow.rs`:
//! ordered keys with a rate and a concurrency, keys with key_concurrency
//! and a key rate) that run beside the explorer's own calls on odd seeds.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::testkit::support::list_by_state;
use delayd_core::{
    Broker, BrokerError, BrokerResult, Catchup, EnqueueOptions, EnqueueRequest, LeaseId,
    ManualClock, MessageId, MessageState, MessageTemplate, Overlap, QueueConfigPatch, QueueName,
    Recurrence, RetryPolicy, Schedule, ScheduleDefinition, ScheduleId,
};
use delayd_history::{check_with, CheckConfig, History, Observe, Observed, Op, Span, Stop};
use delayd_local::{FaultPlan, LocalBroker, LocalConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const IDS: usize = 8;
const START: u64 = 1_700_000_000_000;
/// Seeds a default run explores (about 30 s in a loaded debug build).
const CASES: u64 = 25;
const LEASE_MS: u64 = 60_000;

/// What the acknowledged calls say about one message id.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Known {
    /// Exists (in some state); not deliverable before `not_before`.
    Present {
        not_before: u64,
    },
    Gone,
    /// A call on it failed: it may or may not have taken effect.
    Unknown,
}

struct Explorer {
    rng: StdRng,
    clock: ManualClock,
    broker: LocalBroker,
    known: Vec<Known>,
    leases: HashMap<usize, LeaseId>,
    /// Every seq an acknowledged call handed out, with its message id.
    seqs: HashMap<u64, MessageId>,
    log: Vec<String>,
    /// What the history checker reads (record.rs).
    history: History,
    /// The first call answered `Unavailable` since the last write that
    /// succeeded: the engine may be reopened in between (record.rs).
    reopen_from: Option<u64>,
    /// The flow queues' workload, off in the pinned seeds' replays.
    lanes: Option<flow::Lanes>,
}

fn queue() -> QueueName {
    QueueName::new("explore").expect("queue name")
}

fn id(i: usize) -> MessageId {
    MessageId::new(format!("m{i}")).expect("id")
}

fn index(id: &MessageId) -> Option<usize> {
    id.as_str().strip_prefix('m')?.parse().ok()
}

fn unavailable<T>(r: &BrokerResult<T>) -> bool {
    matches!(r, Err(BrokerError::Unavailable { .. }))
}

fn config(dir: &Path, clock: &ManualClock, faults: FaultPlan) -> LocalConfig {
    let mut config = LocalConfig::new(dir);
    config.clock = Arc::new(clock.clone());
    config.disk_reserve = 0;
    config.faults = faults;
    config
}

/// Opens, retrying while the dropped broker's engine still holds the lock.
async fn open(config: LocalConfig) -> LocalBroker {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match LocalBroker::open(config.clone()).await {
            Ok(b) => return b,
            Err(e) if Instant::now() < deadline && !e.is_corruption() => {
                // Polls: the dropped engine's release of its lock has no event this test can await.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = e;
            }
            Err(e) => panic!("reopen failed: {e}"),
        }
    }
}

impl Explorer {
    fn now(&self) -> u64 {
        delayd_core::Clock::now_ms(&self.clock)
    }

    fn mark(&mut self, i: usize, k: Known) {
        self.known[i] = k;
    }

    /// A failed call that may have changed any message.
    fn all_unknown(&mut self) {
        self.known.iter_mut().for_each(|k| *k = Known::Unknown);
        self.leases.clear();
    }

    fn delay(&mut self) -> u64 {
        match self.rng.random_range(0..3) {
            0 => 0,
            1 => self.rng.random_range(1..5_000),
            _ => self.rng.random_range(100_000..10_000_000),
        }
    }

    fn request(&mut self, i: usize) -> (EnqueueRequest, u64) {
        let delay = self.delay();
        let request = EnqueueRequest {
            id: Some(id(i)),
            schedule: Schedule::Delay(delay),
            payload: format!("payload {i} {delay}").into_bytes(),
            ..EnqueueRequest::default()
        };
        (request, self.now() + delay)
    }

    fn record_enqueued(
        &mut self,
        ids: &[usize],
        r: &BrokerResult<Vec<BrokerResult<delayd_core::EnqueueOutcome>>>,
    ) {
        match r {
            Ok(outcomes) => {
                for (i, o) in ids.iter().zip(outcomes) {
                    match o {
                        Ok(o) => {
                            self.seq_seen(o.seq, &o.id);
                            if o.created {
                                self.mark(
                                    *i,
                                    Known::Present {
                                        not_before: o.deliver_at,
                                    },
                                );
                            } else if self.known[*i] != Known::Unknown {
                                assert!(
                                    matches!(self.known[*i], Known::Present { .. }),
                                    "{i} exists again"
                                );
                            }
                        }
                        Err(BrokerError::Unavailable { .. }) => self.mark(*i, Known::Unknown),
                        Err(_) => {}
                    }
                }
            }
            Err(BrokerError::Unavailable { .. }) => {
                ids.iter().for_each(|i| self.known[*i] = Known::Unknown)
            }
            Err(_) => {}
        }
    }

    fn seq_seen(&mut self, seq: u64, id: &MessageId) {
        if let Some(other) = self.seqs.insert(seq, id.clone()) {
            // An id enqueued again after an ack gets a new seq; one seq
            // must never name two messages.
            assert_eq!(&other, id, "seq {seq} handed out twice");
        }
    }

    /// Records deliveries: none early, each seq its own.
    fn record_leased(&mut self, r: &BrokerResult<Vec<delayd_core::Delivery>>) {
        let now = self.now();
        match r {
            Ok(got) => {
                for d in got {
                    assert!(d.deliver_at <= now, "delivered early: {d:?} at {now}");
                    let Some(i) = index(&d.id) else { continue };
                    if let Known::Present { not_before } = self.known[i] {
                        assert!(
                            now >= not_before,
                            "m{i} delivered at {now}, due {not_before}"
                        );
                    }
                    self.seq_seen(d.seq, &d.id);
                    self.leases.insert(i, d.lease_id.clone());
                    self.mark(i, Known::Present { not_before: 0 });
                }
            }
            Err(BrokerError::Unavailable { .. }) => self.all_unknown(),
            Err(_) => {}
        }
    }

    /// The result of a call that keeps message `i` (nack, bury, extend,
    /// reschedule): still present, due no earlier than `not_before`.
    fn record_kept<T>(&mut self, i: usize, r: &BrokerResult<T>, not_before: u64) {
        match r {
            Ok(_) => self.mark(i, Known::Present { not_before }),
            Err(BrokerError::Unavailable { .. }) => self.mark(i, Known::Unknown),
            Err(_) => {}
        }
    }

    fn record_removed<T>(&mut self, i: usize, r: &BrokerResult<T>) {
        match r {
            Ok(_) => self.mark(i, Known::Gone),
            Err(BrokerError::Unavailable { .. }) => self.mark(i, Known::Unknown),
            Err(_) => {}
        }
    }

    fn held(&mut self) -> Option<(usize, LeaseId)> {
        let mut held: Vec<_> = self.leases.iter().map(|(i, l)| (*i, l.clone())).collect();
        held.sort_by_key(|(i, _)| *i);
        match held.is_empty() {
            true => None,
            false => Some(held.swap_remove(self.rng.random_range(0..held.len()))),
        }
    }
}

#[path = "fault_explorer/flow.rs"]
mod flow;
#[path = "fault_explorer/ops.rs"]
mod ops;
#[path = "fault_explorer/record.rs"]
mod record;

/// Which fault classes fired in a case: commit, fsync, read.
type Fired = [bool; 3];

/// Runs one seed as it ran before the flow workload existed (the pinned
/// seeds replay the interleaving they found).
async fn run_case(seed: u64) -> Fired {
    run_case_with(seed, false).await
}

/// Runs one seed: calls under faults (and, with `flow`, the flow queues'
/// calls between them), crash, check, reopen, compare, check the history.
async fn run_case_with(seed: u64, flow: bool) -> Fired {
    println!("fault explorer: seed {seed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pick = |n: u64| rng.random_bool(0.7).then(|| rng.random_range(1..n));
    let faults = FaultPlan {
        fail_commit: pick(40),
        fail_fsync: pick(40),
        fail_read: pick(60),
    };
    let clock = ManualClock::new(START);
    let broker = open(config(&data, &clock, faults.clone())).await;
    let steps = rng.random_range(5..70);
    let mut ex = Explorer {
        rng,
        clock: clock.clone(),
        broker,
        known: vec![Known::Gone; IDS],
        leases: HashMap::new(),
        seqs: HashMap::new(),
        log: vec![format!("{faults:?}")],
        history: History::new(),
        reopen_from: None,
        lanes: flow.then(|| flow::Lanes::new(seed)),
    };
    let patch = QueueConfigPatch {
        lease_ms: Some(LEASE_MS),
        max_attempts: Some(3),
        retry: Some(RetryPolicy {
            initial_ms: 100,
            max_ms: 100,
            multiplier: 1.0,
        }),
        ..QueueConfigPatch::default()
    };
    let invoke = ex.now();
    let r = ex.broker.put_queue(&queue(), patch).await;
    let at = ex.span(invoke);
    ops::record_config(&mut ex, at, &r, 3);
    if unavailable(&r) {
        ex.log.push("put_queue failed".into());
    }
    if ex.lanes.is_some() {
        flow::setup(&mut ex).await;
    }
    for _ in 0..steps {
        ops::step(&mut ex).await;
        if ex.lanes.is_some() {
            flow::step(&mut ex).await;
        }
    }
    let failed = ex
        .log
        .iter()
        .filter(|l| l.contains("Unavailable") || l.contains("error unavailable"))
        .count();
    let fired = ["commit", "fsync", "read"].map(|class| {
        ex.log
            .iter()
            .any(|l| l.contains(&format!("injected {class} failure")))
    });
    let unknown = ex.known.iter().filter(|k| **k == Known::Unknown).count();
    println!(
        "fault explorer: seed {seed}: {steps} steps, {failed} failed calls, {unknown} ids unknown"
    );
    // The crash: no shutdown.
    let Explorer {
        broker,
        known,
        seqs,
        log,
        mut history,
        reopen_from,
        ..
    } = ex;
    let now = delayd_core::Clock::now_ms(&clock);
    drop(broker);
    history.push(Op::Crash(delayd_history::Crash {
        invoke: reopen_from.unwrap_or(now),
        complete: now,
        ends_leases: true,
        maybe: false,
    }));
    verify(seed, &data, &clock, &known, &seqs, &log, &mut history).await;
    check_history(seed, history, &log);
    fired
}

/// The one history checker on the seed's history; the clock is injected,
/// so no slack.
fn check_history(seed: u64, mut history: History, log: &[String]) {
    let now = history
        .ops
        .iter()
        .map(|op| op.span().complete)
        .max()
        .unwrap_or(START);
    history.push(Op::Stop(Stop {
        at: now,
        drained: false,
    }));
    let cfg = CheckConfig {
        slack_ms: 0,
        ..CheckConfig::default()
    };
    let report = check_with(&history, &cfg);
    if !report.ok() {
        let mut lines = Vec::new();
        history.write(&mut lines).expect("history to memory");
        panic!(
            "seed {seed}: the history checker: {report}\nhistory:\n{}\ncalls: {log:#?}",
            String::from_utf8_lossy(&lines)
        );
    }
}

async fn verify(
    seed: u64,
    data: &Path,
    clock: &ManualClock,
    known: &[Known],
    seqs: &HashMap<u64, MessageId>,
    log: &[String],
    history: &mut History,
) {
    let context = || format!("seed {seed}; calls: {log:#?}");
    let broker = open(config(data, clock, FaultPlan::default())).await;
    let now = delayd_core::Clock::now_ms(clock);
    history.push(Op::Restart(Span {
        invoke: now,
        complete: now,
    }));
    observe_flow_queues(&broker, now, history).await;
    let q = queue();
    let mut present_seqs = HashSet::new();
    for (i, k) in known.iter().enumerate() {
        let got = broker.get(&q, &id(i)).await;
        history.push(observed(&q, &id(i), now, &got));
        match (k, &got) {
            (Known::Present { not_before }, Ok(m)) if m.state == MessageState::Scheduled => {
                assert!(
                    m.deliver_at >= *not_before,
                    "m{i} due early: {m:?}; {}",
                    context()
                );
            }
            (Known::Present { .. }, Err(e)) => panic!("acknowledged m{i} lost: {e}; {}", context()),
            (Known::Present { .. }, Ok(_)) => {}
            (Known::Gone, Ok(m)) => panic!("m{i} resurrected: {m:?}; {}", context()),
            _ => {}
        }
        if let Ok(m) = got {
            assert!(
                present_seqs.insert(m.seq),
                "seq {} twice; {}",
                m.seq,
                context()
            );
            if let Some(owner) = seqs.get(&m.seq) {
                assert_eq!(owner, &m.id, "seq {} reused; {}", m.seq, context());
            }
        }
    }
    counts_consistent(&broker, &context).await;
    // Fresh messages get seqs never handed out before.
    let fresh: Vec<_> = (0..3)
        .map(|n| EnqueueRequest {
            id: Some(MessageId::new(format!("fresh-{n}")).expect("id")),
            ..EnqueueRequest::default()
        })
        .collect();
    let out = broker
        .enqueue(&q, fresh, EnqueueOptions::default())
        .await
        .expect("enqueue after reopen");
    for o in out {
        let o = o.expect("fresh enqueue");
        assert!(
            !seqs.contains_key(&o.seq),
            "seq {} reused; {}",
            o.seq,
            context()
        );
        assert!(
            !present_seqs.contains(&o.seq),
            "seq {} reused; {}",
            o.seq,
            context()
        );
    }
    broker.shutdown().await.expect("shutdown");
    drop(broker);
    let scratch = tempfile::tempdir().expect("tempdir");
    let report = delayd_local::check::check(data, &scratch.path().join("copy")).expect("check");
    assert!(
        report.findings.is_empty(),
        "check: {:#?}; {}",
        report.findings,
        context()
    );
}

/// A read after the reopen, as a history line.
fn observed(
    q: &QueueName,
    id: &MessageId,
    now: u64,
    got: &BrokerResult<delayd_core::Message>,
) -> Op {
    let (state, seq) = match got {
        Ok(m) if m.state == MessageState::Dead => (Observed::Dead, Some(m.seq)),
        Ok(m) => (Observed::Live, Some(m.seq)),
        Err(BrokerError::MessageNotFound { .. } | BrokerError::QueueNotFound(_)) => {
            (Observed::Absent, None)
        }
        Err(e) => panic!("read {q}/{id} after the reopen: {e}"),
    };
    Op::Observe(Observe {
        invoke: now,
        complete: now,
        queue: q.as_str().into(),
        id: id.as_str().into(),
        state,
        seq,
    })
}

/// Reads every id of the flow queues after the reopen (only the history
/// checker judges them).
async fn observe_flow_queues(broker: &LocalBroker, now: u64, history: &mut History) {
    for (q, _) in flow::queues() {
        for i in 0..flow::IDS {
            let got = broker.get(&q, &flow::id(i)).await;
            history.push(observed(&q, &flow::id(i), now, &got));
        }
    }
}

/// The queue's stats agree with its lists by state. The driver may fire
/// a schedule or move a due message between the reads, so the reads are
/// repeated until the stats did not change around the lists.
async fn counts_consistent(broker: &LocalBroker, context: &(dyn Fn() -> String + Sync)) {
    let q = queue();
    let mut last = None;
    for _ in 0..50 {
        let Ok(before) = broker.get_queue(&q).await else {
            return;
        };
        let listed: Vec<u64> = list_by_state(broker, &q, 1_000)
            .await
            .iter()
            .map(|(_, messages)| messages.len() as u64)
            .collect();
        let after = broker.get_queue(&q).await.expect("get_queue").stats;
        let s = before.stats;
        let stats = vec![s.scheduled, s.ready, s.leased, s.dead];
        if listed == stats {
            return;
        }
        if s == after {
            last = Some((listed, stats));
        }
        // Rereads until the driver held still; see above.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (listed, stats) = last.unwrap_or_default();
    panic!(
        "stats {stats:?} vs lists {listed:?} (scheduled, ready, leased, dead); {}",
        context()
    );
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Runs `seed` as its own task, so that a failure names its seed and how
/// to replay it (the panic's own message is printed above it).
async fn run_seed(seed: u64) -> Fired {
    // The flow queues' calls share the fault countdowns and their lease
    // reads take the read faults the explorer's own reads would have
    // met; on odd seeds only, so the even ones keep exercising those.
    match tokio::spawn(run_case_with(seed, seed % 2 == 1)).await {
        Ok(fired) => fired,
        Err(e) => panic!(
            "fault explorer: seed {seed} failed ({e}); replay it with \
             DELAYD_EXPLORER_SEED={seed} cargo test -p delayd-local \
             --features fault-injection --test local fault_explorer::"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_a_fixed_number_of_seeds() {
    if let Some(seed) = env_u64("DELAYD_EXPLORER_SEED") {
        let fired = run_seed(seed).await;
        println!("fault explorer: seed {seed}: failed commit, fsync, read: {fired:?}");
        return;
    }
    let cases = env_u64("DELAYD_EXPLORER_CASES").unwrap_or(CASES);
    let first = env_u64("DELAYD_EXPLORER_FIRST_SEED").unwrap_or(1);
    // Only for scripts/explore.sh's long runs: CI sets no time budget.
    let budget = env_u64("DELAYD_EXPLORER_SECONDS").map(Duration::from_secs);
    let started = Instant::now();
    let (mut ran, mut fired) = (0, [0u64; 3]);
    while ran < cases && budget.is_none_or(|b| ran == 0 || started.elapsed() < b) {
        let case = run_seed(first + ran).await;
        for (n, hit) in fired.iter_mut().zip(case) {
            *n += u64::from(hit);
        }
        ran += 1;
    }
    let [commit, fsync, read] = fired;
    println!(
        "fault explorer: {ran} seeds from {first} in {:?}; \
         cases with a failed commit {commit}, fsync {fsync}, read {read}",
        started.elapsed()
    );
    if budget.is_none() {
        // A fixed set of seeds must exercise every fault class, or the
        // run tests less than it claims.
        assert!(
            commit > 0 && fsync > 0 && read > 0,
            "seeds {first}..{} never failed a commit ({commit}), fsync ({fsync}) or read ({read})",
            first + ran
        );
    }
}

/// Seed 45 found that a seq read (`get`) from a failed call's change,
/// still in memory in the 200 ms before the engine is reopened, is handed
/// out again after a crash in that window: allowed (the call was answered
/// `Unavailable`, nothing acknowledged), so the record counts only seqs of
/// acknowledged calls. Pinned here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_45_a_seq_only_read_before_the_heal_may_come_back() {
    run_case(45).await;
}

/// Seed 1035 found that a schedule fire between `get_queue` and the lists
/// made the counts check fail (the explorer's race, not the store's):
/// the check now rereads until the stats held still around the lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_1035_counts_are_compared_on_a_still_queue() {
    run_case(1035).await;
}

/// The verifier can fail: a message the record says was acknowledged but
/// that is not in the store is reported lost.
#[tokio::test]
#[should_panic(expected = "acknowledged m0 lost")]
async fn the_verifier_reports_a_lost_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let clock = ManualClock::new(START);
    let broker = open(config(&data, &clock, FaultPlan::default())).await;
    let mut known = vec![Known::Gone; IDS];
    known[0] = Known::Present { not_before: START };
    // Never enqueued, yet the record says it was acknowledged.
    drop(broker);
    verify(
        0,
        &data,
        &clock,
        &known,
        &HashMap::new(),
        &[],
        &mut History::new(),
    )
    .await;
}

/// Schedules and queues used by ops.rs.
fn definition(every_s: u64, paused: bool) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence: Recurrence::Every {
            every_ms: every_s * 1_000,
        },
        start_at: START,
        end_at: None,
        max_fires: None,
        message: MessageTemplate {
            payload: b"fire".to_vec(),
            ..MessageTemplate::default()
        },
        catchup: Catchup::Latest,
        catchup_window_ms: 3_600_000,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused,
    }
}

fn sid(s: usize) -> ScheduleId {
    ScheduleId::new(format!("s{s}")).expect("schedule id")
}
