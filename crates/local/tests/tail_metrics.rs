//! The instruments that trace a late message to where it waited: the state
//! lock's hold and wait per call site, the timer driver's rounds (how many
//! timers each fired and messages it handed to waiting lease calls), and
//! the phases of each commit group. A binary of its own: it installs the
//! process-wide metrics recorder, which the broker's threads (driver, sync
//! thread) record into.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::{
    metric, Broker, EnqueueOptions, EnqueueRequest, FlowConfig, LeaseRequest, QueueConfigPatch,
    QueueName, Rate, Schedule,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::CompositeKey;

/// One reading of every metric (a snapshot drains the histograms).
type Snapshot = Vec<(CompositeKey, DebugValue)>;

/// The samples of the histogram `name` with `label` = `value` (any labels
/// when `label` is `None`).
fn samples(snapshot: &Snapshot, name: &str, label: Option<(&str, &str)>) -> Vec<f64> {
    snapshot
        .iter()
        .filter(|(key, _)| key.key().name() == name)
        .filter(|(key, _)| {
            label.is_none_or(|(k, v)| key.key().labels().any(|l| l.key() == k && l.value() == v))
        })
        .flat_map(|(_, value)| match value {
            DebugValue::Histogram(values) => values.iter().map(|v| v.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_holds_driver_rounds_and_commit_phases_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).expect("the only recorder of this binary");

    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.durability = Durability::Always;
    let broker = Arc::new(LocalBroker::open(config).await.expect("open"));
    let queue = QueueName::new("traced").expect("queue");

    // A lease call waits; the driver hands it the message when it is due.
    let waiting = {
        let broker = Arc::clone(&broker);
        let queue = queue.clone();
        tokio::spawn(async move {
            let request = LeaseRequest {
                max: 1,
                wait_ms: 10_000,
                lease_ms: None,
            };
            broker.lease(&[queue], request).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let request = EnqueueRequest {
        schedule: Schedule::Delay(50),
        payload: b"traced".to_vec(),
        ..EnqueueRequest::default()
    };
    broker
        .enqueue(&queue, vec![request], EnqueueOptions::default())
        .await
        .expect("enqueue");
    let delivery = waiting
        .await
        .expect("lease task")
        .expect("lease")
        .pop()
        .expect("the waiting call was handed the message");
    assert_eq!(delivery.payload, b"traced", "payload read outside the lock");
    broker
        .ack(&queue, &delivery.id, &delivery.lease_id)
        .await
        .expect("ack");
    held_by_the_queues_rate(&broker).await;
    broker.shutdown().await.expect("shutdown");

    let snapshot: Snapshot = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect();
    let snapshotter = &snapshot;
    for site in ["call", "lease", "driver", "commit"] {
        let holds = samples(
            snapshotter,
            metric::STATE_LOCK_HOLD_SECONDS,
            Some(("site", site)),
        );
        assert!(!holds.is_empty(), "no lock hold recorded at site {site}");
        let waits = samples(
            snapshotter,
            metric::STATE_LOCK_WAIT_SECONDS,
            Some(("site", site)),
        );
        // One wait per acquisition; the sync thread also records a hold
        // each time it sleeps on the condition variable.
        assert!(
            !waits.is_empty() && waits.len() <= holds.len(),
            "{} waits for {} holds at site {site}",
            waits.len(),
            holds.len()
        );
    }
    let handed = samples(snapshotter, metric::DRIVER_ROUND_HANDED, None);
    assert!(
        handed.iter().any(|&n| n >= 1.0),
        "no driver round handed the message to the waiting call: {handed:?}"
    );
    let fired = samples(snapshotter, metric::DRIVER_ROUND_FIRED, None);
    assert!(fired.iter().any(|&n| n >= 1.0), "no round fired: {fired:?}");
    assert_eq!(
        samples(snapshotter, metric::DRIVER_ROUND_SECONDS, None).len(),
        fired.len()
    );
    for phase in ["open", "write", "fsync", "publish"] {
        let got = samples(
            snapshotter,
            metric::COMMIT_PHASE_SECONDS,
            Some(("phase", phase)),
        );
        assert!(!got.is_empty(), "commit phase {phase} not recorded");
    }
    let held: u64 = snapshot
        .iter()
        .filter(|(key, _)| key.key().name() == metric::FLOW_HELD_TOTAL)
        .filter(|(key, _)| {
            let label =
                |k: &str, v: &str| key.key().labels().any(|l| l.key() == k && l.value() == v);
            label("queue", "rated") && label("reason", "rate")
        })
        .map(|(_, value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum();
    assert!(
        held >= 1,
        "messages held by the queue's rate were not counted"
    );
}

/// A queue whose own rate is the binding limit: after one delivery takes
/// its only token, the other ready messages wait for the rate.
async fn held_by_the_queues_rate(broker: &LocalBroker) {
    let queue = QueueName::new("rated").expect("queue");
    let rate = Rate {
        limit: 1,
        period_ms: 60_000,
        burst: 1,
    };
    let patch = QueueConfigPatch {
        flow: Some(Some(FlowConfig {
            rate: Some(rate),
            ..FlowConfig::default()
        })),
        ..QueueConfigPatch::default()
    };
    broker.put_queue(&queue, patch).await.expect("put_queue");
    let now = |payload: &str| EnqueueRequest {
        schedule: Schedule::Now,
        payload: payload.as_bytes().to_vec(),
        ..EnqueueRequest::default()
    };
    broker
        .enqueue(
            &queue,
            vec![now("a"), now("b"), now("c")],
            EnqueueOptions::default(),
        )
        .await
        .expect("enqueue");
    let request = LeaseRequest {
        max: 3,
        wait_ms: 0,
        lease_ms: None,
    };
    let got = broker.lease(&[queue], request).await.expect("lease");
    assert_eq!(got.len(), 1, "one token, one delivery");
}
