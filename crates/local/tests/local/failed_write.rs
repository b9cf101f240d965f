//! A commit or fsync that fails (injected through `LocalConfig::faults`,
//! the storage seam): the call in that group is answered `Unavailable`,
//! later writes are refused until the sync thread has reopened the engine,
//! then writes resume in the same process; a restart finds every
//! acknowledged message and nothing that was reported as failed before
//! the write reached the engine; a schedule's fire in a failed group is
//! lost whole (message and cursor) and fired again after the reopen; a
//! failed read is an error, never wrong data. Run
//! with `--features fault-injection` (CI's `--all-features` does).

use delayd_core::testkit::support::eventually;
use delayd_core::{
    Broker, BrokerError, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueName,
};
use delayd_local::{FaultPlan, LocalBroker, LocalConfig};

fn queue() -> QueueName {
    QueueName::new("jobs").expect("valid queue name")
}

fn request(id: &str) -> EnqueueRequest {
    EnqueueRequest {
        id: Some(MessageId::new(id).expect("valid id")),
        payload: id.as_bytes().to_vec(),
        ..EnqueueRequest::default()
    }
}

async fn enqueue(broker: &LocalBroker, id: &str) -> Result<(), BrokerError> {
    let mut out = broker
        .enqueue(&queue(), vec![request(id)], EnqueueOptions::default())
        .await?;
    out.remove(0).map(|_| ())
}

async fn open(dir: &std::path::Path, faults: FaultPlan) -> LocalBroker {
    let mut config = LocalConfig::new(dir);
    config.faults = faults;
    LocalBroker::open(config).await.expect("open")
}

/// Waits until the broker takes writes again (the reopen has no event a
/// caller can await, so `ready` is polled).
async fn wait_healed(broker: &LocalBroker) {
    eventually(10_000, "the engine reopened", || async {
        broker.ready().await.is_ok()
    })
    .await;
}

/// Enqueues `a0..a{n}` one call (one group) each until one fails; returns
/// the acknowledged ids and the failed one.
async fn enqueue_until_failure(broker: &LocalBroker, n: usize) -> (Vec<String>, String) {
    let mut acknowledged = Vec::new();
    for i in 0..n {
        let id = format!("a{i}");
        match enqueue(broker, &id).await {
            Ok(()) => acknowledged.push(id),
            Err(BrokerError::Unavailable { maybe_applied, .. }) => {
                assert!(
                    maybe_applied,
                    "a failed group's caller may have been applied"
                );
                return (acknowledged, id);
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }
    panic!("no injected failure in {n} enqueues");
}

/// Every id in `ids` is stored in the reopened store.
async fn assert_all_present(dir: &std::path::Path, ids: &[String]) -> LocalBroker {
    let broker = open(dir, FaultPlan::default()).await;
    for id in ids {
        let id = MessageId::new(id.as_str()).expect("valid id");
        let got = broker.get(&queue(), &id).await;
        assert!(
            got.is_ok(),
            "acknowledged {id} missing after restart: {got:?}"
        );
    }
    broker
}

/// Opens a broker with `faults`, enqueues until the planned failure, checks
/// that writes are refused and reads go on right after it (the reopen
/// waits a moment first), and waits for the reopen. Returns the broker,
/// the acknowledged ids and the id whose call failed.
async fn fail_and_heal(
    dir: &std::path::Path,
    faults: FaultPlan,
) -> (LocalBroker, Vec<String>, MessageId) {
    let broker = open(dir, faults).await;
    let (acknowledged, failed) = enqueue_until_failure(&broker, 20).await;
    let refused = enqueue(&broker, "refused").await;
    assert!(
        matches!(refused, Err(BrokerError::Unavailable { .. })),
        "{refused:?}"
    );
    assert!(broker.ready().await.is_err());
    let first = MessageId::new(acknowledged[0].as_str()).expect("valid id");
    assert!(broker.get(&queue(), &first).await.is_ok());
    wait_healed(&broker).await;
    let failed = MessageId::new(failed.as_str()).expect("valid id");
    (broker, acknowledged, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_commit_refuses_writes_then_reopens_in_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faults = FaultPlan {
        fail_commit: Some(5),
        ..FaultPlan::default()
    };
    let (broker, mut acknowledged, failed) = fail_and_heal(dir.path(), faults).await;
    for i in 0..5 {
        let id = format!("b{i}");
        enqueue(&broker, &id)
            .await
            .expect("writes resume after the reopen");
        acknowledged.push(id);
    }
    // The failed group never reached the engine: it is gone in process.
    assert!(matches!(
        broker.get(&queue(), &failed).await,
        Err(BrokerError::MessageNotFound { .. })
    ));
    broker.shutdown().await.expect("shutdown");
    drop(broker);

    let reopened = assert_all_present(dir.path(), &acknowledged).await;
    assert!(reopened.get(&queue(), &failed).await.is_err());
    let stats = reopened.get_queue(&queue()).await.expect("queue").stats;
    assert_eq!(stats.ready, acknowledged.len() as u64, "{stats:?}");
    reopened.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fsync_refuses_writes_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faults = FaultPlan {
        fail_fsync: Some(3),
        ..FaultPlan::default()
    };
    let (broker, mut acknowledged, _maybe_applied) = fail_and_heal(dir.path(), faults).await;
    enqueue(&broker, "after").await.expect("writes resume");
    acknowledged.push("after".into());
    broker.shutdown().await.expect("shutdown");
    drop(broker);

    // The failed fsync's group may or may not be on disk ("maybe
    // applied"); everything acknowledged is.
    let reopened = assert_all_present(dir.path(), &acknowledged).await;
    reopened.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_held_across_a_reopen_come_back_as_expired_leases() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Commit 1 is the enqueue of "m"; commit 2 holds the lease (which
    // returns without waiting for it) and perhaps the enqueue of "x".
    let faults = FaultPlan {
        fail_commit: Some(2),
        ..FaultPlan::default()
    };
    let broker = open(dir.path(), faults).await;
    enqueue(&broker, "m").await.expect("enqueue");
    let wait = LeaseRequest {
        max: 1,
        wait_ms: 0,
        lease_ms: Some(60_000),
    };
    let delivery = broker
        .lease(&[queue()], wait)
        .await
        .expect("lease")
        .remove(0);
    // The lease's group fails; after the reopen the lease is gone, as
    // after a crash before its fsync, and the message is back as it was
    // before the lease (its attempt not counted: docs/storage.md,
    // "What each call waits for").
    assert!(enqueue(&broker, "x").await.is_err());
    wait_healed(&broker).await;
    let acked = broker.ack(&queue(), &delivery.id, &delivery.lease_id).await;
    assert!(
        matches!(acked, Err(BrokerError::LeaseMismatch { .. })),
        "{acked:?}"
    );
    let message = broker
        .get(&queue(), &delivery.id)
        .await
        .expect("still there");
    assert_eq!(message.attempts, 0);
    assert_eq!(message.state, delayd_core::MessageState::Ready);
    broker.shutdown().await.expect("shutdown");
}

/// A schedule's fire whose group fails to commit: neither its message nor
/// its advanced cursor survives the reopen, and the reopened broker fires
/// that fire time again (once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_whose_commit_fails_fires_again_after_the_reopen() {
    use delayd_core::{ManualClock, MessageTemplate, Recurrence, ScheduleDefinition, ScheduleId};

    const T0: u64 = 1_700_000_000_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(T0);
    let mut config = LocalConfig::new(dir.path());
    config.clock = std::sync::Arc::new(clock.clone());
    // Group 1 is the put; group 2 the fire.
    config.faults = FaultPlan {
        fail_commit: Some(2),
        ..FaultPlan::default()
    };
    let broker = LocalBroker::open(config).await.expect("open");
    let id = ScheduleId::new("tick").expect("id");
    let definition = ScheduleDefinition {
        recurrence: Recurrence::Every { every_ms: 60_000 },
        start_at: T0 + 60_000,
        end_at: None,
        max_fires: None,
        message: MessageTemplate::default(),
        catchup: delayd_core::Catchup::All,
        catchup_window_ms: 3_600_000,
        overlap: delayd_core::Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    };
    broker
        .put_schedule(&queue(), &id, definition, EnqueueOptions::default())
        .await
        .expect("put");
    clock.set(T0 + 60_000);
    // The fire's group fails: writes are refused until the reopen.
    eventually(10_000, "the fire's group failed", || {
        std::future::ready(broker.faults_injected() == 1)
    })
    .await;
    wait_healed(&broker).await;
    let message = id.fire_message_id(T0 + 60_000);
    eventually(10_000, "the fire time fired again", || async {
        let record = broker.get_schedule(&queue(), &id).await.expect("get");
        record.fires == 1
    })
    .await;
    let record = broker.get_schedule(&queue(), &id).await.expect("get");
    assert_eq!(record.next_fire_at, Some(T0 + 120_000), "{record:?}");
    let fired = broker.get(&queue(), &message).await.expect("fired");
    broker.shutdown().await.expect("shutdown");
    drop(broker);

    // The same clock: nothing else is due.
    let mut config = LocalConfig::new(dir.path());
    config.clock = std::sync::Arc::new(clock);
    let reopened = LocalBroker::open(config).await.expect("reopen");
    let again = reopened.get(&queue(), &message).await.expect("there");
    assert_eq!(again.seq, fired.seq, "enqueued once");
    let stats = reopened.get_queue(&queue()).await.expect("queue").stats;
    assert_eq!(stats.ready + stats.scheduled, 1, "{stats:?}");
    reopened.shutdown().await.expect("shutdown");
}

/// A failed read (the seam's read fault) is an error or a retry, never
/// wrong data: a message beyond the horizon lives only on disk, so reading
/// it reads the engine; with every read from the first to the third
/// failing in turn, each answer is `Unavailable` or the right message, at
/// least one is `Unavailable`, and the store reads correctly afterwards.
#[tokio::test]
async fn a_failed_read_is_an_error_never_wrong_data() {
    for nth in 1..=3 {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open(
            dir.path(),
            FaultPlan {
                fail_read: Some(nth),
                ..FaultPlan::default()
            },
        )
        .await;
        let mut far = request("far");
        far.schedule = delayd_core::Schedule::Delay(7 * 86_400_000);
        let mut failures = 0;
        let outcome = broker
            .enqueue(&queue(), vec![far.clone()], EnqueueOptions::default())
            .await
            .and_then(|mut each| each.remove(0));
        match outcome {
            Ok(_) => {}
            Err(BrokerError::Unavailable { .. }) => failures += 1,
            Err(e) => panic!("read fault #{nth}: enqueue answered {e}"),
        }
        let id = MessageId::new("far").expect("id");
        for _ in 0..4 {
            match broker.get(&queue(), &id).await {
                Ok(m) => assert_eq!(m.payload, b"far", "read fault #{nth}"),
                Err(BrokerError::Unavailable { .. }) => failures += 1,
                Err(BrokerError::MessageNotFound { .. }) if failures > 0 => {
                    // The enqueue failed (said so): not there is right.
                    let again = broker
                        .enqueue(&queue(), vec![far.clone()], EnqueueOptions::default())
                        .await
                        .and_then(|mut each| each.remove(0));
                    assert!(again.is_ok(), "read fault #{nth}: {again:?}");
                }
                Err(e) => panic!("read fault #{nth}: get answered {e}"),
            }
        }
        assert!(failures > 0, "read fault #{nth} never surfaced");
        let m = broker
            .get(&queue(), &id)
            .await
            .expect("get after the fault");
        assert_eq!(m.payload, b"far");
        broker.shutdown().await.expect("shutdown");
    }
}

/// A lease does not wait for its own fsync, but it does wait for the
/// group that wrote the message it hands out: a message whose enqueue
/// never became durable is never delivered (here the enqueue's group
/// fails to commit, so after the reopen the message does not exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_never_hands_out_a_message_whose_enqueue_was_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Commit 1 creates the queue; commit 2 holds "m" and its hand-off.
    let faults = FaultPlan {
        fail_commit: Some(2),
        ..FaultPlan::default()
    };
    let broker = std::sync::Arc::new(open(dir.path(), faults).await);
    let other = QueueName::new("other").expect("queue name");
    broker
        .put_queue(&other, delayd_core::QueueConfigPatch::default())
        .await
        .expect("create queue");
    let consumer = std::sync::Arc::clone(&broker);
    let line = other.clone();
    let waiting = tokio::spawn(async move {
        let request = LeaseRequest {
            max: 1,
            wait_ms: 5_000,
            lease_ms: Some(60_000),
        };
        consumer.lease(&[line], request).await
    });
    // The lease call is in line before "m" is enqueued, so the enqueue's
    // group carries the hand-off that must not reach the caller.
    eventually(5_000, "the lease call waits", || {
        std::future::ready(broker.store_stats().waiting_leases == 1)
    })
    .await;
    let m = broker
        .enqueue(&other, vec![request("m")], EnqueueOptions::default())
        .await;
    assert!(m.is_err(), "commit 2 fails: {m:?}");
    let got = waiting.await.expect("lease task");
    assert!(
        got.as_ref()
            .map_or(true, |d| d.iter().all(|d| d.id.as_str() != "m")),
        "a lost enqueue was delivered: {got:?}"
    );
    wait_healed(&broker).await;
    let after = broker.get(&other, &MessageId::new("m").expect("id")).await;
    assert!(
        matches!(after, Err(BrokerError::MessageNotFound { .. })),
        "{after:?}"
    );
}
