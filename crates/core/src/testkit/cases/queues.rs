//! Queue configuration and lifetime: put (create/merge), get, list,
//! delete, validation, auto-create.

use std::sync::Arc;

use crate::broker::{Broker, Upsert};
use crate::error::BrokerError;
use crate::message::{EnqueueOptions, Schedule};
use crate::model::{QueueConfig, QueueConfigPatch, RetryPolicy};
use crate::testkit::support::{self as s, lease_one, put_now, req};

/// PUT creates (Created, defaults merged with the patch), then merges
/// (Updated; absent fields kept, `retry` replaced whole); get and list
/// show the result.
pub async fn queue_put_merges(b: Arc<dyn Broker>) {
    let q = s::queue("queue_put_merges", "q");
    let create = QueueConfigPatch {
        lease_ms: Some(5_000),
        ..QueueConfigPatch::default()
    };
    let (upsert, info) = s::must(b.put_queue(&q, create).await, "create");
    assert_eq!(upsert, Upsert::Created);
    let expected = QueueConfig {
        lease_ms: 5_000,
        ..QueueConfig::default()
    };
    assert_eq!(info.config, expected, "defaults plus the patch");
    assert!(!info.paused);
    let retry = RetryPolicy {
        initial_ms: 50,
        max_ms: 60_000,
        multiplier: 1.5,
    };
    let update = QueueConfigPatch {
        max_attempts: Some(3),
        retry: Some(retry),
        ..QueueConfigPatch::default()
    };
    let (upsert, info) = s::must(b.put_queue(&q, update).await, "update");
    assert_eq!(upsert, Upsert::Updated);
    let expected = QueueConfig {
        lease_ms: 5_000,
        max_attempts: 3,
        retry,
        push: None,
        flow: None,
        retain_ms: 0,
    };
    assert_eq!(info.config, expected, "merged config");
    assert_eq!(s::must(b.get_queue(&q).await, "get").config, expected);
    let (upsert, _) = s::must(b.put_queue(&q, QueueConfigPatch::default()).await, "noop");
    assert_eq!(upsert, Upsert::Updated, "an empty PUT of an existing queue");
    let all = s::must(b.list_queues().await, "list_queues");
    let listed = all.iter().find(|i| i.name == q);
    assert_eq!(listed.map(|i| &i.config), Some(&expected), "list_queues");
    let names: Vec<_> = all.iter().map(|i| i.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "list_queues is by name");
}

/// An invalid config (retry multiplier < 1) is rejected and changes
/// nothing: an existing queue keeps its config, a new one is not created.
pub async fn queue_invalid_config_changes_nothing(b: Arc<dyn Broker>) {
    let q = s::queue("queue_invalid_config_changes_nothing", "q");
    s::make_queue(&b, &q, 4).await;
    let before = s::must(b.get_queue(&q).await, "get").config;
    let bad = QueueConfigPatch {
        lease_ms: Some(1),
        retry: Some(RetryPolicy {
            multiplier: 0.5,
            ..RetryPolicy::default()
        }),
        ..QueueConfigPatch::default()
    };
    let r = b.put_queue(&q, bad.clone()).await;
    assert!(
        matches!(r, Err(BrokerError::InvalidArgument(_))),
        "got {r:?}"
    );
    assert_eq!(s::must(b.get_queue(&q).await, "get").config, before);
    let fresh = s::queue("queue_invalid_config_changes_nothing", "new");
    let r = b.put_queue(&fresh, bad).await;
    assert!(
        matches!(r, Err(BrokerError::InvalidArgument(_))),
        "got {r:?}"
    );
    s::assert_queue_not_found(b.get_queue(&fresh).await, "rejected create");
}

/// Delete removes the queue and its messages: ids are free, leases are
/// invalid; deleting again (or an unknown queue) is `QueueNotFound`.
pub async fn queue_delete_removes_messages(b: Arc<dyn Broker>) {
    let q = s::queue("queue_delete_removes_messages", "q");
    s::make_queue(&b, &q, 10).await;
    let leased = put_now(&b, &q, "leased").await;
    let d = lease_one(&b, &q, None).await;
    let ready = put_now(&b, &q, "ready").await;
    s::must(b.delete_queue(&q).await, "delete");
    s::assert_queue_not_found(b.get_queue(&q).await, "get_queue after delete");
    s::assert_not_found(b.get(&q, &ready.id).await, "message after delete");
    s::assert_queue_not_found(b.delete_queue(&q).await, "second delete");
    s::assert_not_found(b.ack(&q, &leased.id, &d.lease_id).await, "ack after delete");
    let again = put_now(&b, &q, "ready").await;
    assert!(again.created, "ids are free after delete");
    let info = s::must(b.get_queue(&q).await, "recreated by enqueue");
    assert_eq!(
        info.config,
        QueueConfig::default(),
        "recreated with defaults"
    );
    assert_eq!(info.stats.ready, 1, "old messages are gone");
}

/// With `auto_create: false`, enqueue to an unknown queue is
/// `QueueNotFound` and creates nothing; to an existing queue it works.
pub async fn enqueue_without_auto_create(b: Arc<dyn Broker>) {
    let q = s::queue("enqueue_without_auto_create", "q");
    let strict = EnqueueOptions { auto_create: false };
    let r = b
        .enqueue(&q, vec![req(Some("m"), Schedule::Now, "x")], strict)
        .await;
    s::assert_queue_not_found(r, "enqueue to an unknown queue");
    s::assert_queue_not_found(b.get_queue(&q).await, "not created");
    s::make_queue(&b, &q, 10).await;
    let r = s::must(
        b.enqueue(&q, vec![req(Some("m"), Schedule::Now, "x")], strict)
            .await,
        "enqueue to an existing queue",
    );
    assert!(s::must(r[0].clone(), "item").created);
    let auto = s::queue("enqueue_without_auto_create", "auto");
    put_now(&b, &auto, "m").await;
    let info = s::must(b.get_queue(&auto).await, "auto-created");
    assert_eq!(info.config, QueueConfig::default());
}
