//! Crash test of retention (issue 39, "kill -9 tests"): a child process
//! ends messages on a queue that retains them for an hour and reports
//! each end once it returned; the parent SIGKILLs it at random moments,
//! reopens the store, and checks that every reported end is still there:
//! `get` shows the message `acked` or `cancelled` with its seq, and an
//! enqueue of its id is a duplicate answering that seq. Ends from earlier
//! rounds are checked again after every later crash.
//!
//! The kill times come from a seeded generator; the seed is printed first
//! (`DELAYD_SEED=<n>` replays them).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::child::Reporting;

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, MessageState, QueueName};
use delayd_local::{LocalBroker, LocalConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROUNDS: usize = 6;

/// Runs one child until `kill_after` past its READY, SIGKILLs it, returns
/// the ends it reported: id -> (state, seq).
fn run_child(
    dir: &std::path::Path,
    prefix: &str,
    kill_after: Duration,
) -> BTreeMap<String, (MessageState, u64)> {
    let child = Reporting::spawn(
        Command::new(env!("CARGO_BIN_EXE_delayd-local-retainchild"))
            .arg(dir)
            .arg(prefix),
    );
    child.wait_ready();
    std::thread::sleep(kill_after);
    let mut ends = BTreeMap::new();
    for line in child.kill() {
        let parts: Vec<&str> = line.split(' ').collect();
        let (state, id, seq) = match parts.as_slice() {
            ["A", id, seq] => (MessageState::Acked, id, seq),
            ["C", id, seq] => (MessageState::Cancelled, id, seq),
            _ => continue,
        };
        let seq = seq.parse().expect("seq");
        assert!(
            ends.insert(id.to_string(), (state, seq)).is_none(),
            "{id} ended twice"
        );
    }
    ends
}

#[test]
fn retained_ids_survive_kill_9() {
    let seed: u64 = std::env::var("DELAYD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("DELAYD_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let queue = QueueName::new("retain").expect("queue");
    let mut ended: BTreeMap<String, (MessageState, u64)> = BTreeMap::new();
    for round in 0..ROUNDS {
        let kill_after = Duration::from_millis(rng.random_range(50..600));
        ended.extend(run_child(dir.path(), &format!("r{round}"), kill_after));
        runtime.block_on(async {
            let broker = LocalBroker::open(LocalConfig::new(dir.path()))
                .await
                .expect("reopen");
            for (id, &(state, seq)) in &ended {
                let mid = MessageId::new(id.as_str()).expect("id");
                let m = broker
                    .get(&queue, &mid)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: {id} ended ({state}) is gone: {e}"));
                assert_eq!((m.state, m.seq), (state, seq), "round {round}: {id}");
                let again = EnqueueRequest {
                    id: Some(mid),
                    ..EnqueueRequest::default()
                };
                let out = broker
                    .enqueue(&queue, vec![again], EnqueueOptions::default())
                    .await
                    .expect("enqueue")
                    .remove(0)
                    .expect("enqueue item");
                assert!(
                    !out.created,
                    "round {round}: retained {id} must be a duplicate"
                );
                assert_eq!(out.seq, seq);
            }
            broker.shutdown().await.expect("shutdown");
        });
    }
    assert!(
        ended.values().any(|(s, _)| *s == MessageState::Acked)
            && ended.values().any(|(s, _)| *s == MessageState::Cancelled),
        "the rounds ended messages both ways: {} ends",
        ended.len()
    );
}
