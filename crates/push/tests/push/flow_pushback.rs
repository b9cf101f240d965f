//! Push on a queue with `flow` (api.md, "Flow control"): a 429, or a 503
//! with `Retry-After`, defers the message (the attempt is given back, only
//! its key cools down); a 503 without `Retry-After` stays a failed attempt;
//! a queue without `flow` keeps the plain push rules. Each scenario runs on
//! the reference model and on LocalBroker.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use delayd_core::{FlowConfig, RetryPolicy};

use crate::common::*;

/// A fast backoff with a cap far above `Retry-After`, so the gaps below
/// can only come from `Retry-After`.
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

async fn assert_gone(h: &Harness, queue: &str, message: &str) {
    eventually(5_000, "acked after the 200", || async {
        h.broker.get(&q(queue), &id(message)).await.is_err()
    })
    .await;
}

/// 429 with `Retry-After: 1`: the next push carries the same attempt, one
/// second later, with the key as `delayd-key`.
async fn too_many_requests_defers(on_local: bool) {
    let mut receiver = Receiver::start(|n, _| match n {
        0 => Reply::With(429, vec![("retry-after", "1".into())]),
        _ => Reply::Status(200),
    })
    .await;
    let h = harness(on_local).await;
    let push = push(receiver.url(), 2_000, 4, None);
    h.flow_queue("mail", push, fast_retry(), FlowConfig::default())
        .await;
    h.enqueue_keyed("mail", &[("m".into(), Some("customer-17"))])
        .await;
    let first = receiver.next(Duration::from_secs(5)).await;
    let second = receiver.next(Duration::from_secs(5)).await;
    assert_eq!(
        (first.attempt(), second.attempt()),
        (1, 1),
        "attempt given back"
    );
    assert_eq!(first.header("delayd-key"), "customer-17");
    let gap = second.at - first.at;
    assert!(
        gap >= Duration::from_millis(900),
        "Retry-After ignored: {gap:?}"
    );
    assert_gone(&h, "mail", "m").await;
    h.stop().await;
}

/// 503 with `Retry-After` (here an HTTP date) defers; a bare 503 is a
/// failed attempt (the next push counts up).
async fn service_unavailable_defers_only_with_retry_after(on_local: bool) {
    let mut receiver = Receiver::start(move |n, _| match n {
        // Two seconds from the answer; an HTTP date drops the fraction, so
        // at least one whole second remains.
        0 => {
            let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
            Reply::With(503, vec![("retry-after", at)])
        }
        1 => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    let h = harness(on_local).await;
    let push = push(receiver.url(), 2_000, 4, None);
    h.flow_queue("busy", push, fast_retry(), FlowConfig::default())
        .await;
    h.enqueue_keyed("busy", &[("m".into(), Some("k"))]).await;
    let first = receiver.next(Duration::from_secs(5)).await;
    let second = receiver.next(Duration::from_secs(5)).await;
    let third = receiver.next(Duration::from_secs(5)).await;
    let attempts = [first.attempt(), second.attempt(), third.attempt()];
    assert_eq!(
        attempts,
        [1, 1, 2],
        "503+Retry-After defers, bare 503 fails"
    );
    let gap = second.at - first.at;
    // An HTTP date has whole seconds: at least one second away.
    assert!(
        gap >= Duration::from_millis(900),
        "Retry-After ignored: {gap:?}"
    );
    assert_gone(&h, "busy", "m").await;
    h.stop().await;
}

/// Without `flow`, a 429 is a failed attempt as it always was.
async fn no_flow_queue_keeps_the_push_rules(on_local: bool) {
    let mut receiver = Receiver::start(|n, _| match n {
        0 => Reply::With(429, vec![("retry-after", "1".into())]),
        _ => Reply::Status(200),
    })
    .await;
    let h = harness(on_local).await;
    h.push_queue(
        "plain",
        push(receiver.url(), 2_000, 4, None),
        10,
        fast_retry(),
    )
    .await;
    h.enqueue_keyed("plain", &[("m".into(), Some("k"))]).await;
    let first = receiver.next(Duration::from_secs(5)).await;
    let second = receiver.next(Duration::from_secs(5)).await;
    assert_eq!((first.attempt(), second.attempt()), (1, 2));
    assert!(second.at - first.at >= Duration::from_millis(900));
    assert_gone(&h, "plain", "m").await;
    h.stop().await;
}

/// "Push pushback" at small scale: 100 keys, 3 messages each; 10 keys
/// answer 429 `Retry-After: 1` to their first two requests. The other 90
/// keys are all delivered before any pushed-back key is tried again (their
/// delivery never waits for someone else's cooldown), no message dies and
/// no attempt is spent.
async fn pushback_from_some_keys_does_not_slow_the_others(on_local: bool) {
    const KEYS: usize = 100;
    const PER_KEY: usize = 3;
    let pushed_back: BTreeSet<String> = (0..10).map(|k| format!("key-{k:03}")).collect();
    // The script's own record (it runs before the request is reported):
    // requests per key so far, and the ids answered 200.
    let answered: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let delivered: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let script = {
        let pushed_back = pushed_back.clone();
        let answered = Arc::clone(&answered);
        let delivered = Arc::clone(&delivered);
        move |_: usize, r: &Received| {
            let key = r.header("delayd-key").to_owned();
            let mut answered = answered.lock().unwrap();
            let seen = answered.entry(key.clone()).or_default();
            *seen += 1;
            if pushed_back.contains(&key) && *seen <= 2 {
                Reply::With(429, vec![("retry-after", "1".into())])
            } else {
                delivered
                    .lock()
                    .unwrap()
                    .insert(r.header("delayd-id").to_owned());
                Reply::Status(200)
            }
        }
    };
    let mut receiver = Receiver::start(script).await;
    let h = harness(on_local).await;
    let push = push(receiver.url(), 5_000, 16, None);
    h.flow_queue("fanout", push, fast_retry(), FlowConfig::default())
        .await;
    let key_names: Vec<String> = (0..KEYS).map(|k| format!("key-{k:03}")).collect();
    let messages: Vec<(String, Option<&str>)> = (0..PER_KEY)
        .flat_map(|i| {
            key_names
                .iter()
                .map(move |key| (format!("{key}-{i}"), Some(key.as_str())))
        })
        .collect();
    h.enqueue_keyed("fanout", &messages).await;

    // (when, key, id, attempt) of every request, in arrival order.
    let mut log = Vec::new();
    while delivered.lock().unwrap().len() < KEYS * PER_KEY {
        let r = receiver.next(Duration::from_secs(30)).await;
        let key = r.header("delayd-key").to_owned();
        log.push((r.at, key, r.header("delayd-id").to_owned(), r.attempt()));
    }
    assert!(
        log.iter().all(|(_, _, _, attempt)| *attempt == 1),
        "a deferral spent an attempt: {log:?}"
    );
    let others: Vec<_> = log
        .iter()
        .filter(|(_, key, _, _)| !pushed_back.contains(key))
        .collect();
    assert_eq!(
        others.len(),
        (KEYS - 10) * PER_KEY,
        "each other message once"
    );
    let mut seen_ids = BTreeSet::new();
    let first_redelivery = log
        .iter()
        .filter(|(_, _, id_, _)| !seen_ids.insert(id_.clone()))
        .map(|(at, _, _, _)| *at)
        .min();
    let last_other = others.iter().map(|(at, _, _, _)| *at).max();
    let (Some(last_other), Some(first_redelivery)) = (last_other, first_redelivery) else {
        panic!("no delivery of the other keys, or no redelivery of a pushed-back one: {log:?}");
    };
    assert!(
        last_other < first_redelivery,
        "the other keys waited for a pushed-back key's cooldown"
    );
    eventually(10_000, "every message acked, none dead", || async {
        let info = h.broker.get_queue(&q("fanout")).await.unwrap();
        let stats = info.stats;
        stats.dead == 0 && stats.scheduled + stats.ready + stats.leased == 0
    })
    .await;
    h.stop().await;
}

mod model {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn too_many_requests_defers() {
        super::too_many_requests_defers(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn service_unavailable_defers_only_with_retry_after() {
        super::service_unavailable_defers_only_with_retry_after(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_flow_queue_keeps_the_push_rules() {
        super::no_flow_queue_keeps_the_push_rules(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pushback_from_some_keys_does_not_slow_the_others() {
        super::pushback_from_some_keys_does_not_slow_the_others(false).await;
    }
}

mod local {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn too_many_requests_defers() {
        super::too_many_requests_defers(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn service_unavailable_defers_only_with_retry_after() {
        super::service_unavailable_defers_only_with_retry_after(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_flow_queue_keeps_the_push_rules() {
        super::no_flow_queue_keeps_the_push_rules(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pushback_from_some_keys_does_not_slow_the_others() {
        super::pushback_from_some_keys_does_not_slow_the_others(true).await;
    }
}
