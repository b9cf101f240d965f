//! Crash-test child of replace's successors: runs a LocalBroker
//! (durability `Always`) and, from a few workers, enqueues a message with
//! an id (payload `v0`), leases it, and replaces it while it is leased
//! (payload `v1`): the replace is answered `after_lease`, the request is
//! the message's successor. It prints `S <id>` once such a replace has
//! returned, and acks every other message after it (`A <id>` once the ack
//! returned). After a kill -9 each reported successor must be delivered
//! with `v1`: as a new message after a reported ack, else after the lease
//! the restart ended.
//! Usage: `delayd-local-successorchild <data-dir> <id-prefix>`.

use std::sync::Arc;

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, MessageId, OnConflict, QueueConfigPatch, QueueName,
    RetryPolicy,
};
use delayd_local::LocalBroker;

const WORKERS: usize = 4;

#[path = "../child_io.rs"]
mod child_io;
use child_io::say;

async fn worker(broker: Arc<LocalBroker>, queue: QueueName, prefix: String) {
    for i in 0u64.. {
        let Ok(id) = MessageId::new(format!("{prefix}-{i}")) else {
            return;
        };
        if child_io::enqueue(&broker, &queue, &id, 0).await.is_none() {
            continue;
        }
        // This message, leased for longer than the test runs.
        let Ok(d) = broker.lease_message(&queue, &id, Some(3_600_000)).await else {
            continue;
        };
        let replace = EnqueueRequest {
            id: Some(id.clone()),
            payload: b"v1".to_vec(),
            on_conflict: OnConflict::Replace,
            ..EnqueueRequest::default()
        };
        let answered = broker
            .enqueue(&queue, vec![replace], EnqueueOptions::default())
            .await;
        match answered.ok().and_then(|mut r| r.pop()).and_then(Result::ok) {
            Some(out) if out.after_lease => say(&format!("S {id}")),
            _ => continue,
        }
        if i % 2 == 0 && broker.ack(&queue, &d.id, &d.lease_id).await.is_ok() {
            say(&format!("A {id}"));
        }
    }
}

/// A short backoff, so the messages the restart's expired leases retry
/// come back at once.
fn fast_retry() -> QueueConfigPatch {
    QueueConfigPatch {
        retry: Some(RetryPolicy {
            initial_ms: 1,
            max_ms: 1,
            multiplier: 1.0,
        }),
        ..QueueConfigPatch::default()
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(prefix)) = (args.next(), args.next()) else {
        eprintln!("usage: delayd-local-successorchild <data-dir> <id-prefix>");
        std::process::exit(2);
    };
    let (broker, queue) = child_io::open_with_queue(dir, "successors", fast_retry()).await;
    child_io::run_workers(WORKERS, |w| {
        worker(Arc::clone(&broker), queue.clone(), format!("{prefix}-{w}"))
    })
    .await;
}
