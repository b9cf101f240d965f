//! Crash-test child: runs a LocalBroker (durability `Always`) under
//! concurrent enqueue/lease/ack/cancel load, through every commit path
//! (single calls, `ack_many`, `pipeline`, and waiting lease calls served
//! by the hand-off), and prints every acknowledged
//! operation as one flushed line on stdout, until it is killed:
//! `E <id> <seq>` (enqueued), `L <id>` (leased: the lease call returned
//! it), `K <id>` (about to ack; printed before the ack is sent, so an ack
//! can only have happened to an id with a `K` line), `X <id>` (about to
//! cancel, for the same reason), `A <id>` (acked), `C <id>` (cancelled).
//! A lease returns before its own fsync, so an `L` line without a `K`
//! line is the crash point "leased, lease not yet durable": the message
//! must still be there after the restart.
//!
//! Beside that load, [`SCHEDULES`] schedules in the queue `crash-sched`
//! fire every second, staggered so that a fire happens every few
//! milliseconds (and, after each restart, the fire times that passed while
//! the child was down are caught up), each written ahead of its time: the
//! parent checks that each fire time's message exists iff the schedule's
//! cursor moved past it or the record says it was written ahead.
//! Beside both, `flow_worker` drives an ordered flow queue (`crash-flow`).
//! Usage: `delayd-local-crashchild <data-dir> <id-prefix> <schedule-start-ms>`.

use std::collections::VecDeque;
use std::sync::Arc;

use delayd_core::{
    Broker, Catchup, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, LeaseRequest, MessageId,
    MessageTemplate, Nack, Overlap, PipelinedCall, PipelinedResult, QueueConfigPatch, QueueName,
    Recurrence, ScheduleDefinition, ScheduleId,
};
use delayd_local::{LocalBroker, LocalConfig};

const WORKERS: usize = 8;
/// Workers that only consume, with waiting leases (the hand-off path).
const CONSUMERS: usize = 2;
/// Schedules firing every second, [`SCHEDULE_STAGGER_MS`] apart.
const SCHEDULES: u64 = 50;
const SCHEDULE_STAGGER_MS: u64 = 20;

#[path = "../child_io.rs"]
mod child_io;
use child_io::say;

async fn worker(broker: Arc<LocalBroker>, queue: QueueName, prefix: String, worker: usize) {
    for i in 0u64.. {
        let Ok(id) = MessageId::new(format!("{prefix}-{worker}-{i}")) else {
            return;
        };
        if let Some(outcome) = child_io::enqueue(&broker, &queue, &id, i).await {
            say(&format!("E {} {}", outcome.id, outcome.seq));
        }
        if i % 3 == 0 {
            say(&format!("X {id}"));
            if broker.cancel(&queue, &id).await.is_ok() {
                say(&format!("C {id}"));
            }
            continue;
        }
        if worker % 2 == 1 {
            // Enqueue-free pipeline: lease and acks in one durable step.
            pipelined_round(&broker, &queue).await;
            continue;
        }
        let request = LeaseRequest {
            max: 4,
            wait_ms: 0,
            lease_ms: Some(600_000),
        };
        let Ok(deliveries) = broker.lease(std::slice::from_ref(&queue), request).await else {
            continue;
        };
        for d in &deliveries {
            say(&format!("L {}", d.id));
        }
        if i % 5 == 1 {
            // Held, never acked: the leases a crash may catch before
            // their fsync.
            continue;
        }
        for d in deliveries {
            say(&format!("K {}", d.id));
            if broker.ack(&queue, &d.id, &d.lease_id).await.is_ok() {
                say(&format!("A {}", d.id));
            }
        }
    }
}

/// One `pipeline` call that leases, then one that acks what it got.
async fn pipelined_round(broker: &LocalBroker, queue: &QueueName) {
    let mut calls = VecDeque::from(vec![PipelinedCall::Lease {
        queues: vec![queue.clone()],
        max: 3,
        lease_ms: Some(600_000),
    }]);
    let mut leased = Vec::new();
    for result in broker.pipeline(&mut calls).await {
        if let PipelinedResult::Leased(Ok(deliveries)) = result {
            leased.extend(deliveries);
        }
    }
    for d in &leased {
        say(&format!("L {}", d.id));
    }
    for d in &leased {
        say(&format!("K {}", d.id));
    }
    let mut calls: VecDeque<_> = leased
        .iter()
        .map(|d| PipelinedCall::Ack {
            queue: queue.clone(),
            id: d.id.clone(),
            lease: d.lease_id.clone(),
        })
        .collect();
    let results = broker.pipeline(&mut calls).await;
    for (d, result) in leased.iter().zip(results) {
        if result == PipelinedResult::Done(Ok(())) {
            say(&format!("A {}", d.id));
        }
    }
}

/// A consumer that waits for messages (served by the hand-off) and acks
/// them with `ack_many`.
async fn consumer(broker: Arc<LocalBroker>, queue: QueueName) {
    loop {
        let request = LeaseRequest {
            max: 8,
            wait_ms: 500,
            lease_ms: Some(600_000),
        };
        let Ok(deliveries) = broker.lease(std::slice::from_ref(&queue), request).await else {
            continue;
        };
        for d in &deliveries {
            say(&format!("L {}", d.id));
        }
        for d in &deliveries {
            say(&format!("K {}", d.id));
        }
        let acks = deliveries
            .iter()
            .map(|d| (d.id.clone(), d.lease_id.clone()))
            .collect();
        let Ok(results) = broker.ack_many(&queue, acks).await else {
            continue;
        };
        for (d, result) in deliveries.iter().zip(results) {
            if result.is_ok() {
                say(&format!("A {}", d.id));
            }
        }
    }
}

/// Keys of the flow-controlled queue `crash-flow`.
const FLOW_KEYS: u64 = 5;

/// Load on `crash-flow`, a queue with `flow: {ordered: true}`: enqueues
/// keyed messages, leases them (long leases) and, in turn, acks one,
/// nacks one (it holds its key) and keeps one leased (its slot is taken
/// when the kill comes). The parent checks after each restart that no
/// slot outlived its lease and that no ordered key ever had two messages
/// out at once.
async fn flow_worker(broker: Arc<LocalBroker>, prefix: String) {
    let Ok(queue) = QueueName::new("crash-flow") else {
        return;
    };
    let flow = FlowConfig {
        ordered: true,
        ..FlowConfig::default()
    };
    let patch = QueueConfigPatch {
        flow: Some(Some(flow)),
        ..QueueConfigPatch::default()
    };
    if broker.put_queue(&queue, patch).await.is_err() {
        return;
    }
    for i in 0u64.. {
        let (Ok(id), Ok(key)) = (
            MessageId::new(format!("{prefix}-f{i}")),
            FlowKey::new(format!("k{}", i % FLOW_KEYS)),
        ) else {
            return;
        };
        let request = EnqueueRequest {
            id: Some(id),
            key: Some(key),
            ..EnqueueRequest::default()
        };
        let _ = broker
            .enqueue(&queue, vec![request], EnqueueOptions::default())
            .await;
        let lease = LeaseRequest {
            max: 3,
            wait_ms: 0,
            lease_ms: Some(600_000),
        };
        let Ok(deliveries) = broker.lease(std::slice::from_ref(&queue), lease).await else {
            continue;
        };
        for (n, d) in deliveries.iter().enumerate() {
            let _ = match (i + n as u64) % 3 {
                0 => broker.ack(&queue, &d.id, &d.lease_id).await,
                1 => {
                    let nack = Nack {
                        delay_ms: Some(5),
                        ..Nack::default()
                    };
                    broker.nack(&queue, &d.id, &d.lease_id, nack).await
                }
                _ => Ok(()),
            };
        }
    }
}

/// Puts the schedules (the same definitions every run: a repeated put
/// changes nothing). `catchup: all` with a day's window, so that no fire
/// time is ever missed and the fired times of each schedule are exactly
/// the `fires` times before its cursor.
async fn put_schedules(broker: &LocalBroker, start_ms: u64) {
    let Ok(queue) = QueueName::new("crash-sched") else {
        std::process::exit(1);
    };
    for i in 0..SCHEDULES {
        let Ok(id) = ScheduleId::new(format!("s{i}")) else {
            std::process::exit(1);
        };
        let definition = ScheduleDefinition {
            recurrence: Recurrence::Every { every_ms: 1_000 },
            start_at: start_ms + i * SCHEDULE_STAGGER_MS,
            end_at: None,
            max_fires: None,
            message: MessageTemplate {
                payload: format!("fire of s{i}").into_bytes(),
                ..MessageTemplate::default()
            },
            catchup: Catchup::All,
            catchup_window_ms: 86_400_000,
            overlap: Overlap::Allow,
            jitter_ms: 0,
            paused: false,
        };
        // A put killed or failed now is made again by the next run.
        let _ = broker
            .put_schedule(&queue, &id, definition, EnqueueOptions::default())
            .await;
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(prefix), Some(start)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: delayd-local-crashchild <data-dir> <id-prefix> <schedule-start-ms>");
        std::process::exit(2);
    };
    let Ok(start_ms) = start.parse::<u64>() else {
        eprintln!("schedule-start-ms must be epoch milliseconds, got {start:?}");
        std::process::exit(2);
    };
    let broker = match LocalBroker::open(LocalConfig::new(dir)).await {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    };
    let Ok(queue) = QueueName::new("crash") else {
        std::process::exit(1);
    };
    put_schedules(&broker, start_ms).await;
    say("READY");
    let tasks: Vec<_> = (0..WORKERS)
        .map(|w| {
            tokio::spawn(worker(
                Arc::clone(&broker),
                queue.clone(),
                prefix.clone(),
                w,
            ))
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| tokio::spawn(consumer(Arc::clone(&broker), queue.clone())))
        .collect();
    let flow = tokio::spawn(flow_worker(Arc::clone(&broker), prefix.clone()));
    for task in tasks.into_iter().chain(consumers).chain([flow]) {
        let _ = task.await;
    }
}
