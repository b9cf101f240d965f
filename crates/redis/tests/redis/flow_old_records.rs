//! Records written by older versions read as new ones with the later
//! fields at their defaults, and go through the transitions like new ones:
//! before flow control (17 fields, no key, no deferral count), before
//! `last_error` (19 fields) and before retention (20 fields, no
//! `ended_at`/`until`). Each golden record is the layout `lua/common.lua`
//! wrote then, with its defaults trimmed as `pack` does. The retained
//! record (22 fields, its own key `T:rt:<id>`) has golden tests of its own:
//! what an ack writes is exactly that layout, and a hand-written one reads
//! as retained until its `until`, whether or not Redis has expired it.

use crate::support::{broker, shared_single, unique_prefix, RedisServer};
use delayd_core::{
    Broker, Clock, EnqueueOptions, EnqueueRequest, FlowConfig, LeaseRequest, MessageId,
    MessageState, Nack, QueueConfigPatch, QueueName, SystemClock,
};
use delayd_redis::RedisBroker;

/// A node on a fresh prefix whose queue `old` holds message `m1` (seq 7,
/// due at 1000, priority 1024) stored as the Lua table `fields`.
async fn with_old_record(fields: &str) -> (RedisBroker, QueueName, MessageId) {
    let (_, node, q, _, id) = with_old_record_in(fields).await;
    (node, q, id)
}

/// [`with_old_record`], also answering the node's key prefix and the
/// queue shard's hash tag.
async fn with_old_record_in(
    fields: &str,
) -> (
    &'static RedisServer,
    RedisBroker,
    QueueName,
    Prefix,
    MessageId,
) {
    let (server, node, q, prefix) = old_queue(QueueConfigPatch::default()).await;
    let tag = prefix.tag();
    let script = format!(
        "redis.call('HSET', KEYS[1], 'm1', cmsgpack.pack({fields})) \
         redis.call('ZADD', KEYS[2], 1024, struct.pack('>I8I8', 1000, 7) .. 'm1') return 1"
    );
    let msg = format!("{tag}:msg");
    let ready = format!("{tag}:ready");
    let out = server.cli(&["EVAL", &script, "2", &msg, &ready]);
    assert_eq!(out.trim(), "1", "golden record written: {out}");
    (server, node, q, prefix, MessageId::new("m1").expect("id"))
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

/// A test node's key prefix.
struct Prefix(String);

impl Prefix {
    /// The hash tag of queue `old`'s one shard.
    fn tag(&self) -> String {
        format!("{{{}:old#0}}", self.0)
    }
}

/// A node on a fresh prefix with the empty queue `old`, configured by
/// `patch`.
async fn old_queue(
    patch: QueueConfigPatch,
) -> (&'static RedisServer, RedisBroker, QueueName, Prefix) {
    let server = shared_single();
    let prefix = unique_prefix();
    let node = broker(vec![server.url()], 1, &prefix).await;
    let q = QueueName::new("old").expect("queue");
    node.put_queue(&q, patch).await.expect("put_queue");
    (server, node, q, Prefix(prefix))
}

/// The stored record under `key` (a retained record's own key), unpacked
/// and printed one field a line by redis-cli.
fn stored_fields(server: &RedisServer, key: &str) -> Vec<String> {
    let script = "local t = cmsgpack.unpack(redis.call('GET', KEYS[1])) \
                  for i, v in ipairs(t) do t[i] = tostring(v) end return t";
    let out = server.cli(&["EVAL", script, "1", key]);
    out.lines().map(str::to_owned).collect()
}

fn retaining(ms: u64) -> QueueConfigPatch {
    QueueConfigPatch {
        retain_ms: Some(ms),
        ..QueueConfigPatch::default()
    }
}

/// A record written before retention (20 fields, ending at `last_error`)
/// reads as live with no `ended_at`; acked on a queue that retains, it is
/// stored as the retained layout (all 22 fields, the payload, lease and
/// death cleared, the rest kept), under its own key with a TTL of the
/// window plus the margin, and listed in the shard's `retained` index.
#[tokio::test]
async fn a_record_before_retention_reads_as_live_and_is_retained_at_its_end() {
    // seq 7, pending, deliver_at 1000 (enqueued at 1000), priority 1024,
    // payload "hi", no headers, attempts 1, releases 1, no key, no
    // deferrals, last_error "boom": all 20 fields of the layout before
    // retention.
    let (server, node, q, prefix, id) = with_old_record_in(
        "{7, 'S', 1000, 0, 1024, 'hi', '', 1, '', '', '', '', '', 0, 1, 0, 0, '', 0, 'boom'}",
    )
    .await;
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!(
        (m.state, m.ended_at, m.last_error.as_deref()),
        (MessageState::Ready, None, Some("boom")),
        "{m:?}"
    );
    node.put_queue(&q, retaining(60_000)).await.expect("retain");
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
    let before = SystemClock.now_ms();
    node.ack(&q, &id, &got[0].lease_id).await.expect("ack");
    let after = SystemClock.now_ms();

    let m = node.get(&q, &id).await.expect("get retained");
    let ended = m.ended_at.expect("ended_at");
    assert!(
        (before..=after).contains(&ended),
        "{ended} in {before}..={after}"
    );
    assert_eq!(
        (m.state, m.seq, m.attempts, m.payload.len(), m.lease_until),
        (MessageState::Acked, 7, 2, 0, None),
        "{m:?}"
    );
    assert_eq!(m.last_error.as_deref(), Some("boom"));
    assert_eq!((m.enqueued_at, m.counters.releases), (1000, 1));

    let tag = prefix.tag();
    let key = format!("{tag}:rt:m1");
    let until = ended + 60_000;
    let golden: Vec<String> = [
        "7", "A", "1000", "0", "1024", "", "", "2", "", "", "", "", "", "0", "1", "0", "0", "",
        "0", "boom",
    ]
    .iter()
    .map(|f| (*f).to_owned())
    .chain([ended.to_string(), until.to_string()])
    .collect();
    assert_eq!(stored_fields(server, &key), golden, "the retained layout");
    let ttl: u64 = server.cli(&["PTTL", &key]).trim().parse().expect("PTTL");
    assert!(
        ttl > 118_000 && ttl <= 120_000,
        "expires after the window plus the margin: {ttl}"
    );
    let score = server.cli(&["ZSCORE", &format!("{tag}:retained"), "m1"]);
    assert_eq!(score.trim(), until.to_string(), "indexed by until");
    let live = server.cli(&["HEXISTS", &format!("{tag}:msg"), "m1"]);
    assert_eq!(live.trim(), "0", "no longer a live record");
}

/// Hand-written retained records (the 22-field layout): one within its
/// window reads as retained and holds its id; one whose `until` has passed
/// is gone for every call even though Redis still holds the key (it has no
/// TTL here), and its id is free; `get_by_seq` never finds a retained one;
/// `delete_queue` deletes the retained keys with the queue.
#[tokio::test]
async fn a_golden_retained_record_reads_until_its_time() {
    let (server, node, q, prefix) = old_queue(retaining(60_000)).await;
    let tag = prefix.tag();
    let now = SystemClock.now_ms();
    let (ended, until) = (now - 5_000, now + 55_000);
    // seq 7, cancelled, deliver_at 1000, enqueued at 900 (offset 100),
    // priority 5, no payload, headers, attempts 0, lease_ms 30, releases
    // 2, key "k", then ended_at and until.
    let fields = |seq: u64, ended: u64, until: u64| {
        format!(
            "{{{seq}, 'C', 1000, 100, 5, '', '{{\"h\":\"v\"}}', 0, '', 30, '', '', '', 0, 2, \
             0, 0, 'k', 0, '', {ended}, {until}}}"
        )
    };
    let script = format!(
        "redis.call('SET', KEYS[1], cmsgpack.pack({})) \
         redis.call('SET', KEYS[2], cmsgpack.pack({})) \
         redis.call('ZADD', KEYS[3], {until}, 'm1', {}, 'm2') \
         redis.call('HSET', KEYS[4], '7', 'old/m1', '8', 'old/m2') return 1",
        fields(7, ended, until),
        fields(8, now - 70_000, now - 10_000),
        now - 10_000,
    );
    let (k1, k2) = (format!("{tag}:rt:m1"), format!("{tag}:rt:m2"));
    let index = format!("{tag}:retained");
    let seqidx = format!("{{{}}}:seqidx:0", prefix.0);
    let out = server.cli(&["EVAL", &script, "4", &k1, &k2, &index, &seqidx]);
    assert_eq!(out.trim(), "1", "golden records written: {out}");

    let m1 = MessageId::new("m1").expect("id");
    let m = node.get(&q, &m1).await.expect("get retained");
    assert_eq!(
        (m.state, m.seq, m.deliver_at, m.enqueued_at, m.priority),
        (MessageState::Cancelled, 7, 1000, 900, 5),
        "{m:?}"
    );
    assert_eq!(
        (m.ended_at, m.lease_ms, m.counters.releases),
        (Some(ended), Some(30), 2)
    );
    assert_eq!(m.key.as_ref().map(|k| k.as_str()), Some("k"));
    assert_eq!(m.headers.get("h").map(String::as_str), Some("v"));
    assert!(m.payload.is_empty());
    let dup = node
        .enqueue(
            &q,
            vec![EnqueueRequest {
                id: Some(m1.clone()),
                ..EnqueueRequest::default()
            }],
            EnqueueOptions::default(),
        )
        .await
        .expect("enqueue")
        .remove(0)
        .expect("item");
    assert_eq!((dup.created, dup.seq, dup.deliver_at), (false, 7, 1000));
    let gone = node.cancel(&q, &m1).await;
    assert!(
        matches!(gone, Err(delayd_core::BrokerError::MessageNotFound { .. })),
        "cancel of a retained message: {gone:?}"
    );
    assert_eq!(node.get_by_seq(7).await.expect("get_by_seq"), None);

    // Past its until: gone at once, though the key is still there.
    let m2 = MessageId::new("m2").expect("id");
    let exists = server.cli(&["EXISTS", &k2]);
    assert_eq!(exists.trim(), "1", "Redis still holds the record");
    let past = node.get(&q, &m2).await;
    assert!(
        matches!(past, Err(delayd_core::BrokerError::MessageNotFound { .. })),
        "a record past its until: {past:?}"
    );
    assert_eq!(node.get_by_seq(8).await.expect("get_by_seq"), None);
    let fresh = node
        .enqueue(
            &q,
            vec![EnqueueRequest {
                id: Some(m2.clone()),
                ..EnqueueRequest::default()
            }],
            EnqueueOptions::default(),
        )
        .await
        .expect("enqueue")
        .remove(0)
        .expect("item");
    assert!(fresh.created, "the id is free at its until: {fresh:?}");
    assert_eq!(
        node.get(&q, &m2).await.expect("get").state,
        MessageState::Ready
    );

    node.delete_queue(&q).await.expect("delete_queue");
    let left = server.cli(&["EXISTS", &k1, &index]);
    assert_eq!(left.trim(), "0", "the retained records go with the queue");
}
