//! Crash-test child: runs a LocalBroker (durability `Always`) under
//! concurrent enqueue/lease/ack/cancel load and prints every acknowledged
//! operation as one flushed line on stdout, until it is killed:
//! `E <id> <seq>` (enqueued), `L <id>` (leased; printed before the ack is
//! sent, so an ack can only have happened to an id with an `L` line),
//! `X <id>` (about to cancel, for the same reason), `A <id>` (acked),
//! `C <id>` (cancelled).
//! Usage: `delayd-local-crashchild <data-dir> <id-prefix>`.

#![forbid(unsafe_code)]

use std::io::Write;
use std::sync::Arc;

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueName};
use delayd_local::{LocalBroker, LocalConfig};

const WORKERS: usize = 8;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout means the parent is gone; nothing left to report to.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

async fn worker(broker: Arc<LocalBroker>, queue: QueueName, prefix: String, worker: usize) {
    for i in 0u64.. {
        let Ok(id) = MessageId::new(format!("{prefix}-{worker}-{i}")) else {
            return;
        };
        let request = EnqueueRequest {
            id: Some(id.clone()),
            payload: format!("payload {i}").into_bytes(),
            ..EnqueueRequest::default()
        };
        let Ok(results) = broker
            .enqueue(&queue, vec![request], EnqueueOptions::default())
            .await
        else {
            continue;
        };
        if let Some(Ok(outcome)) = results.into_iter().next() {
            say(&format!("E {} {}", outcome.id, outcome.seq));
        }
        if i % 3 == 0 {
            say(&format!("X {id}"));
            if broker.cancel(&queue, &id).await.is_ok() {
                say(&format!("C {id}"));
            }
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
        for d in deliveries {
            if broker.ack(&queue, &d.id, &d.lease_id).await.is_ok() {
                say(&format!("A {}", d.id));
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(prefix)) = (args.next(), args.next()) else {
        eprintln!("usage: delayd-local-crashchild <data-dir> <id-prefix>");
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
    for task in tasks {
        let _ = task.await;
    }
}
