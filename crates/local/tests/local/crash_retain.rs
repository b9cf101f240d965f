//! Crash test of retention (issue 39, "kill -9 tests"): a child process
//! ends messages on a queue that retains them for an hour and reports
//! each end once it returned; the parent SIGKILLs it at random moments,
//! reopens the store, and checks that every reported end is still there:
//! `get` shows the message `acked` or `cancelled` with its seq, and an
//! enqueue of its id is a duplicate answering that seq. Ends from earlier
//! rounds are checked again after every later crash.
//!
//! Each round is recorded as a history for the one history checker
//! (crates/history), as `crash_kill9.rs` records its rounds: the child
//! reports no times, so its calls span the round; each reported end is an
//! acknowledged enqueue and end of the message; every kill is a crash and
//! every start a restart; the reads after each kill observe the retained
//! messages as ended (absent to the checker). The checker then proves by
//! its own rules that no acknowledged end was undone.
//!
//! The kill times come from a seeded generator; the seed is printed first
//! (`DELAYD_SEED=<n>` replays them).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::child::Reporting;

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, MessageState, QueueName};
use delayd_history::{
    Crash, Enqueue, History, MessageCall, Observe, Observed, Op, Outcome, Span, Stop,
};
use delayd_local::{LocalBroker, LocalConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROUNDS: usize = 6;

type Ends = BTreeMap<String, (MessageState, u64)>;

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// Runs one child until `kill_after` past its READY, SIGKILLs it, returns
/// the ends it reported (id -> (state, seq)), recording the round in
/// `history`.
fn run_child(
    dir: &std::path::Path,
    prefix: &str,
    kill_after: Duration,
    history: &mut History,
) -> Ends {
    let spawned = wall_ms();
    let child = Reporting::spawn(
        Command::new(env!("CARGO_BIN_EXE_delayd-local-retainchild"))
            .arg(dir)
            .arg(prefix),
    );
    child.wait_ready();
    history.push(Op::Restart(Span {
        invoke: spawned,
        complete: wall_ms(),
    }));
    std::thread::sleep(kill_after);
    let killed = wall_ms();
    let lines = child.kill();
    let reaped = wall_ms();
    let mut ends = BTreeMap::new();
    for line in lines {
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
    for (id, &(_, seq)) in &ends {
        history.push(Op::Enqueue(Enqueue {
            invoke: spawned,
            complete: killed,
            queue: "retain".into(),
            id: id.clone(),
            outcome: Outcome::Ok,
            seq: Some(seq),
            ..Enqueue::default()
        }));
        history.push(Op::Cancel(MessageCall {
            invoke: spawned,
            complete: killed,
            queue: "retain".into(),
            id: id.clone(),
            outcome: Outcome::Ok,
        }));
    }
    history.push(Op::Crash(Crash {
        invoke: killed,
        complete: reaped,
        ends_leases: true,
        maybe: false,
    }));
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
    let mut ended = Ends::new();
    let mut history = History::new();
    for round in 0..ROUNDS {
        let kill_after = Duration::from_millis(rng.random_range(50..600));
        let prefix = format!("r{round}");
        ended.extend(run_child(dir.path(), &prefix, kill_after, &mut history));
        runtime.block_on(async {
            let broker = LocalBroker::open(LocalConfig::new(dir.path()))
                .await
                .expect("reopen");
            for (id, &(state, seq)) in &ended {
                let mid = MessageId::new(id.as_str()).expect("id");
                let read_at = wall_ms();
                let got = broker.get(&queue, &mid).await;
                // Ended (retained or gone) is absent to the checker.
                let observed = match &got {
                    Ok(m) if !m.state.ended() => Observed::Live,
                    _ => Observed::Absent,
                };
                history.push(Op::Observe(Observe {
                    invoke: read_at,
                    complete: wall_ms(),
                    queue: "retain".into(),
                    id: id.clone(),
                    state: observed,
                    seq: None,
                }));
                let m = got
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
    history.push(Op::Stop(Stop {
        at: wall_ms(),
        drained: false,
    }));
    let report = delayd_history::check(&history);
    assert!(report.ok(), "the history checker: {report}");
    eprintln!("history checker: {report}");
    assert!(
        ended.values().any(|(s, _)| *s == MessageState::Acked)
            && ended.values().any(|(s, _)| *s == MessageState::Cancelled),
        "the rounds ended messages both ways: {} ends",
        ended.len()
    );
}
