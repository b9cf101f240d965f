//! Seqs increase per queue across the nodes of a deployment: two nodes
//! enqueueing alternately into one queue (one shard) get strictly
//! increasing seqs, on a single Redis and on a Cluster, and every seq finds
//! its message. Before, each node took its own block of 1000 from the
//! counter, so alternating nodes interleaved block by block.

use crate::support::{broker, shared_cluster, shared_single, unique_prefix};
use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, QueueName, Schedule};
use delayd_redis::RedisBroker;

fn one(i: usize) -> Vec<EnqueueRequest> {
    vec![EnqueueRequest {
        schedule: if i.is_multiple_of(2) {
            Schedule::Now
        } else {
            Schedule::Delay(60_000)
        },
        payload: format!("m{i}").into_bytes(),
        ..Default::default()
    }]
}

async fn alternate(a: &RedisBroker, b: &RedisBroker) {
    let q = QueueName::new("alternating").unwrap();
    let mut seqs = Vec::new();
    for i in 0..40 {
        let node = if i % 2 == 0 { a } else { b };
        let out = node
            .enqueue(&q, one(i), EnqueueOptions::default())
            .await
            .unwrap();
        let outcome = out[0].clone().unwrap();
        assert!(outcome.created);
        seqs.push(outcome.seq);
        // Either node finds it by seq.
        let found = b.get_by_seq(outcome.seq).await.unwrap().expect("by seq");
        assert_eq!(found.id, outcome.id);
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seqs not increasing: {seqs:?}"
    );
    // A second queue's seqs are distinct from the first's.
    let other = QueueName::new("other").unwrap();
    let out = a
        .enqueue(&other, one(0), EnqueueOptions::default())
        .await
        .unwrap();
    let seq = out[0].clone().unwrap().seq;
    assert!(!seqs.contains(&seq), "{seq} reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_nodes_get_increasing_seqs_on_single_redis() {
    let url = shared_single().url();
    let prefix = unique_prefix();
    let a = broker(vec![url.clone()], 1, &prefix).await;
    let b = broker(vec![url], 1, &prefix).await;
    alternate(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_nodes_get_increasing_seqs_on_a_cluster() {
    let cluster = shared_cluster();
    let prefix = unique_prefix();
    let a = broker(cluster.urls(), 1, &prefix).await;
    let b = broker(cluster.urls(), 1, &prefix).await;
    alternate(&a, &b).await;
}

/// A call whose seqs were overtaken on the shard (another node's newer
/// seqs landed first) takes fresh ones and succeeds above them. Simulated
/// by raising the shard's last seq above the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overtaken_seqs_are_taken_again() {
    let server = shared_single();
    let prefix = unique_prefix();
    let node = broker(vec![server.url()], 1, &prefix).await;
    let q = QueueName::new("overtaken").unwrap();
    let first = node
        .enqueue(&q, one(0), EnqueueOptions::default())
        .await
        .unwrap()[0]
        .clone()
        .unwrap()
        .seq;
    let last = first + 5;
    server.cli(&[
        "HSET",
        &format!("{{{prefix}:overtaken#0}}:cfg"),
        "sl",
        &last.to_string(),
    ]);
    server.cli(&["INCRBY", &format!("{{{prefix}}}:seq"), "3"]);
    let out = node
        .enqueue(&q, one(1), EnqueueOptions::default())
        .await
        .unwrap();
    let seq = out[0].clone().unwrap().seq;
    assert_eq!(seq, last + 1, "two refused rounds, then the next seq");
}
