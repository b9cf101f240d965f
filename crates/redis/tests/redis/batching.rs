//! A node's concurrent acks and waiting lease calls on one queue shard share
//! function calls: counted with `INFO commandstats` on a Redis of its own
//! (background sweeps add at most a few calls, far below the margins).

use std::sync::Arc;

use crate::support::{broker, unique_prefix, RedisServer};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, PipelinedCall, PipelinedResult,
    QueueName, Schedule,
};
use futures_util::future::join_all;

fn fcalls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn now_requests(n: usize) -> Vec<EnqueueRequest> {
    (0..n)
        .map(|i| EnqueueRequest {
            schedule: Schedule::Now,
            payload: format!("m{i}").into_bytes(),
            ..Default::default()
        })
        .collect()
}

fn request(max: u32, wait_ms: u64) -> LeaseRequest {
    LeaseRequest {
        max,
        wait_ms,
        lease_ms: Some(60_000),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acks_share_calls() {
    // Its own server: `fcalls` counts every client's function calls.
    let server = RedisServer::start();
    let node = broker(vec![server.url()], 1, &unique_prefix()).await;
    let q = QueueName::new("acks").unwrap();
    node.enqueue(&q, now_requests(200), EnqueueOptions::default())
        .await
        .unwrap();
    let leased = node
        .lease(std::slice::from_ref(&q), request(200, 0))
        .await
        .unwrap();
    assert_eq!(leased.len(), 200);

    let before = fcalls(&server);
    // All 200 join the lane before its first call: the overlap is certain,
    // not left to the scheduler (which, loaded, gave 26 calls).
    node.hold_next_ack_round(200);
    let acked = join_all(leased.iter().map(|d| node.ack(&q, &d.id, &d.lease_id))).await;
    let calls = fcalls(&server) - before;
    assert!(acked.iter().all(Result::is_ok), "{acked:?}");
    // One call, plus the few a background sweep may make meanwhile.
    assert!(
        calls <= 4,
        "200 concurrent acks took {calls} function calls"
    );
    // Each ack really happened, once: acking again is a not-found.
    let again = node.ack(&q, &leased[0].id, &leased[0].lease_id).await;
    assert!(again.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_lease_calls_share_calls_and_get_distinct_messages() {
    // Its own server: `fcalls` counts every client's function calls.
    let server = RedisServer::start();
    let node = Arc::new(broker(vec![server.url()], 1, &unique_prefix()).await);
    let q = QueueName::new("waiters").unwrap();
    node.put_queue(&q, Default::default()).await.unwrap();
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let (node, q) = (node.clone(), q.clone());
            tokio::spawn(async move { node.lease(&[q], request(1, 5_000)).await })
        })
        .collect();
    // Kept: lets the spawned lease calls reach the node and wait (no hook counts a RedisBroker's waiting calls); the assertions below hold either way.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before = fcalls(&server);
    node.enqueue(&q, now_requests(50), EnqueueOptions::default())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for w in join_all(waiters).await {
        let got = w.unwrap().unwrap();
        assert_eq!(got.len(), 1);
        ids.push(got[0].id.clone());
    }
    let calls = fcalls(&server) - before;
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50, "every waiter got its own message");
    assert!(
        calls <= 25,
        "50 waiting lease calls took {calls} function calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_batches_runs_and_stops_after_a_short_lease() {
    // Its own server: `fcalls` counts every client's function calls.
    let server = RedisServer::start();
    let node = broker(vec![server.url()], 2, &unique_prefix()).await;
    let q = QueueName::new("piped").unwrap();
    let put = |i: usize| PipelinedCall::Enqueue {
        queue: q.clone(),
        messages: vec![now_requests(1).remove(0)]
            .into_iter()
            .map(|mut r| {
                r.payload = format!("p{i}").into_bytes();
                r
            })
            .collect(),
        options: EnqueueOptions::default(),
    };
    let lease = || PipelinedCall::Lease {
        queues: vec![q.clone()],
        max: 1,
        lease_ms: Some(60_000),
    };
    // Warm up: create the queue and give both shards a seq block (20
    // delayed messages miss one of 2 shards with probability 2^-19).
    let warm = (0..20)
        .map(|_| EnqueueRequest {
            schedule: Schedule::Delay(600_000),
            ..Default::default()
        })
        .collect();
    node.enqueue(&q, warm, EnqueueOptions::default())
        .await
        .unwrap();
    let before = fcalls(&server);
    let mut calls: std::collections::VecDeque<_> = (0..64).map(put).collect();
    let results = node.pipeline(&mut calls).await;
    assert_eq!(results.len(), 64);
    assert!(calls.is_empty());
    let puts = fcalls(&server) - before;
    assert!(puts <= 4, "64 pipelined puts took {puts} function calls");

    // 70 reserves for 64 ready messages: 64 get one, the 65th gets none and
    // the pipeline stops there, giving the last 5 back unrun.
    let mut calls: std::collections::VecDeque<_> = (0..70).map(|_| lease()).collect();
    let results = node.pipeline(&mut calls).await;
    assert_eq!(results.len(), 65);
    assert_eq!(calls.len(), 5);
    let mut acks = std::collections::VecDeque::new();
    for (i, r) in results.iter().enumerate() {
        let PipelinedResult::Leased(Ok(got)) = r else {
            panic!("{r:?}");
        };
        assert_eq!(got.len(), usize::from(i < 64), "call {i}");
        for d in got {
            acks.push_back(PipelinedCall::Ack {
                queue: q.clone(),
                id: d.id.clone(),
                lease: d.lease_id.clone(),
            });
        }
    }
    // The same ack twice: the first succeeds, the second is not found, as
    // one by one.
    acks.push_back(acks[0].clone());
    let before = fcalls(&server);
    let results = node.pipeline(&mut acks).await;
    let ack_calls = fcalls(&server) - before;
    assert_eq!(results.len(), 65);
    assert!(results[..64]
        .iter()
        .all(|r| *r == PipelinedResult::Done(Ok(()))));
    assert!(
        matches!(results[64], PipelinedResult::Done(Err(_))),
        "{:?}",
        results[64]
    );
    assert!(
        ack_calls <= 4,
        "64 pipelined acks took {ack_calls} function calls"
    );
}
