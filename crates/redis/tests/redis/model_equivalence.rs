//! Random operation sequences run against RedisBroker and the reference
//! `ModelBroker` on one injected manual clock: every answer and, after
//! every step, every message of every state must be the same. Seeds are
//! fixed, so a failure reproduces. With schedules, the steps also put,
//! pause, resume, delete and trigger schedules and advance the clock past
//! fire times; Redis fires from its timers and sweep (real time), so
//! after each step the test waits until Redis has no due cursor left
//! before comparing (the model fires at its next call, at the same time).
//! Odd seeds run on a queue that retains ended messages for 30 ms, and
//! every id is also read with `get` after every step (live, retained or
//! not found). Every id's history (`events`) is compared after every step
//! too. The replace runs enqueue with `on_conflict` replace and debounce as
//! well, with content (payload, headers, priority, key) that differs from
//! request to request, so successors and replaces are compared whole.

use std::collections::HashMap;
use std::sync::Arc;

use crate::support::{shared_single, unique_prefix};
use delayd_core::testkit::support::list_by_state;
use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, BrokerResult, Catchup, Clock, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey,
    LeaseId, LeaseRequest, ManualClock, MessageId, MessageState, MessageTemplate, Nack, OnConflict,
    Overlap, QueueConfigPatch, QueueName, Rate, Recurrence, Redrive, Reschedule, RetryPolicy,
    Schedule, ScheduleDefinition, ScheduleId,
};
use delayd_redis::{RedisBroker, RedisConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const STEPS: usize = 250;
const IDS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// The fields both brokers must agree on (seq and lease ids are each
/// broker's own; seqs may differ because Redis hands out seqs to items
/// that turn out to be duplicates).
type View = (
    String,
    MessageState,
    u64,
    u32,
    u32,
    Option<u64>,
    Option<u64>,
    String,
);

fn view_of(m: &delayd_core::Message) -> View {
    (
        m.id.to_string(),
        m.state,
        m.deliver_at,
        m.priority,
        m.attempts,
        m.lease_until,
        m.died_at,
        format!(
            "{:?} key {:?} deferrals {} ended {:?} payload {:?} headers {:?} max {:?} lease {:?}",
            m.counters,
            m.key,
            m.deferrals,
            m.ended_at,
            String::from_utf8_lossy(&m.payload),
            m.headers,
            m.max_attempts,
            m.lease_ms
        ),
    )
}

async fn view(b: &dyn Broker, q: &QueueName) -> Vec<View> {
    let mut out = Vec::new();
    for (_, messages) in list_by_state(b, q, 100).await {
        out.extend(messages.iter().map(view_of));
    }
    // Each id by `get` as well: retained messages are listed nowhere. And
    // its history, event for event.
    for id in IDS {
        let id_ = MessageId::new(id).unwrap();
        match b.get(q, &id_).await {
            Ok(m) => out.push(view_of(&m)),
            Err(e) => out.push(noted(id, e.code().to_owned())),
        }
        let history = match b.events(q, &id_).await {
            Ok(h) => format!("history {h:?}"),
            Err(e) => format!("history {}", e.code()),
        };
        out.push(noted(id, history));
    }
    out
}

/// A view entry that only notes `what` about `id`.
fn noted(id: &str, what: String) -> View {
    (id.to_owned(), MessageState::Dead, 0, 0, 0, None, None, what)
}

fn code<T>(r: &BrokerResult<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

/// One broker under test with the leases it was handed, by message id.
struct Side {
    broker: Arc<dyn Broker>,
    leases: HashMap<String, LeaseId>,
}

impl Side {
    fn lease_of(&self, id: &str) -> LeaseId {
        self.leases
            .get(id)
            .cloned()
            .unwrap_or_else(|| LeaseId("never-issued".into()))
    }
}

const SCHEDULES: [&str; 2] = ["s1", "s2"];

/// A random every-second schedule starting soon.
fn definition(rng: &mut StdRng, now: u64) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence: Recurrence::Every { every_ms: 1_000 },
        start_at: now + [0, 300, 1_500][rng.random_range(0..3)],
        end_at: None,
        max_fires: [None, Some(3)][rng.random_range(0..2)],
        message: MessageTemplate {
            payload: b"tick".to_vec(),
            priority: Some(2),
            ..MessageTemplate::default()
        },
        catchup: [Catchup::Latest, Catchup::All][rng.random_range(0..2)],
        catchup_window_ms: [500, 3_600_000][rng.random_range(0..2)],
        overlap: [Overlap::Allow, Overlap::Skip][rng.random_range(0..2)],
        jitter_ms: 0,
        paused: false,
    }
}

/// A random schedule call on both sides; the answers as text.
async fn schedule_step(
    rng: &mut StdRng,
    now: u64,
    q: &QueueName,
    sides: &[Side; 2],
    answers: &mut Vec<String>,
) -> String {
    let sid = ScheduleId::new(SCHEDULES[rng.random_range(0..SCHEDULES.len())]).unwrap();
    let op = rng.random_range(0..5);
    let def = definition(rng, now);
    for s in sides {
        let b = &s.broker;
        let answer = match op {
            0 => format!(
                "{:?}",
                b.put_schedule(q, &sid, def.clone(), EnqueueOptions::default())
                    .await
                    .map_err(|e| e.code())
            ),
            1 | 2 => format!(
                "{:?}",
                b.set_schedule_paused(q, &sid, op == 1)
                    .await
                    .map_err(|e| e.code())
            ),
            3 => format!(
                "{:?}",
                b.delete_schedule(q, &sid).await.map_err(|e| e.code())
            ),
            _ => format!(
                "{:?}",
                b.trigger_schedule(q, &sid)
                    .await
                    .map(|o| (o.id, o.deliver_at, o.created))
                    .map_err(|e| e.code())
            ),
        };
        answers.push(answer);
    }
    format!("schedule op {op} {sid}")
}

/// Waits (real time) until the Redis side has fired every due cursor.
async fn settle_schedules(redis: &dyn Broker, clock: &ManualClock, q: &QueueName) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let records = redis.list_schedules(q).await.unwrap();
        // Nothing due and nothing left to write ahead: the model (which
        // steps at every call) has done the same by now.
        if records.iter().all(|r| !r.needs_step(clock.now_ms())) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "redis left due schedules: {records:?}"
        );
        // Polls: the nodes' timers firing due schedules has no event this test can await.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What the steps of a run may do besides the basic calls.
#[derive(Clone, Copy, Default)]
struct Mix {
    schedules: bool,
    flow: bool,
    /// Enqueues replace and debounce too.
    replace: bool,
}

/// A random `on_conflict` (with debounce's cap) and content tag for a
/// replace run's enqueue.
fn conflict(rng: &mut StdRng) -> (OnConflict, Option<u64>, u32) {
    let (on_conflict, max) = match rng.random_range(0..4) {
        0 => (OnConflict::Keep, None),
        1 => (OnConflict::Replace, None),
        _ => (
            OnConflict::Debounce,
            [None, Some(0), Some(4), Some(30)][rng.random_range(0..4)],
        ),
    };
    (on_conflict, max, rng.random_range(0..100))
}

/// Applies one random step to both sides and compares the answers.
async fn step(
    rng: &mut StdRng,
    clock: &ManualClock,
    q: &QueueName,
    sides: &mut [Side; 2],
    mix: Mix,
) -> String {
    let Mix {
        schedules, flow, ..
    } = mix;
    let id = IDS[rng.random_range(0..IDS.len())];
    // With flow, messages get one of two keys or none.
    let key = if flow {
        [None, Some("x"), Some("y")][rng.random_range(0..3)]
    } else {
        None
    };
    let mid = MessageId::new(id).unwrap();
    let op = rng.random_range(0..if schedules { 14 } else { 11 });
    let mut answers = Vec::new();
    let label;
    match op {
        0 | 1 => {
            let delay = [0, 3, 10, 50][rng.random_range(0..4)];
            let priority = [1, 2, 1024][rng.random_range(0..3)];
            let (on_conflict, debounce_max_ms, tag) = if mix.replace {
                conflict(rng)
            } else {
                (OnConflict::Keep, None, 0)
            };
            label = format!(
                "enqueue {id} +{delay} p{priority} key {key:?} {on_conflict} {debounce_max_ms:?} #{tag}"
            );
            for s in sides.iter() {
                let mut r = EnqueueRequest {
                    id: Some(mid.clone()),
                    key: key.map(|k| FlowKey::new(k).unwrap()),
                    schedule: Schedule::Delay(delay),
                    priority: Some(priority),
                    payload: id.as_bytes().to_vec(),
                    on_conflict,
                    debounce_max_ms,
                    ..Default::default()
                };
                if mix.replace {
                    r.payload = format!("{id}#{tag}").into_bytes();
                    r.headers.insert("tag".into(), tag.to_string());
                    r.max_attempts = [None, Some(2)][(tag % 2) as usize];
                    r.lease_ms = [None, Some(9)][(tag % 3 == 0) as usize];
                }
                let out = s
                    .broker
                    .enqueue(q, vec![r], EnqueueOptions::default())
                    .await;
                let out = out.map(|mut v| {
                    v.remove(0)
                        .map(|o| (o.id, o.deliver_at, o.created, o.replaced, o.after_lease))
                });
                answers.push(format!("{out:?}"));
            }
        }
        2 | 3 => {
            let max = rng.random_range(1..=3);
            let lease_ms = [None, Some(7)][rng.random_range(0..2)];
            label = format!("lease {max} {lease_ms:?}");
            for s in sides.iter_mut() {
                let request = LeaseRequest {
                    max,
                    wait_ms: 0,
                    lease_ms,
                };
                let got = s
                    .broker
                    .lease(std::slice::from_ref(q), request)
                    .await
                    .unwrap();
                let mut seen = Vec::new();
                for d in got {
                    seen.push((d.id.to_string(), d.attempt, d.lease_until, d.priority));
                    s.leases.insert(d.id.to_string(), d.lease_id);
                }
                answers.push(format!("{seen:?}"));
            }
        }
        4 => {
            label = format!("ack {id}");
            for s in sides.iter() {
                let r = s.broker.ack(q, &mid, &s.lease_of(id)).await;
                answers.push(code(&r).to_owned());
            }
        }
        5 => {
            let delay_ms = [None, Some(0), Some(5)][rng.random_range(0..3)];
            let defer = flow && rng.random_bool(0.5);
            label = format!("nack {id} {delay_ms:?} defer {defer}");
            for s in sides.iter() {
                let nack = Nack {
                    delay_ms,
                    defer,
                    ..Nack::default()
                };
                let r = s.broker.nack(q, &mid, &s.lease_of(id), nack).await;
                answers.push(code(&r).to_owned());
            }
        }
        6 => {
            label = format!("bury/extend {id}");
            let bury = rng.random_bool(0.5);
            for s in sides.iter() {
                let lease = s.lease_of(id);
                let r = if bury {
                    s.broker.bury(q, &mid, &lease, None).await.map(|()| 0)
                } else {
                    s.broker.extend(q, &mid, &lease, Some(15)).await
                };
                answers.push(format!("{:?}", r.map_err(|e| e.code())));
            }
        }
        7 => {
            label = format!("cancel {id}");
            for s in sides.iter() {
                answers.push(code(&s.broker.cancel(q, &mid).await).to_owned());
            }
        }
        8 => {
            let delay = [0, 4, 30][rng.random_range(0..3)];
            label = format!("reschedule {id} +{delay}");
            for s in sides.iter() {
                let change = Reschedule {
                    schedule: Some(Schedule::Delay(delay)),
                    priority: Some(2),
                };
                let r = s.broker.reschedule(q, &mid, change).await;
                answers.push(format!(
                    "{:?}",
                    r.map(|m| (m.state, m.deliver_at)).map_err(|e| e.code())
                ));
            }
        }
        9 => {
            let all = rng.random_bool(0.5);
            label = format!("redrive {}", if all { "all" } else { id });
            for s in sides.iter() {
                let which = if all {
                    Redrive::All
                } else {
                    Redrive::Ids(vec![mid.clone()])
                };
                answers.push(format!("{:?}", s.broker.redrive(q, which).await));
            }
        }
        11 | 12 => {
            label = schedule_step(rng, clock.now_ms(), q, sides, &mut answers).await;
        }
        13 => {
            let ms = [400, 1_000, 2_500][rng.random_range(0..3)];
            label = format!("advance {ms}");
            clock.advance(ms);
            answers.push(String::new());
            answers.push(String::new());
        }
        _ => {
            let ms = [1, 5, 20][rng.random_range(0..3)];
            label = format!("advance {ms}");
            clock.advance(ms);
            answers.push(String::new());
            answers.push(String::new());
        }
    }
    assert_eq!(answers[0], answers[1], "step {label}: model vs redis");
    label
}

async fn run(seed: u64, shards: u32) {
    run_steps(seed, shards, STEPS, Mix::default(), None).await;
}

/// Flow control's view on both sides: each key's counts and cooldown, and
/// the queue's key counts.
async fn flow_view(b: &dyn Broker, q: &QueueName) -> String {
    let mut out = Vec::new();
    for k in ["x", "y"] {
        out.push(format!(
            "{:?}",
            b.key_info(q, &FlowKey::new(k).unwrap()).await
        ));
    }
    let stats = b.get_queue(q).await.unwrap().stats;
    out.push(format!(
        "keys {} cooling {} ready {}",
        stats.flow_keys, stats.cooling_keys, stats.ready
    ));
    out.join("; ")
}

async fn run_steps(seed: u64, shards: u32, steps: usize, mix: Mix, flow: Option<FlowConfig>) {
    let flowing = flow.is_some();
    let mix = Mix {
        flow: flowing,
        ..mix
    };
    let schedules = mix.schedules;
    let clock = ManualClock::new(1_700_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let model: Arc<dyn Broker> = Arc::new(ModelBroker::with_clock(shared.clone()));
    let config = RedisConfig {
        urls: vec![shared_single().url()],
        shards,
        key_prefix: unique_prefix(),
        clock: shared,
        tls_ca: None,
        virtual_time: false,
        wait_replicas: None,
    };
    let redis: Arc<dyn Broker> = Arc::new(RedisBroker::connect(config).await.unwrap());
    let q = QueueName::new("eq").unwrap();
    let patch = QueueConfigPatch {
        flow: flow.map(Some),
        lease_ms: Some(20),
        max_attempts: Some(3),
        // Backoff 5 ms with no jitter (10% of 5 rounds to 0): deterministic.
        retry: Some(RetryPolicy {
            initial_ms: 5,
            max_ms: 9,
            multiplier: 1.0,
        }),
        push: None,
        retain_ms: Some(if seed % 2 == 1 { 30 } else { 0 }),
    };
    let mut sides = [
        Side {
            broker: model,
            leases: HashMap::new(),
        },
        Side {
            broker: redis,
            leases: HashMap::new(),
        },
    ];
    for s in &sides {
        s.broker.put_queue(&q, patch.clone()).await.unwrap();
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut history = Vec::new();
    let mut fires_seen = 0;
    for _ in 0..steps {
        if flowing {
            // Shown with --nocapture when a step's answers differ.
            println!("seed {seed} step {}", history.len());
        }
        history.push(step(&mut rng, &clock, &q, &mut sides, mix).await);
        if flowing {
            let (m, r) = (
                flow_view(&*sides[0].broker, &q).await,
                flow_view(&*sides[1].broker, &q).await,
            );
            assert_eq!(
                m,
                r,
                "seed {seed} flow, after {:?}",
                &history[history.len().saturating_sub(8)..]
            );
        }
        if schedules {
            settle_schedules(&*sides[1].broker, &clock, &q).await;
            let (m, r) = (
                sides[0].broker.list_schedules(&q).await.unwrap(),
                sides[1].broker.list_schedules(&q).await.unwrap(),
            );
            assert_eq!(m, r, "seed {seed} schedules, after {:?}", history.last());
        }
        let (m, r) = (
            view(&*sides[0].broker, &q).await,
            view(&*sides[1].broker, &q).await,
        );
        assert_eq!(
            m,
            r,
            "seed {seed} shards {shards}, after {:?}",
            &history[history.len().saturating_sub(8)..]
        );
        fires_seen += r
            .iter()
            .filter(|v| v.0.contains(':') && !v.0.contains("manual"))
            .count();
    }
    // The schedule steps must have made fires to compare, else they prove
    // nothing about firing.
    assert!(
        !schedules || fires_seen > 0,
        "seed {seed}: no fire happened"
    );
}

#[tokio::test]
async fn matches_the_model_one_shard() {
    for seed in 1..=3 {
        run(seed, 1).await;
    }
}

#[tokio::test]
async fn matches_the_model_three_shards() {
    for seed in 11..=13 {
        run(seed, 3).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_the_model_with_schedules() {
    for (seed, shards) in [(21, 1), (22, 3)] {
        let mix = Mix {
            schedules: true,
            ..Mix::default()
        };
        run_steps(seed, shards, 150, mix, None).await;
    }
}

/// Flow configs for the flow runs: ordered keys; slots per queue and key
/// with a key rate; a queue rate with two slots per key; ordered keys with
/// both rates and queue slots. Each with a low
/// `max_deferrals`, so deferrals also end in `dead`.
fn flow_configs() -> Vec<FlowConfig> {
    let base = FlowConfig {
        max_deferrals: 2,
        ..FlowConfig::default()
    };
    vec![
        FlowConfig {
            ordered: true,
            ..base.clone()
        },
        FlowConfig {
            concurrency: Some(2),
            key_concurrency: Some(1),
            key_rate: Some(Rate {
                limit: 1,
                period_ms: 10,
                burst: 2,
            }),
            ..base.clone()
        },
        FlowConfig {
            rate: Some(Rate {
                limit: 2,
                period_ms: 10,
                burst: 1,
            }),
            key_concurrency: Some(2),
            ..base.clone()
        },
        FlowConfig {
            ordered: true,
            concurrency: Some(3),
            rate: Some(Rate {
                limit: 3,
                period_ms: 10,
                burst: 2,
            }),
            key_rate: Some(Rate {
                limit: 1,
                period_ms: 5,
                burst: 1,
            }),
            ..base
        },
    ]
}

#[tokio::test]
async fn matches_the_model_with_flow() {
    for (i, flow) in flow_configs().into_iter().enumerate() {
        for seed in 31..=33 {
            run_steps(
                seed + 10 * i as u64,
                1,
                STEPS,
                Mix::default(),
                Some(flow.clone()),
            )
            .await;
        }
    }
}

const REPLACING: Mix = Mix {
    schedules: false,
    flow: false,
    replace: true,
};

/// Replace and debounce of scheduled, ready, leased (successors, taken at
/// ack, nack, expiry, bury, death), dead and (odd seeds) retained
/// messages, on one shard and on three.
#[tokio::test]
async fn matches_the_model_with_replace() {
    for (seed, shards) in [(51, 1), (52, 1), (53, 3), (54, 3)] {
        run_steps(seed, shards, STEPS, REPLACING, None).await;
    }
}

/// Replace and debounce with flow control: a replace or a successor that
/// brings another key moves the message's slots, holds and live set to it;
/// deferrals take successors too.
#[tokio::test]
async fn matches_the_model_with_replace_and_flow() {
    for (i, flow) in flow_configs().into_iter().enumerate() {
        for seed in 61..=62 {
            run_steps(
                seed + 10 * i as u64,
                1,
                STEPS,
                REPLACING,
                Some(flow.clone()),
            )
            .await;
        }
    }
}
