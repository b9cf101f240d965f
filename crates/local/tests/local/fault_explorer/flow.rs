//! Flow-controlled, keyed queues in the explorer's workload: an ordered
//! queue with a rate and a concurrency, and a keyed queue with
//! key_concurrency and a key rate. Their calls (enqueue, lease, ack, nack
//! with and without `defer`, cancel) run between the explorer's own steps
//! under the same faults and crash; only the history checker judges them
//! (concurrency, rate, order and holders, deferrals, across the reopens
//! and the final crash). Their choices come from a generator of their own,
//! so the explorer's steps for a seed stay those it always made.

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, LeaseId, LeaseRequest, MessageId,
    QueueConfigPatch, QueueName, Rate, RetryPolicy, Schedule,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::record::LeaseCallKind;
use super::Explorer;

/// Message ids per flow queue (`f0`..), each always with the same key.
pub(super) const IDS: usize = 6;
const LEASE_MS: u64 = 5_000;

pub(super) struct Lanes {
    rng: StdRng,
    held: Vec<(QueueName, MessageId, LeaseId)>,
}

impl Lanes {
    pub(super) fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed ^ 0xF10E_F10E),
            held: Vec::new(),
        }
    }
}

pub(super) fn queues() -> [(QueueName, FlowConfig); 2] {
    let ordered = FlowConfig {
        rate: Some(Rate {
            limit: 4,
            period_ms: 1_000,
            burst: 2,
        }),
        concurrency: Some(2),
        ordered: true,
        ..FlowConfig::default()
    };
    let keyed = FlowConfig {
        key_rate: Some(Rate {
            limit: 2,
            period_ms: 1_000,
            burst: 1,
        }),
        concurrency: Some(3),
        key_concurrency: Some(2),
        ..FlowConfig::default()
    };
    [
        (
            QueueName::new("explore-ordered").expect("queue name"),
            ordered,
        ),
        (QueueName::new("explore-keys").expect("queue name"), keyed),
    ]
}

pub(super) fn id(i: usize) -> MessageId {
    MessageId::new(format!("f{i}")).expect("id")
}

fn key(i: usize) -> String {
    format!("k{}", i % 3)
}

fn history_rate(r: &Rate) -> delayd_history::Rate {
    delayd_history::Rate {
        limit: u64::from(r.limit),
        period_ms: r.period_ms,
        burst: Some(u64::from(r.burst)),
    }
}

/// Creates both queues (recorded as `queue_config` lines).
pub(super) async fn setup(ex: &mut Explorer) {
    let retry = RetryPolicy {
        initial_ms: 100,
        max_ms: 100,
        multiplier: 1.0,
    };
    for (queue, flow) in queues() {
        let patch = QueueConfigPatch {
            lease_ms: Some(LEASE_MS),
            max_attempts: Some(3),
            retry: Some(retry),
            flow: Some(Some(flow.clone())),
            ..QueueConfigPatch::default()
        };
        let invoke = ex.now();
        let r = ex.broker.put_queue(&queue, patch).await;
        let at = ex.span(invoke);
        ex.answered(at, super::record::outcome(&r));
        ex.history.push(delayd_history::Op::QueueConfig(
            delayd_history::QueueConfig {
                invoke: at.invoke,
                complete: at.complete,
                queue: queue.as_str().into(),
                outcome: super::record::outcome(&r),
                max_attempts: Some(3),
                retry: Some(delayd_history::Retry {
                    initial_ms: 100,
                    max_ms: 100,
                    multiplier: 1.0,
                }),
                flow: Some(delayd_history::Flow {
                    concurrency: flow.concurrency,
                    key_concurrency: flow.key_concurrency,
                    rate: flow.rate.as_ref().map(history_rate),
                    key_rate: flow.key_rate.as_ref().map(history_rate),
                    ordered: flow.ordered,
                    max_deferrals: Some(flow.max_deferrals),
                }),
            },
        ));
        ex.log
            .push(format!("put_queue {queue} flow: {}", brief(&r)));
    }
}

fn lanes(ex: &mut Explorer) -> &mut Lanes {
    ex.lanes.as_mut().expect("the flow workload is on")
}

/// One call on a flow queue, or none (about half the time).
pub(super) async fn step(ex: &mut Explorer) {
    let lanes = lanes(ex);
    let roll = lanes.rng.random_range(0..100);
    let queue = queues()[lanes.rng.random_range(0..2)].0.clone();
    match roll {
        0..=17 => enqueue(ex, queue).await,
        18..=35 => lease(ex, queue).await,
        36..=45 => ack(ex).await,
        46..=53 => nack(ex).await,
        54..=56 => cancel(ex, queue).await,
        _ => {}
    }
}

async fn enqueue(ex: &mut Explorer, queue: QueueName) {
    let lanes = lanes(ex);
    let i = lanes.rng.random_range(0..IDS);
    let delay = match lanes.rng.random_range(0..3) {
        0 => 0,
        1 => lanes.rng.random_range(1..3_000),
        _ => lanes.rng.random_range(10_000..200_000),
    };
    let request = EnqueueRequest {
        id: Some(id(i)),
        schedule: Schedule::Delay(delay),
        key: Some(FlowKey::new(key(i)).expect("key")),
        payload: b"flow".to_vec(),
        ..EnqueueRequest::default()
    };
    let invoke = ex.now();
    let r = ex
        .broker
        .enqueue(&queue, vec![request], EnqueueOptions::default())
        .await;
    let at = ex.span(invoke);
    ex.log.push(format!("{queue} enqueue f{i}: {}", brief(&r)));
    ex.rec_enqueue(&queue, at, &[(id(i), invoke + delay, Some(key(i)))], &r);
}

async fn lease(ex: &mut Explorer, queue: QueueName) {
    let max = lanes(ex).rng.random_range(1..4);
    let request = LeaseRequest {
        max,
        wait_ms: 0,
        lease_ms: None,
    };
    let invoke = ex.now();
    let r = ex.broker.lease(std::slice::from_ref(&queue), request).await;
    let at = ex.span(invoke);
    let got = r.clone().map(|v| {
        v.iter()
            .map(|d| d.id.as_str().to_string())
            .collect::<Vec<_>>()
    });
    ex.log.push(format!("{queue} lease: {}", brief(&got)));
    ex.rec_leased(&queue, at, &r);
    if let Ok(got) = r {
        for d in got {
            lanes(ex).held.push((d.queue, d.id, d.lease_id));
        }
    }
}

fn held(ex: &mut Explorer) -> Option<(QueueName, MessageId, LeaseId)> {
    let lanes = lanes(ex);
    if lanes.held.is_empty() {
        return None;
    }
    let n = lanes.rng.random_range(0..lanes.held.len());
    Some(lanes.held.swap_remove(n))
}

async fn ack(ex: &mut Explorer) {
    let Some((queue, id, lease)) = held(ex) else {
        return;
    };
    let invoke = ex.now();
    let r = ex.broker.ack(&queue, &id, &lease).await;
    let at = ex.span(invoke);
    ex.log.push(format!("{queue} ack {id}: {}", brief(&r)));
    ex.rec_lease_call(LeaseCallKind::Ack, &queue, (&id, &lease), at, &r);
}

async fn nack(ex: &mut Explorer) {
    let Some((queue, id, lease)) = held(ex) else {
        return;
    };
    let lanes = lanes(ex);
    let defer = lanes.rng.random_bool(0.5);
    let delay_ms = lanes
        .rng
        .random_bool(0.5)
        .then(|| lanes.rng.random_range(0..2_000));
    let nack = delayd_core::Nack {
        delay_ms,
        defer,
        ..delayd_core::Nack::default()
    };
    let invoke = ex.now();
    let r = ex.broker.nack(&queue, &id, &lease, nack).await;
    let at = ex.span(invoke);
    ex.log.push(format!(
        "{queue} nack {id} defer {defer} {delay_ms:?}: {}",
        brief(&r)
    ));
    ex.rec_lease_call(
        LeaseCallKind::Nack { defer, delay_ms },
        &queue,
        (&id, &lease),
        at,
        &r,
    );
}

async fn cancel(ex: &mut Explorer, queue: QueueName) {
    let i = lanes(ex).rng.random_range(0..IDS);
    let invoke = ex.now();
    let r = ex.broker.cancel(&queue, &id(i)).await;
    let at = ex.span(invoke);
    ex.log.push(format!("{queue} cancel f{i}: {}", brief(&r)));
    ex.rec_cancel(&queue, &id(i), at, &r);
}

fn brief<T: std::fmt::Debug>(r: &delayd_core::BrokerResult<T>) -> String {
    match r {
        Ok(v) => format!("{v:?}").chars().take(120).collect(),
        Err(e) => format!("error {}: {e}", e.code()),
    }
}
