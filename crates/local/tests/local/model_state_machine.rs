//! State-machine test: random sequences of calls, including "close and
//! reopen", run against LocalBroker and the testkit's ModelBroker; after
//! every step both must show the same messages and stats.
//!
//! Time is a ManualClock that moves only by the `Advance` step, so every
//! run is deterministic. The queue's retry backoff is a constant 5 ms
//! (jitter is 10% of that, which rounds to 0). A reopen turns
//! LocalBroker's leases into expired leases (a failed attempt); the model
//! is given the same failure as a nack without delay.
//!
//! Schedules (put, pause/resume, delete, trigger) fire when `Advance`
//! moves the clock: LocalBroker from its driver a moment later, so the
//! comparison after an advance waits until the two agree (or fails after
//! a few seconds). The clock stays half a second off the whole seconds on
//! which every fire time lies, and the model is settled just before each
//! advance, so that both plan each fire at the advanced time (see the
//! testkit's `firing.rs` on how the model times fires). Leases and far
//! delays are a day long and the clock moves at most 20 hours, so no lease
//! expires while a schedule fires (whose order the two could see
//! differently).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use delayd_core::testkit::support::list_by_state;
use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, BrokerError, BrokerResult, Catchup, EnqueueOptions, EnqueueRequest, LeaseId,
    LeaseRequest, ManualClock, MessageId, MessageState, MessageTemplate, Nack, OnConflict, Overlap,
    QueueConfigPatch, QueueName, QueueStats, Recurrence, Reschedule, RetryPolicy, Schedule,
    ScheduleDefinition, ScheduleId, ScheduleRecord,
};
use delayd_local::{LocalBroker, LocalConfig};
use proptest::prelude::*;

const IDS: usize = 5;
const FAR: u64 = 86_400_000;
const SCHEDULES: usize = 3;
/// Fire times lie on whole seconds from here; the clock starts half a
/// second after it and moves by whole seconds.
const GRID: u64 = 1_700_000_000_000;
/// How long the queue keeps ended messages: some outlive a run's clock
/// moves, some do not.
const RETAIN_MS: u64 = 1_800_000;
/// Most the clock moves in one run (less than a lease or a far delay).
const MAX_ADVANCE_MS: u64 = 20 * 3_600_000;

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        id: usize,
        far: bool,
        priority: u32,
        /// keep, replace, debounce (capped at a second, or uncapped).
        on_conflict: u8,
        /// Tells one request's payload from another's.
        tag: u8,
    },
    Lease {
        max: u32,
    },
    Ack {
        id: usize,
    },
    Nack {
        id: usize,
        delay: Option<bool>,
    },
    Cancel {
        id: usize,
    },
    Reschedule {
        id: usize,
        far: bool,
        priority: Option<u32>,
    },
    Redrive,
    Reopen,
    PutSchedule(ScheduleOp),
    PauseSchedule {
        s: usize,
        paused: bool,
    },
    DeleteSchedule {
        s: usize,
    },
    TriggerSchedule {
        s: usize,
    },
    Advance {
        seconds: u64,
    },
}

#[derive(Clone, Debug)]
struct ScheduleOp {
    s: usize,
    every_s: u64,
    latest: bool,
    /// A 1.5 s catch-up window (else an hour).
    narrow: bool,
    skip: bool,
    max_two: bool,
    paused: bool,
}

fn schedule_op() -> impl Strategy<Value = ScheduleOp> {
    (
        0..SCHEDULES,
        1u64..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(s, every_s, latest, narrow, skip, max_two, paused)| ScheduleOp {
                s,
                every_s,
                latest,
                narrow,
                skip,
                max_two,
                paused,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..IDS, any::<bool>(), 0u32..3, 0u8..4, any::<u8>()).prop_map(|(id, far, priority, on_conflict, tag)| Op::Enqueue { id, far, priority, on_conflict, tag }),
        3 => (1u32..3).prop_map(|max| Op::Lease { max }),
        2 => (0..IDS).prop_map(|id| Op::Ack { id }),
        2 => (0..IDS, proptest::option::of(any::<bool>())).prop_map(|(id, delay)| Op::Nack { id, delay }),
        1 => (0..IDS).prop_map(|id| Op::Cancel { id }),
        1 => (0..IDS, any::<bool>(), proptest::option::of(0u32..3)).prop_map(|(id, far, priority)| Op::Reschedule { id, far, priority }),
        1 => Just(Op::Redrive),
        1 => Just(Op::Reopen),
        2 => schedule_op().prop_map(Op::PutSchedule),
        1 => (0..SCHEDULES, any::<bool>()).prop_map(|(s, paused)| Op::PauseSchedule { s, paused }),
        1 => (0..SCHEDULES).prop_map(|s| Op::DeleteSchedule { s }),
        1 => (0..SCHEDULES).prop_map(|s| Op::TriggerSchedule { s }),
        3 => prop_oneof![4 => 1u64..6, 1 => Just(3_700u64)].prop_map(|seconds| Op::Advance { seconds }),
    ]
}

fn sid(s: usize) -> ScheduleId {
    ScheduleId::new(format!("s{s}")).unwrap()
}

fn definition(op: &ScheduleOp) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence: Recurrence::Every {
            every_ms: op.every_s * 1_000,
        },
        start_at: GRID,
        end_at: None,
        max_fires: op.max_two.then_some(2),
        message: MessageTemplate {
            payload: format!("fire of s{}", op.s).into_bytes(),
            // Apart from every other message's: the lease order of fires
            // must not depend on seqs (the two may fire in another order).
            priority: Some(10 + op.s as u32),
            ..MessageTemplate::default()
        },
        catchup: if op.latest {
            Catchup::Latest
        } else {
            Catchup::All
        },
        catchup_window_ms: if op.narrow { 1_500 } else { 3_600_000 },
        overlap: if op.skip {
            Overlap::Skip
        } else {
            Overlap::Allow
        },
        jitter_ms: 0,
        paused: op.paused,
    }
}

/// What is compared after each step.
#[derive(Debug, PartialEq)]
struct Snapshot {
    messages: Vec<Result<MessageView, &'static str>>,
    /// Each message's history: the same events at the same times.
    histories: Vec<Result<delayd_core::History, &'static str>>,
    stats: QueueStats,
    /// (id, deliver_at, priority) of each state's messages, sorted.
    by_state: Vec<Vec<(String, u64, u32)>>,
    schedules: Vec<Result<ScheduleRecord, &'static str>>,
}

type MessageView = (
    MessageState,
    u64,
    u32,
    u32,
    Vec<u8>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
);

async fn snapshot(b: &dyn Broker) -> Snapshot {
    let q = queue();
    let mut messages = Vec::new();
    let mut histories = Vec::new();
    for i in 0..IDS {
        let view = b.get(&q, &id(i)).await.map(|m| {
            (
                m.state,
                m.deliver_at,
                m.attempts,
                m.priority,
                m.payload,
                m.lease_until,
                m.died_at,
                m.ended_at,
            )
        });
        messages.push(view.map_err(|e| e.code()));
        histories.push(b.events(&q, &id(i)).await.map_err(|e| e.code()));
    }
    let stats = b.get_queue(&q).await.expect("get_queue").stats;
    let mut by_state = Vec::new();
    for (_, messages) in list_by_state(b, &q, 1_000).await {
        let mut list: Vec<_> = messages
            .into_iter()
            .map(|m| (m.id.as_str().to_string(), m.deliver_at, m.priority))
            .collect();
        list.sort();
        by_state.push(list);
    }
    let mut schedules = Vec::new();
    for s in 0..SCHEDULES {
        schedules.push(b.get_schedule(&q, &sid(s)).await.map_err(|e| e.code()));
    }
    Snapshot {
        messages,
        histories,
        stats,
        by_state,
        schedules,
    }
}

struct Pair {
    dir: PathBuf,
    clock: ManualClock,
    local: Option<LocalBroker>,
    model: ModelBroker,
    /// Current lease per message id, per broker (lease ids differ).
    leases: HashMap<MessageId, (LeaseId, LeaseId)>,
    /// How far the clock moved so far.
    advanced_ms: u64,
}

fn id(i: usize) -> MessageId {
    MessageId::new(format!("m{i}")).unwrap()
}

fn queue() -> QueueName {
    QueueName::new("sm").unwrap()
}

fn code<T>(r: &BrokerResult<T>) -> &'static str {
    r.as_ref().err().map_or("ok", BrokerError::code)
}

async fn open_local(dir: &PathBuf, clock: &ManualClock) -> LocalBroker {
    let mut config = LocalConfig::new(dir);
    config.clock = Arc::new(clock.clone());
    LocalBroker::open(config).await.expect("open")
}

impl Pair {
    async fn new(dir: PathBuf) -> Self {
        let clock = ManualClock::new(GRID + 500);
        let local = open_local(&dir, &clock).await;
        let model = ModelBroker::with_clock(Arc::new(clock.clone()));
        let patch = QueueConfigPatch {
            max_attempts: Some(3),
            retry: Some(RetryPolicy {
                initial_ms: 5,
                max_ms: 5,
                multiplier: 1.0,
            }),
            lease_ms: Some(FAR),
            // Ended messages are kept (and go) by the same rules.
            retain_ms: Some(RETAIN_MS),
            ..QueueConfigPatch::default()
        };
        local
            .put_queue(&queue(), patch.clone())
            .await
            .expect("put_queue");
        model.put_queue(&queue(), patch).await.expect("put_queue");
        Self {
            dir,
            clock,
            local: Some(local),
            model,
            leases: HashMap::new(),
            advanced_ms: 0,
        }
    }

    async fn step(&mut self, op: &Op) {
        let q = queue();
        match op {
            Op::Enqueue {
                id: i,
                far,
                priority,
                on_conflict,
                tag,
            } => {
                let (on_conflict, debounce_max_ms) = match on_conflict {
                    0 => (OnConflict::Keep, None),
                    1 => (OnConflict::Replace, None),
                    2 => (OnConflict::Debounce, Some(1_000)),
                    _ => (OnConflict::Debounce, None),
                };
                let req = EnqueueRequest {
                    id: Some(id(*i)),
                    schedule: if *far {
                        Schedule::Delay(FAR)
                    } else {
                        Schedule::Now
                    },
                    priority: Some(*priority),
                    payload: format!("p{i}-{tag}").into_bytes(),
                    on_conflict,
                    debounce_max_ms,
                    ..EnqueueRequest::default()
                };
                let a = self
                    .local()
                    .enqueue(&q, vec![req.clone()], EnqueueOptions::default())
                    .await;
                let b = self
                    .model
                    .enqueue(&q, vec![req], EnqueueOptions::default())
                    .await;
                let created = |r: &BrokerResult<Vec<BrokerResult<delayd_core::EnqueueOutcome>>>| {
                    r.as_ref().ok().map(|v| {
                        v.iter()
                            .map(|o| {
                                o.as_ref()
                                    .map(|o| (o.created, o.replaced, o.after_lease, o.deliver_at))
                                    .map_err(|e| e.code())
                            })
                            .collect::<Vec<_>>()
                    })
                };
                assert_eq!(created(&a), created(&b), "enqueue");
            }
            Op::Lease { max } => {
                let req = LeaseRequest {
                    max: *max,
                    wait_ms: 0,
                    lease_ms: None,
                };
                let a = self
                    .local()
                    .lease(std::slice::from_ref(&q), req.clone())
                    .await
                    .expect("lease");
                let b = self
                    .model
                    .lease(std::slice::from_ref(&q), req)
                    .await
                    .expect("lease");
                let view = |v: &Vec<delayd_core::Delivery>| {
                    v.iter()
                        .map(|d| (d.id.clone(), d.attempt, d.payload.clone(), d.lease_until))
                        .collect::<Vec<_>>()
                };
                assert_eq!(view(&a), view(&b), "lease");
                for (x, y) in a.into_iter().zip(b) {
                    self.leases.insert(x.id.clone(), (x.lease_id, y.lease_id));
                }
            }
            Op::Ack { id: i } => {
                let (la, lb) = self.lease_of(*i);
                let a = self.local().ack(&q, &id(*i), &la).await;
                let b = self.model.ack(&q, &id(*i), &lb).await;
                assert_eq!(code(&a), code(&b), "ack");
            }
            Op::Nack { id: i, delay } => {
                let (la, lb) = self.lease_of(*i);
                let nack = Nack {
                    delay_ms: delay.map(|far| if far { FAR } else { 0 }),
                    ..Nack::default()
                };
                let a = self.local().nack(&q, &id(*i), &la, nack.clone()).await;
                let b = self.model.nack(&q, &id(*i), &lb, nack).await;
                assert_eq!(code(&a), code(&b), "nack");
            }
            Op::Cancel { id: i } => {
                let a = self.local().cancel(&q, &id(*i)).await;
                let b = self.model.cancel(&q, &id(*i)).await;
                assert_eq!(code(&a), code(&b), "cancel");
            }
            Op::Reschedule {
                id: i,
                far,
                priority,
            } => {
                let change = Reschedule {
                    schedule: Some(if *far {
                        Schedule::Delay(FAR)
                    } else {
                        Schedule::Now
                    }),
                    priority: *priority,
                };
                let a = self.local().reschedule(&q, &id(*i), change.clone()).await;
                let b = self.model.reschedule(&q, &id(*i), change).await;
                assert_eq!(code(&a), code(&b), "reschedule");
            }
            Op::Redrive => {
                let a = self.local().redrive(&q, delayd_core::Redrive::All).await;
                let b = self.model.redrive(&q, delayd_core::Redrive::All).await;
                assert_eq!(a.ok(), b.ok(), "redrive");
            }
            Op::Reopen => self.reopen().await,
            op => self.schedule_step(op).await,
        }
    }

    async fn schedule_step(&mut self, op: &Op) {
        let q = queue();
        match op {
            Op::PutSchedule(put) => {
                let (def, options) = (definition(put), EnqueueOptions::default());
                let id = sid(put.s);
                let a = self
                    .local()
                    .put_schedule(&q, &id, def.clone(), options)
                    .await;
                let b = self.model.put_schedule(&q, &id, def, options).await;
                assert_eq!(
                    a.map_err(|e| e.code()),
                    b.map_err(|e| e.code()),
                    "put_schedule"
                );
            }
            Op::PauseSchedule { s, paused } => {
                let a = self
                    .local()
                    .set_schedule_paused(&q, &sid(*s), *paused)
                    .await;
                let b = self.model.set_schedule_paused(&q, &sid(*s), *paused).await;
                assert_eq!(a.map_err(|e| e.code()), b.map_err(|e| e.code()), "pause");
            }
            Op::DeleteSchedule { s } => {
                let a = self.local().delete_schedule(&q, &sid(*s)).await;
                let b = self.model.delete_schedule(&q, &sid(*s)).await;
                assert_eq!(code(&a), code(&b), "delete_schedule");
            }
            Op::TriggerSchedule { s } => {
                let a = self.local().trigger_schedule(&q, &sid(*s)).await;
                let b = self.model.trigger_schedule(&q, &sid(*s)).await;
                let view = |r: BrokerResult<delayd_core::EnqueueOutcome>| {
                    r.map(|o| (o.id, o.deliver_at, o.created))
                        .map_err(|e| e.code())
                };
                assert_eq!(view(a), view(b), "trigger_schedule");
            }
            Op::Advance { seconds } => {
                let ms = seconds * 1_000;
                if self.advanced_ms + ms > MAX_ADVANCE_MS {
                    return;
                }
                self.advanced_ms += ms;
                // Settled just before the jump: the model sees all of it
                // as a jump and plans its fires at the new time.
                self.model.get_queue(&q).await.expect("get_queue");
                self.clock.advance(ms);
            }
            _ => unreachable!("not a schedule step: {op:?}"),
        }
    }

    fn local(&self) -> &LocalBroker {
        self.local.as_ref().expect("broker is open")
    }

    fn lease_of(&self, i: usize) -> (LeaseId, LeaseId) {
        self.leases
            .get(&id(i))
            .cloned()
            .unwrap_or_else(|| (LeaseId("none".into()), LeaseId("none".into())))
    }

    async fn reopen(&mut self) {
        self.local().shutdown().await.expect("shutdown");
        // Closing the store (dropping the broker) releases its lock file.
        drop(self.local.take());
        self.local = Some(open_local(&self.dir, &self.clock).await);
        // LocalBroker expired every lease at open; the model too.
        for (mid, (_, lb)) in self.leases.drain() {
            let _ = self.model.expire_at_restart(&queue(), &mid, &lb);
        }
    }

    /// The two agree; LocalBroker fires and makes messages ready from its
    /// driver, shortly after the clock moved, so it is given a few seconds.
    async fn compare(&self) {
        let started = std::time::Instant::now();
        loop {
            let a = snapshot(self.local()).await;
            let b = snapshot(&self.model).await;
            if a == b {
                return;
            }
            if started.elapsed() > std::time::Duration::from_secs(3) {
                assert_eq!(a, b, "local (left) and model (right) disagree");
            }
            // Polls: the driver catching up has no event this test can await.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn local_broker_matches_the_model(ops in proptest::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut pair = Pair::new(dir.path().to_path_buf()).await;
            for op in &ops {
                pair.step(op).await;
                pair.compare().await;
            }
            pair.local().shutdown().await.expect("shutdown");
        });
    }
}
