//! Records written by older versions read as new ones with the later
//! fields at their defaults, and go through the transitions like new ones:
//! before flow control (17 fields, no key, no deferral count) and before
//! `last_error` (19 fields). Each golden record is the layout
//! `lua/common.lua` wrote then, with its defaults trimmed as `pack` does.

use crate::support::{broker, shared_single, unique_prefix};
use delayd_core::{
    Broker, FlowConfig, LeaseRequest, MessageId, MessageState, Nack, QueueConfigPatch, QueueName,
};
use delayd_redis::RedisBroker;

/// A node on a fresh prefix whose queue `old` holds message `m1` (seq 7,
/// due at 1000, priority 1024) stored as the Lua table `fields`.
async fn with_old_record(fields: &str) -> (RedisBroker, QueueName, MessageId) {
    let server = shared_single();
    let prefix = unique_prefix();
    let node = broker(vec![server.url()], 1, &prefix).await;
    let q = QueueName::new("old").expect("queue");
    node.put_queue(&q, QueueConfigPatch::default())
        .await
        .expect("put_queue");
    let tag = format!("{{{prefix}:old#0}}");
    let script = format!(
        "redis.call('HSET', KEYS[1], 'm1', cmsgpack.pack({fields})) \
         redis.call('ZADD', KEYS[2], 1024, struct.pack('>I8I8', 1000, 7) .. 'm1') return 1"
    );
    let msg = format!("{tag}:msg");
    let ready = format!("{tag}:ready");
    let out = server.cli(&["EVAL", &script, "2", &msg, &ready]);
    assert_eq!(out.trim(), "1", "golden record written: {out}");
    (node, q, MessageId::new("m1").expect("id"))
}

#[tokio::test]
async fn a_record_without_flow_fields_reads_as_no_key() {
    // seq 7, pending, deliver_at 1000 (enqueued at 1000), priority 1024,
    // payload "hi", no headers, attempts 0, max_attempts '', lease_ms '',
    // lease_until '', lease id '', died_at '', counters 0.
    let (node, q, id) =
        with_old_record("{7, 'S', 1000, 0, 1024, 'hi', '', 0, '', '', '', '', '', 0, 0, 0, 0}")
            .await;
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!(
        (m.key.clone(), m.deferrals, m.state, m.payload.as_slice()),
        (None, 0, MessageState::Ready, b"hi".as_slice()),
        "{m:?}"
    );

    // With flow set afterwards, the old message is delivered, deferred and
    // acked as a message without a key.
    let patch = QueueConfigPatch {
        flow: Some(Some(FlowConfig {
            concurrency: Some(1),
            ..FlowConfig::default()
        })),
        ..QueueConfigPatch::default()
    };
    node.put_queue(&q, patch).await.expect("put_queue flow");
    let lease = LeaseRequest {
        max: 5,
        wait_ms: 0,
        lease_ms: None,
    };
    let got = node
        .lease(std::slice::from_ref(&q), lease.clone())
        .await
        .expect("lease");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].key.clone(), got[0].attempt), (None, 1));
    let defer = Nack {
        delay_ms: Some(0),
        defer: true,
        ..Nack::default()
    };
    node.nack(&q, &id, &got[0].lease_id, defer)
        .await
        .expect("defer");
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!((m.attempts, m.deferrals), (0, 1), "{m:?}");
    let again = node
        .lease(std::slice::from_ref(&q), lease)
        .await
        .expect("lease");
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].attempt, 1, "the deferral gave the attempt back");
    node.ack(&q, &id, &again[0].lease_id).await.expect("ack");
    let stats = node.get_queue(&q).await.expect("get_queue").stats;
    assert_eq!(
        (stats.ready, stats.leased, stats.flow_keys),
        (0, 0, 0),
        "{stats:?}"
    );
}

/// A record written before `last_error` (19 fields, ending at the
/// deferrals) reads with none, and takes one from a nack like a new one.
#[tokio::test]
async fn a_record_without_last_error_reads_as_none() {
    // seq 7, pending, deliver_at 1000, priority 1024, payload "hi", no
    // headers, attempts 1 (a failed delivery before), counters 0, no key,
    // 0 deferrals: all 19 fields of the layout before `last_error`.
    let (node, q, id) = with_old_record(
        "{7, 'S', 1000, 0, 1024, 'hi', '', 1, '', '', '', '', '', 0, 1, 0, 0, '', 0}",
    )
    .await;
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!(
        (m.attempts, m.last_error.clone(), m.state),
        (1, None, MessageState::Ready),
        "{m:?}"
    );
    let lease = LeaseRequest {
        max: 1,
        wait_ms: 0,
        lease_ms: None,
    };
    let got = node
        .lease(std::slice::from_ref(&q), lease)
        .await
        .expect("lease");
    assert_eq!(got.len(), 1, "{got:?}");
    let nack = Nack {
        delay_ms: Some(60_000),
        error: Some("smtp 451".into()),
        ..Nack::default()
    };
    node.nack(&q, &id, &got[0].lease_id, nack)
        .await
        .expect("nack");
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!(
        (m.attempts, m.last_error.as_deref()),
        (2, Some("smtp 451")),
        "{m:?}"
    );
}
