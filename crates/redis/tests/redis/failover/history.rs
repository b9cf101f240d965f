//! The clients' own records (as Jepsen's checkers use them): which calls
//! were acknowledged, in which phase, and which deliveries came after an
//! acknowledged ack. Producers and consumers run against one node for a
//! phase and record into a shared `History`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, BrokerError, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueName,
    Schedule,
};
use delayd_redis::RedisBroker;

/// Phase 1: link up. Phase 2: link stalled. Phase 3: after the failover.
pub type Phase = u8;

#[derive(Default)]
pub struct History {
    /// Acknowledged enqueues: phase and seq.
    pub enqueued: HashMap<MessageId, (Phase, u64)>,
    /// Acknowledged acks, by the phase of the (first) acknowledged one.
    pub acked: HashMap<MessageId, Phase>,
    /// Deliveries of an id whose ack had been acknowledged before:
    /// (id, phase of that ack, phase of this delivery).
    pub after_ack: Vec<(MessageId, Phase, Phase)>,
    /// Every delivered message id (schedule fires among them).
    pub delivered: BTreeSet<MessageId>,
    /// Calls that failed `Unavailable`, by phase.
    pub refused: [u64; 4],
}

const PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;
const BATCH: usize = 5;

/// Runs producers (when `produce`) and consumers against `node` for
/// `length`, all recording into `history`.
pub async fn run_phase(
    node: &Arc<RedisBroker>,
    q: &QueueName,
    phase: Phase,
    produce: bool,
    length: Duration,
    history: &Arc<Mutex<History>>,
) {
    let deadline = Instant::now() + length;
    let mut tasks = Vec::new();
    for p in 0..if produce { PRODUCERS } else { 0 } {
        let (node, q, history) = (node.clone(), q.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            produce_until(&node, &q, phase, p, deadline, &history).await;
        }));
    }
    for _ in 0..CONSUMERS {
        let (node, q, history) = (node.clone(), q.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            consume_until(&node, &q, phase, deadline, &history).await;
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
}

fn refused(history: &Mutex<History>, phase: Phase, err: BrokerError) {
    assert!(
        matches!(err, BrokerError::Unavailable { .. }),
        "unexpected error in phase {phase}: {err:?}"
    );
    history.lock().expect("history").refused[usize::from(phase)] += 1;
}

/// A third due at once (consumed and acked within the phase), a third
/// due in the next phase (acked there: a phase-2 ack of a phase-1 message),
/// a third never due within the test (only its enqueue is checked).
fn schedule_of(i: usize) -> Schedule {
    match i % 3 {
        0 => Schedule::Now,
        1 => Schedule::Delay(2_500),
        _ => Schedule::Delay(600_000),
    }
}

async fn produce_until(
    node: &RedisBroker,
    q: &QueueName,
    phase: Phase,
    producer: usize,
    deadline: Instant,
    history: &Mutex<History>,
) {
    let mut next = 0;
    while Instant::now() < deadline {
        let batch: Vec<EnqueueRequest> = (next..next + BATCH)
            .map(|i| EnqueueRequest {
                id: Some(MessageId::new(format!("p{phase}-{producer}-{i}")).expect("id")),
                schedule: schedule_of(i),
                payload: b"job".to_vec(),
                ..Default::default()
            })
            .collect();
        next += BATCH;
        match node.enqueue(q, batch, EnqueueOptions::default()).await {
            Ok(outcomes) => {
                let mut history = history.lock().expect("history");
                for outcome in outcomes {
                    let outcome = outcome.expect("enqueue item");
                    history.enqueued.insert(outcome.id, (phase, outcome.seq));
                }
            }
            Err(err) => refused(history, phase, err),
        }
        // Paces the producer (real processes on real time); no verdict depends on it.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn consume_until(
    node: &RedisBroker,
    q: &QueueName,
    phase: Phase,
    deadline: Instant,
    history: &Mutex<History>,
) {
    let request = LeaseRequest {
        max: 10,
        wait_ms: 100,
        // Long: within a test no lease expires, so every second delivery
        // comes from the failover.
        lease_ms: Some(30_000),
    };
    while Instant::now() < deadline {
        let deliveries = match node.lease(std::slice::from_ref(q), request.clone()).await {
            Ok(deliveries) => deliveries,
            Err(err) => {
                refused(history, phase, err);
                // Backs off after a refused lease during the failover; no verdict depends on it.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        for d in deliveries {
            {
                let mut history = history.lock().expect("history");
                if let Some(&acked_in) = history.acked.get(&d.id) {
                    history.after_ack.push((d.id.clone(), acked_in, phase));
                }
                history.delivered.insert(d.id.clone());
            }
            match node.ack(q, &d.id, &d.lease_id).await {
                Ok(()) => {
                    let mut history = history.lock().expect("history");
                    history.acked.entry(d.id).or_insert(phase);
                }
                Err(err) => refused(history, phase, err),
            }
        }
    }
}
