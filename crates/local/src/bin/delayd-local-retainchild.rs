//! Crash-test child of retention: runs a LocalBroker (durability
//! `Always`) whose queue `retain` keeps ended messages for an hour, and
//! ends messages there as fast as it can from a few workers, each message
//! enqueued with an id, leased and acked (every fourth cancelled instead).
//! It prints `A <id> <seq>` once an ack has returned and `C <id> <seq>`
//! once a cancel has: each such end is durable, so after a kill -9 the id
//! must still be retained (a duplicate for an enqueue) with that seq.
//! Usage: `delayd-local-retainchild <data-dir> <id-prefix>`.

use std::sync::Arc;

use delayd_core::{Broker, LeaseRequest, MessageId, QueueConfigPatch, QueueName};
use delayd_local::LocalBroker;

const WORKERS: usize = 4;
const RETAIN_MS: u64 = 3_600_000;

#[path = "../child_io.rs"]
mod child_io;
use child_io::say;

async fn worker(broker: Arc<LocalBroker>, queue: QueueName, prefix: String) {
    for i in 0u64.. {
        let Ok(id) = MessageId::new(format!("{prefix}-{i}")) else {
            return;
        };
        let Some(outcome) = child_io::enqueue(&broker, &queue, &id, i).await else {
            continue;
        };
        if i % 4 == 0 {
            if broker.cancel(&queue, &id).await.is_ok() {
                say(&format!("C {id} {}", outcome.seq));
            }
            continue;
        }
        // Leases what is ready (other workers' messages too): each is acked.
        let request = LeaseRequest {
            max: 4,
            wait_ms: 1_000,
            lease_ms: None,
        };
        let Ok(leased) = broker.lease(std::slice::from_ref(&queue), request).await else {
            continue;
        };
        for d in leased {
            if broker.ack(&queue, &d.id, &d.lease_id).await.is_ok() {
                say(&format!("A {} {}", d.id, d.seq));
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(prefix)) = (args.next(), args.next()) else {
        eprintln!("usage: delayd-local-retainchild <data-dir> <id-prefix>");
        std::process::exit(2);
    };
    let patch = QueueConfigPatch {
        retain_ms: Some(RETAIN_MS),
        ..QueueConfigPatch::default()
    };
    let (broker, queue) = child_io::open_with_queue(dir, "retain", patch).await;
    child_io::run_workers(WORKERS, |w| {
        worker(Arc::clone(&broker), queue.clone(), format!("{prefix}-{w}"))
    })
    .await;
}
