//! Crash test of replace's successors (issue 39, "kill -9 tests"): a
//! child process replaces messages while they are leased and reports
//! each replace answered `after_lease` (and each ack after it); the
//! parent SIGKILLs it at random moments, reopens the store, and leases
//! what is there: every reported successor is delivered with its content
//! (`v1`), never the replaced one, whether its message was acked before
//! the kill (the successor is a new message) or was still leased (the
//! restart ended the lease and the successor took effect).
//!
//! The kill times come from a seeded generator; the seed is printed first
//! (`DELAYD_SEED=<n>` replays them).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::child::Reporting;

use delayd_core::{Broker, LeaseRequest, QueueName};
use delayd_local::{LocalBroker, LocalConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROUNDS: usize = 5;

/// Runs one child until `kill_after` past its READY and SIGKILLs it:
/// the ids whose replace returned `after_lease`, and those acked after.
fn run_child(
    dir: &std::path::Path,
    prefix: &str,
    kill_after: Duration,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let child = Reporting::spawn(
        Command::new(env!("CARGO_BIN_EXE_delayd-local-successorchild"))
            .arg(dir)
            .arg(prefix),
    );
    child.wait_ready();
    std::thread::sleep(kill_after);
    let (mut replaced, mut acked) = (BTreeSet::new(), BTreeSet::new());
    for line in child.kill() {
        match line.split_once(' ') {
            Some(("S", id)) => assert!(replaced.insert(id.to_string()), "{id} twice"),
            Some(("A", id)) => assert!(acked.insert(id.to_string()), "{id} acked twice"),
            _ => {}
        }
    }
    (replaced, acked)
}

#[test]
fn successors_survive_kill_9() {
    let seed: u64 = std::env::var("DELAYD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("DELAYD_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let queue = QueueName::new("successors").expect("queue");
    let (mut successors, mut after_ack) = (0, 0);
    for round in 0..ROUNDS {
        let kill_after = Duration::from_millis(rng.random_range(100..600));
        let (replaced, acked) = run_child(dir.path(), &format!("r{round}"), kill_after);
        successors += replaced.len();
        after_ack += acked.len();
        runtime.block_on(async {
            let broker = LocalBroker::open(LocalConfig::new(dir.path()))
                .await
                .expect("reopen");
            // Every message of the round is delivered once more and acked:
            // the next round starts from an empty queue.
            let mut delivered: BTreeMap<String, String> = BTreeMap::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !replaced.iter().all(|id| delivered.contains_key(id)) {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: successors never delivered: {:?}",
                    replaced
                        .iter()
                        .filter(|id| !delivered.contains_key(*id))
                        .collect::<Vec<_>>()
                );
                let request = LeaseRequest {
                    max: 100,
                    wait_ms: 200,
                    lease_ms: None,
                };
                let leased = broker
                    .lease(std::slice::from_ref(&queue), request)
                    .await
                    .expect("lease");
                for d in leased {
                    let payload = String::from_utf8_lossy(&d.payload).into_owned();
                    broker.ack(&queue, &d.id, &d.lease_id).await.expect("ack");
                    let id = d.id.to_string();
                    if replaced.contains(&id) {
                        assert_eq!(
                            payload,
                            "v1",
                            "round {round}: {id} (acked before the kill: {}) delivered \
                             without its successor's content",
                            acked.contains(&id)
                        );
                    }
                    assert!(
                        delivered.insert(id.clone(), payload).is_none() || !replaced.contains(&id),
                        "round {round}: {id} delivered twice after the restart"
                    );
                }
            }
            broker.shutdown().await.expect("shutdown");
        });
    }
    eprintln!("{successors} successors over {ROUNDS} kills, {after_ack} of them after an ack");
    assert!(
        successors > 0 && after_ack > 0,
        "the rounds made successors both ways: {successors} successors, {after_ack} after an ack"
    );
}
