//! Push in the message's history (api.md, "Message history"): each push is
//! a `leased` event via `push`; a failed one is `push_failed` with the
//! answer's status (none for a transport error), the error text the
//! message's `last_error` also gets, and the request's duration; on a
//! queue with `flow` a 429 is `deferred` with reason `push_429`. The
//! queues retain ended messages, so the whole history is read after the
//! final 2xx. Each scenario runs on the reference model and on
//! LocalBroker.

use delayd_core::{
    DeferReason, EventKind, FlowConfig, History, QueueConfigPatch, RetryPolicy, Via,
};

use crate::common::*;

const DAY_MS: u64 = 86_400_000;

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        initial_ms: 20,
        max_ms: 60_000,
        multiplier: 1.0,
    }
}

async fn harness(on_local: bool) -> Harness {
    if on_local {
        Harness::start(policy(&["127.0.0.1/32"])).await
    } else {
        Harness::start_on_model(policy(&["127.0.0.1/32"]))
    }
}

/// `queue` pushing to `url` (timeout `timeout_ms`), retaining ended
/// messages, with `flow` when given.
async fn retaining_queue(h: &Harness, queue: &str, url: String, timeout_ms: u64, flow: bool) {
    let patch = QueueConfigPatch {
        retry: Some(fast_retry()),
        push: Some(Some(push(url, timeout_ms, 1, None))),
        flow: Some(flow.then(FlowConfig::default)),
        retain_ms: Some(DAY_MS),
        ..QueueConfigPatch::default()
    };
    h.broker.put_queue(&q(queue), patch).await.unwrap();
}

/// The history of `message` once it holds an `acked` event.
async fn history_once_acked(h: &Harness, queue: &str, message: &str) -> History {
    eventually(10_000, "the final push acked", || async {
        let history = h.broker.events(&q(queue), &id(message)).await;
        history.is_ok_and(|h| h.events.last().map(|e| &e.kind) == Some(&EventKind::Acked))
    })
    .await;
    h.broker.events(&q(queue), &id(message)).await.unwrap()
}

/// A timeout (no status), then a 500 with a body, then a 200: two
/// `push_failed` events between three push leases.
async fn failed_pushes_are_push_failed(on_local: bool) {
    let receiver = Receiver::start(|n, _| match n {
        0 => Reply::Hang,
        1 => Reply::Body(500, "template missing".into()),
        _ => Reply::Status(200),
    })
    .await;
    let h = harness(on_local).await;
    retaining_queue(&h, "hooks", receiver.url(), 300, false).await;
    h.enqueue_keyed("hooks", &[("m".into(), None)]).await;
    let history = history_once_acked(&h, "hooks", "m").await;
    let kinds: Vec<&EventKind> = history.events.iter().map(|e| &e.kind).collect();
    let [enqueued, lease_1, timeout, lease_2, http_500, lease_3, acked] = kinds[..] else {
        panic!("seven events expected: {history:?}");
    };
    assert_eq!((enqueued, acked), (&EventKind::Enqueued, &EventKind::Acked));
    for lease in [lease_1, lease_2, lease_3] {
        assert!(
            matches!(lease, EventKind::Leased { via: Via::Push, .. }),
            "{history:?}"
        );
    }
    let EventKind::PushFailed {
        status: None,
        error,
        duration_ms,
    } = timeout
    else {
        panic!("a timeout is push_failed without a status: {history:?}");
    };
    assert_eq!(error, "no answer within timeout_ms");
    assert!(*duration_ms >= 300, "took the timeout: {duration_ms}");
    assert!(
        matches!(
            http_500,
            EventKind::PushFailed { status: Some(500), error, .. }
                if error == "HTTP 500: template missing"
        ),
        "{history:?}"
    );
    let attempts: Vec<u32> = history.events.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [0, 1, 1, 2, 2, 3, 3]);
    let message = h.broker.get(&q("hooks"), &id("m")).await.unwrap();
    assert_eq!(
        message.last_error.as_deref(),
        Some("HTTP 500: template missing"),
        "the event's error is the last_error"
    );
    h.stop().await;
}

/// On a queue with `flow`, a 429 is a deferral (`push_429`), the attempt
/// given back.
async fn too_many_requests_is_deferred_push_429(on_local: bool) {
    let receiver = Receiver::start(|n, _| match n {
        0 => Reply::Status(429),
        _ => Reply::Status(200),
    })
    .await;
    let h = harness(on_local).await;
    retaining_queue(&h, "mail", receiver.url(), 2_000, true).await;
    h.enqueue_keyed("mail", &[("m".into(), Some("customer-17"))])
        .await;
    let history = history_once_acked(&h, "mail", "m").await;
    let deferred = &history.events[2];
    let EventKind::Deferred { until, reason } = deferred.kind else {
        panic!("a 429 with flow is deferred: {history:?}");
    };
    assert_eq!(reason, DeferReason::Push429);
    assert!(until >= deferred.at, "{history:?}");
    assert_eq!(deferred.attempt, 0, "the attempt is given back");
    let names: Vec<&str> = history.events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        names,
        ["enqueued", "leased", "deferred", "leased", "acked"],
        "{history:?}"
    );
    h.stop().await;
}

mod model {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_pushes_are_push_failed() {
        super::failed_pushes_are_push_failed(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn too_many_requests_is_deferred_push_429() {
        super::too_many_requests_is_deferred_push_429(false).await;
    }
}

mod local {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_pushes_are_push_failed() {
        super::failed_pushes_are_push_failed(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn too_many_requests_is_deferred_push_429() {
        super::too_many_requests_is_deferred_push_429(true).await;
    }
}
