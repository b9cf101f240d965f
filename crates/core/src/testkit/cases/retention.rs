//! Retention (api.md, "Retention, replace and debounce"): a queue with
//! `retain_ms` keeps an ended message, without its payload, for that long.
//!
//! Every case reads the broker's own clock around its calls, so a verdict
//! about "still within the window" is only asserted when the window surely
//! had not passed: no case depends on the machine's speed.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::message::{EnqueueOptions, ListQuery, MessageState, Schedule};
use crate::model::{QueueConfig, QueueConfigPatch, QueueName};
use crate::testkit::support::{self as s, get, lease, lease_one, put, put_now, req};

/// The window the cases use: long enough that the calls right after an end
/// nearly always fall inside it, short enough to wait out on real time.
const RETAIN_MS: u64 = 2_000;

async fn retaining_queue(b: &Arc<dyn Broker>, case: &str, retain_ms: u64) -> QueueName {
    let q = s::queue(case, "q");
    let patch = QueueConfigPatch {
        retry: Some(s::fast_retry()),
        retain_ms: Some(retain_ms),
        ..QueueConfigPatch::default()
    };
    let (_, info) = s::must(b.put_queue(&q, patch).await, "put_queue");
    assert_eq!(info.config.retain_ms, retain_ms, "retain_ms is returned");
    q
}

/// Sleeps until the broker's clock is past `t`.
async fn sleep_past(t: u64) {
    let now = s::now_ms();
    if now <= t {
        tokio::time::sleep(Duration::from_millis(t - now + 1)).await;
    }
    s::tick_past(t).await;
}

/// An acked and a cancelled message are retained: `get` shows them as
/// `acked` and `cancelled` with their `ended_at` and no payload, the rest
/// of the record as it was; they are not counted, listed or delivered;
/// their ids are duplicates for `keep` (single and batch); every other
/// call treats them as gone (404).
pub async fn retention_keeps_ended_messages(b: Arc<dyn Broker>) {
    let q = retaining_queue(&b, "retention_keeps_ended_messages", RETAIN_MS).await;
    let mut first = req(Some("acked"), Schedule::Now, "payload-a");
    first.priority = Some(7);
    first.headers.insert("h".into(), "v".into());
    let acked = put(&b, &q, first).await;
    let d = lease_one(&b, &q, None).await;
    let before_ack = s::now_ms();
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    let cancelled = put(&b, &q, req(Some("cancelled"), Schedule::Delay(60_000), "c")).await;
    let before_cancel = s::now_ms();
    s::must(b.cancel(&q, &cancelled.id).await, "cancel");

    let m = s::must(b.get(&q, &acked.id).await, "get acked");
    let checked_at = s::now_ms();
    let ended = m.ended_at.expect("a retained message has ended_at");
    assert!(
        ended >= before_ack && ended <= checked_at,
        "ended_at {ended} is the ack's time"
    );
    assert_eq!(m.state, MessageState::Acked);
    assert_eq!(
        (m.seq, m.attempts, m.priority),
        (acked.seq, 1, 7),
        "the record stays"
    );
    assert_eq!(m.headers.get("h").map(String::as_str), Some("v"));
    assert!(m.payload.is_empty(), "retained without its payload");
    assert_eq!(m.lease_until, None);
    let c = s::must(b.get(&q, &cancelled.id).await, "get cancelled");
    assert_eq!(c.state, MessageState::Cancelled);
    assert!(c.ended_at.is_some_and(|t| t >= before_cancel));
    assert_eq!(c.deliver_at, cancelled.deliver_at);

    let stats = s::must(b.get_queue(&q).await, "get_queue").stats;
    assert_eq!(
        (stats.scheduled, stats.ready, stats.leased, stats.dead),
        (0, 0, 0, 0),
        "retained messages are not counted"
    );
    for state in MessageState::ALL {
        let listed = s::must(
            b.list(
                &q,
                ListQuery {
                    state,
                    after: None,
                    limit: 100,
                },
            )
            .await,
            "list",
        );
        assert!(
            listed.is_empty(),
            "{state}: retained messages are not listed: {listed:?}"
        );
    }
    assert!(lease(&b, &q, 10, 0).await.is_empty(), "never delivered");

    let again = put(&b, &q, req(Some("acked"), Schedule::Now, "other")).await;
    let batch = s::must(
        b.enqueue(
            &q,
            vec![req(Some("cancelled"), Schedule::Now, "other")],
            EnqueueOptions::default(),
        )
        .await,
        "batch",
    );
    let in_window = s::now_ms() < ended.min(c.ended_at.unwrap_or(0)) + RETAIN_MS;
    if in_window {
        assert!(!again.created, "a retained id is a duplicate for keep");
        assert_eq!((again.seq, again.deliver_at), (acked.seq, m.deliver_at));
        let item = s::must(batch.into_iter().next().expect("one result"), "batch item");
        assert!(
            !item.created,
            "a batch item with a retained id is a duplicate"
        );
        assert_eq!(item.seq, cancelled.seq);
        assert_eq!(
            get(&b, &q, &acked.id).await.state,
            MessageState::Acked,
            "unchanged"
        );
        s::assert_not_found(
            b.ack(&q, &d.id, &d.lease_id).await,
            "ack of a retained message",
        );
        s::assert_not_found(
            b.cancel(&q, &acked.id).await,
            "cancel of a retained message",
        );
        let change = crate::message::Reschedule {
            priority: Some(1),
            ..Default::default()
        };
        s::assert_not_found(b.reschedule(&q, &acked.id, change).await, "reschedule");
    }
}

/// A retained id is kept until `ended_at + retain_ms` and free from then
/// on: `get` is 404 and an enqueue of it creates a new message.
pub async fn retention_frees_the_id_at_its_time(b: Arc<dyn Broker>) {
    let q = retaining_queue(&b, "retention_frees_the_id_at_its_time", RETAIN_MS).await;
    let first = put_now(&b, &q, "x").await;
    let d = lease_one(&b, &q, None).await;
    s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
    let ended = get(&b, &q, &first.id).await.ended_at.expect("ended_at");
    let until = ended + RETAIN_MS;
    // Just before its time (only judged when the broker's clock is there).
    sleep_past(until.saturating_sub(50)).await;
    let m = b.get(&q, &first.id).await;
    if s::now_ms() < until {
        assert!(m.is_ok(), "retained until {until}: {m:?}");
    }
    sleep_past(until).await;
    s::assert_not_found(b.get(&q, &first.id).await, "get after the window");
    let second = put_now(&b, &q, "x").await;
    assert!(second.created, "the id is free after the window");
    assert!(second.seq > first.seq, "a new message, a new seq");
    assert_eq!(get(&b, &q, &second.id).await.state, MessageState::Ready);
}

/// A dead message cancelled is retained as `cancelled`; retention applies
/// to messages that end after the queue got it, the window fixed at the
/// end; a deleted queue takes its retained messages with it; `retain_ms`
/// over 30 days is refused, naming the field.
pub async fn retention_dead_config_and_delete(b: Arc<dyn Broker>) {
    let q = retaining_queue(&b, "retention_dead_config_and_delete", RETAIN_MS).await;
    let patch = QueueConfigPatch {
        max_attempts: Some(1),
        ..QueueConfigPatch::default()
    };
    s::must(b.put_queue(&q, patch).await, "put_queue");
    let dead = put_now(&b, &q, "dead").await;
    s::nack_times(&b, &q, &dead.id, 1).await;
    assert_eq!(get(&b, &q, &dead.id).await.state, MessageState::Dead);
    s::must(b.cancel(&q, &dead.id).await, "cancel dead");
    let m = get(&b, &q, &dead.id).await;
    assert_eq!(m.state, MessageState::Cancelled);
    assert_eq!(m.died_at, None, "an ended message is not dead");

    let too_long = QueueConfigPatch {
        retain_ms: Some(QueueConfig::MAX_RETAIN_MS + 1),
        ..QueueConfigPatch::default()
    };
    match b.put_queue(&q, too_long).await {
        Err(BrokerError::InvalidArgument(text)) => {
            assert!(text.contains("retain_ms"), "names the field: {text}");
        }
        other => panic!("retain_ms over 30 days must be refused, got {other:?}"),
    }
    assert_eq!(
        s::must(b.get_queue(&q).await, "get_queue").config.retain_ms,
        RETAIN_MS
    );

    s::must(b.delete_queue(&q).await, "delete_queue");
    s::must(
        b.put_queue(&q, QueueConfigPatch::default()).await,
        "create again",
    );
    s::assert_not_found(
        b.get(&q, &dead.id).await,
        "a retained message of a deleted queue",
    );
    assert!(put_now(&b, &q, "dead").await.created, "its id is free");

    // Without retention an end frees the id at once (as before).
    let plain = s::queue("retention_dead_config_and_delete", "plain");
    let x = put_now(&b, &plain, "x").await;
    s::must(b.cancel(&plain, &x.id).await, "cancel");
    s::assert_not_found(b.get(&plain, &x.id).await, "retain_ms 0 keeps nothing");
}
