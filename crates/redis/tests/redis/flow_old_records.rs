//! Records written by older versions read as new ones with the later
//! fields at their defaults, and go through the transitions like new ones:
//! before flow control (17 fields, no key, no deferral count), before
//! `last_error` (19 fields) and before retention (20 fields, no
//! `ended_at`/`until`). Each golden record is the layout `lua/common.lua`
//! wrote then, with its defaults trimmed as `pack` does. The retained
//! record (22 fields, its own key `T:rt:<id>`) has golden tests of its own:
//! what an ack writes is exactly that layout, and a hand-written one reads
//! as retained until its `until`, whether or not Redis has expired it.
//! Records written before history (no tail after the packed record) read
//! with an empty history and start one at their next transition; the
//! tail's encoding (docs/redis.md, "History") has golden bytes here.
//! A leased record with a successor (a replace or debounce while leased)
//! stores it as its 23rd field, a nested array: what the enqueue writes is
//! exactly that layout, and hand-written ones are taken at a nack, an ack
//! and a cancel as the model takes them.

use crate::support::{broker, shared_single, unique_prefix, RedisServer};
use delayd_core::{
    Broker, Clock, DeathReason, DeferReason, EnqueueOptions, EnqueueRequest, Event, EventKind,
    FlowConfig, History, LeaseId, LeaseRequest, MessageId, MessageState, Nack, QueueConfigPatch,
    QueueName, SystemClock, Via,
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
    assert_eq!(
        node.events(&q, &m1).await.expect("events"),
        History::default(),
        "retained before history: an empty one"
    );

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
    let history = node.events(&q, &m2).await;
    assert!(
        matches!(
            history,
            Err(delayd_core::BrokerError::MessageNotFound { .. })
        ),
        "the history of a record past its until: {history:?}"
    );
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

/// The stored value under `key` (a hash field when `field` is given) after
/// its packed record, in hex: the history's tail (`''`: none).
fn stored_tail(server: &RedisServer, key: &str, field: Option<&str>) -> String {
    let script = "local v if ARGV[1] then v = redis.call('HGET', KEYS[1], ARGV[1]) \
                  else v = redis.call('GET', KEYS[1]) end \
                  local o = cmsgpack.unpack_one(v) if o < 0 then return '' end \
                  return (v:sub(o + 1):gsub('.', function(c) \
                  return string.format('%02x', c:byte()) end))";
    let mut args = vec!["EVAL", script, "1", key];
    args.extend(field);
    server.cli(&args).trim().to_owned()
}

/// msgpack of a non-negative integer as cmsgpack writes it, in hex.
fn mp_uint(v: u64) -> String {
    match v {
        0..=0x7f => format!("{v:02x}"),
        0x80..=0xff => format!("cc{v:02x}"),
        0x100..=0xffff => format!("cd{v:04x}"),
        0x1_0000..=0xffff_ffff => format!("ce{v:08x}"),
        _ => format!("cf{v:016x}"),
    }
}

/// A record without history (what every version before it wrote: the
/// packed record alone) reads with an empty history; its next transitions
/// start one, exactly as the tail's golden bytes say: the count, then each
/// event `[code, at - enqueued_at, attempt, extra...]`. Retained at its
/// ack, the history goes with the record into its own key; a new enqueue
/// stores the one `enqueued` event.
#[tokio::test]
async fn a_record_without_history_reads_an_empty_one_and_starts_one() {
    // The 20-field layout of a live record (before and after retention),
    // enqueued at 1000, attempts 1, releases 1, last_error "boom".
    let (server, node, q, prefix, id) = with_old_record_in(
        "{7, 'S', 1000, 0, 1024, 'hi', '', 1, '', '', '', '', '', 0, 1, 0, 0, '', 0, 'boom'}",
    )
    .await;
    assert_eq!(
        node.events(&q, &id).await.expect("events"),
        History::default()
    );
    let tag = prefix.tag();
    let msg = format!("{tag}:msg");
    assert_eq!(stored_tail(server, &msg, Some("m1")), "", "no tail yet");

    node.put_queue(&q, retaining(60_000)).await.expect("retain");
    let lease = LeaseRequest {
        max: 1,
        wait_ms: 0,
        lease_ms: Some(30_000),
    };
    let got = node
        .lease(std::slice::from_ref(&q), lease)
        .await
        .expect("lease");
    assert_eq!(got.len(), 1, "{got:?}");
    let h = node.events(&q, &id).await.expect("events");
    let leased_at = got[0].lease_until - 30_000;
    let leased = Event {
        at: leased_at,
        attempt: 2,
        kind: EventKind::Leased {
            lease_until: got[0].lease_until,
            via: Via::Http,
        },
    };
    assert_eq!(h.events, std::slice::from_ref(&leased));
    assert_eq!(h.dropped, 0);
    // 1 event: [3 leased, at - enqueued_at, attempt 2, lease_ms 30000, via http].
    let golden = format!("01 95 03 {} 02 cd7530 00", mp_uint(leased_at - 1000)).replace(' ', "");
    assert_eq!(stored_tail(server, &msg, Some("m1")), golden);

    node.ack(&q, &id, &got[0].lease_id).await.expect("ack");
    let h = node.events(&q, &id).await.expect("events of the retained");
    let acked_at = node
        .get(&q, &id)
        .await
        .expect("get")
        .ended_at
        .expect("ended_at");
    let acked = Event {
        at: acked_at,
        attempt: 2,
        kind: EventKind::Acked,
    };
    assert_eq!(h.events, [leased, acked]);
    let key = format!("{tag}:rt:m1");
    let golden = format!(
        "02 95 03 {} 02 cd7530 00 93 04 {} 02",
        mp_uint(leased_at - 1000),
        mp_uint(acked_at - 1000)
    )
    .replace(' ', "");
    assert_eq!(stored_tail(server, &key, None), golden, "retained with it");

    let fresh = node
        .enqueue(
            &q,
            vec![EnqueueRequest {
                id: Some(MessageId::new("m9").expect("id")),
                ..EnqueueRequest::default()
            }],
            EnqueueOptions::default(),
        )
        .await
        .expect("enqueue")
        .remove(0)
        .expect("item");
    assert!(fresh.created);
    // One event, [0, 0, 0]: enqueued at enqueued_at, attempt 0.
    assert_eq!(stored_tail(server, &msg, Some("m9")), "0193000000");
}

/// A tail written by hand in the documented encoding (what cmsgpack makes
/// of each event's table, negative numbers for "none") reads as exactly
/// those events, with the older ones counted as dropped; the next event
/// drops the oldest kept one once 32 are kept.
#[tokio::test]
async fn a_golden_history_tail_reads_as_its_events() {
    let (server, node, q, prefix) = old_queue(QueueConfigPatch::default()).await;
    let tag = prefix.tag();
    // Enqueued at 1000 (deliver_at 1000, offset 0), pending, attempts 2.
    let mut events = vec![
        "{0, 0, 0}",
        "{2, 5, 0}",
        "{3, 10, 1, 30000, 1}",
        "{5, 20, 1, -1}",
        "{3, 30, 2, 500, 2}",
        "{8, 40, 2, -1, 'refused', 12}",
        "{6, 50, 1, 250, 2}",
        "{7, 60, 1}",
        "{9, 70, 1, 1}",
        "{10, 80, 0}",
        "{5, 90, 2, 0, 'boom'}",
        "{9, 100, 2, 2}",
        "{11, -5, 2}",
        "{1, 110, 0, 1}",
        "{4, 120, 2}",
    ];
    let named: Vec<(u64, u32, EventKind)> = vec![
        (1000, 0, EventKind::Enqueued),
        (1005, 0, EventKind::Rescheduled),
        (
            1010,
            1,
            EventKind::Leased {
                lease_until: 31_010,
                via: Via::Beanstalk,
            },
        ),
        (
            1020,
            1,
            EventKind::Nacked {
                delay_ms: None,
                error: None,
            },
        ),
        (
            1030,
            2,
            EventKind::Leased {
                lease_until: 1530,
                via: Via::Push,
            },
        ),
        (
            1040,
            2,
            EventKind::PushFailed {
                status: None,
                error: "refused".into(),
                duration_ms: 12,
            },
        ),
        (
            1050,
            1,
            EventKind::Deferred {
                until: 1300,
                reason: DeferReason::Push503,
            },
        ),
        (1060, 1, EventKind::Expired),
        (
            1070,
            1,
            EventKind::Dead {
                reason: DeathReason::MaxDeferrals,
            },
        ),
        (1080, 0, EventKind::Redriven),
        (
            1090,
            2,
            EventKind::Nacked {
                delay_ms: Some(0),
                error: Some("boom".into()),
            },
        ),
        (
            1100,
            2,
            EventKind::Dead {
                reason: DeathReason::Buried,
            },
        ),
        (995, 2, EventKind::Cancelled),
        (1110, 0, EventKind::Replaced { after_lease: true }),
        (1120, 2, EventKind::Acked),
    ];
    // Padded to 32 kept events (of 40 ever) with reschedules.
    while events.len() < 32 {
        events.push("{2, 200, 2}");
    }
    let tail: Vec<String> = events
        .iter()
        .map(|e| format!("cmsgpack.pack({e})"))
        .collect();
    let script = format!(
        "redis.call('HSET', KEYS[1], 'm1', cmsgpack.pack({{7, 'S', 9000, 8000, 1024, 'hi', '', 2}}) \
         .. cmsgpack.pack(40) .. {}) \
         redis.call('ZADD', KEYS[2], 9000, struct.pack('>I8I4', 7, 1024) .. 'm1') return 1",
        tail.join(" .. ")
    );
    let (msg, sched) = (format!("{tag}:msg"), format!("{tag}:sched"));
    let out = server.cli(&["EVAL", &script, "2", &msg, &sched]);
    assert_eq!(out.trim(), "1", "golden record written: {out}");

    let id = MessageId::new("m1").expect("id");
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!((m.enqueued_at, m.attempts), (1000, 2), "{m:?}");
    let h = node.events(&q, &id).await.expect("events");
    assert_eq!(h.dropped, 8);
    assert_eq!(h.events.len(), 32);
    let got: Vec<(u64, u32, EventKind)> = h
        .events
        .iter()
        .take(named.len())
        .map(|e| (e.at, e.attempt, e.kind.clone()))
        .collect();
    assert_eq!(got, named);

    // One more: the enqueued event goes, the count goes on.
    let change = delayd_core::Reschedule {
        schedule: None,
        priority: Some(5),
    };
    node.reschedule(&q, &id, change).await.expect("reschedule");
    let h = node.events(&q, &id).await.expect("events");
    assert_eq!((h.events.len(), h.dropped), (32, 9));
    assert_eq!(h.events[0].kind, EventKind::Rescheduled);
    assert_eq!(h.events[0].at, 1005);
    let last = h.events.last().expect("an event");
    assert_eq!(
        (last.kind.clone(), last.attempt),
        (EventKind::Rescheduled, 2)
    );
}

/// The stored record of `id` in the hash `msg`: its field count, then the
/// fields of its successor (field 23) one a line, `-` when it has none.
fn stored_successor(server: &RedisServer, msg: &str, id: &str) -> (usize, Vec<String>) {
    let script = "local _, t = cmsgpack.unpack_one(redis.call('HGET', KEYS[1], ARGV[1])) \
                  local out = {tostring(#t)} \
                  if type(t[23]) == 'table' then \
                  for _, v in ipairs(t[23]) do out[#out + 1] = tostring(v) end \
                  else out[#out + 1] = '-' end return out";
    let out = server.cli(&["EVAL", script, "1", msg, id]);
    let mut lines = out.lines().map(str::to_owned);
    let n = lines
        .next()
        .and_then(|l| l.parse().ok())
        .expect("field count");
    (n, lines.collect())
}

/// What a replace of a leased message stores: the record's 23 fields, the
/// two retention fields `''`, the successor as {payload, headers, priority,
/// max_attempts, lease_ms, key, deliver_at, since}; a later debounce
/// overwrites it, its cap counted from the first request's `since`. The
/// ack enqueues it as a new message whose record has no successor field.
#[tokio::test]
async fn a_successor_is_stored_in_the_record_as_its_23rd_field() {
    let (server, node, q, prefix) = old_queue(QueueConfigPatch::default()).await;
    let msg = format!("{}:msg", prefix.tag());
    let id = MessageId::new("m1").expect("id");
    let put = |request: EnqueueRequest| {
        let node = &node;
        let q = &q;
        async move {
            node.enqueue(q, vec![request], EnqueueOptions::default())
                .await
                .expect("enqueue")
                .remove(0)
                .expect("item")
        }
    };
    let first = put(EnqueueRequest {
        id: Some(id.clone()),
        payload: b"v1".to_vec(),
        ..EnqueueRequest::default()
    })
    .await;
    let lease = LeaseRequest {
        max: 1,
        wait_ms: 0,
        lease_ms: Some(60_000),
    };
    let got = node
        .lease(std::slice::from_ref(&q), lease)
        .await
        .expect("lease");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(stored_successor(server, &msg, "m1").1, ["-"], "none yet");

    let at = SystemClock.now_ms() + 60_000;
    let replace = EnqueueRequest {
        id: Some(id.clone()),
        schedule: delayd_core::Schedule::At(at),
        priority: Some(7),
        headers: [("h".to_owned(), "v".to_owned())].into(),
        payload: b"v2".to_vec(),
        max_attempts: Some(3),
        lease_ms: Some(500),
        key: Some(delayd_core::FlowKey::new("k").expect("key")),
        on_conflict: delayd_core::OnConflict::Replace,
        ..EnqueueRequest::default()
    };
    let out = put(replace.clone()).await;
    assert!(out.replaced && out.after_lease, "{out:?}");
    let (n, fields) = stored_successor(server, &msg, "m1");
    assert_eq!(n, 23, "the record with its successor");
    let since: u64 = fields[7].parse().expect("since");
    assert_eq!(
        fields[..7],
        ["v2", "{\"h\":\"v\"}", "7", "3", "500", "k", &at.to_string()],
        "the successor's layout"
    );
    let record = stored_fields_of(server, &msg, "m1");
    assert_eq!((record[20].as_str(), record[21].as_str()), ("", ""));

    // A debounce overwrites it; its cap runs from the first request.
    let debounce = EnqueueRequest {
        schedule: delayd_core::Schedule::At(at + 5_000),
        payload: b"v3".to_vec(),
        on_conflict: delayd_core::OnConflict::Debounce,
        debounce_max_ms: Some(1_000),
        ..replace
    };
    let out = put(debounce).await;
    assert_eq!((out.deliver_at, out.after_lease), (since + 1_000, true));
    let fields = stored_successor(server, &msg, "m1").1;
    assert_eq!(fields[0], "v3");
    assert_eq!(
        fields[6..],
        [(since + 1_000).to_string(), since.to_string()],
        "due at the cap, since kept"
    );
    let m = node.get(&q, &id).await.expect("get");
    assert_eq!(
        (m.state, m.payload.as_slice()),
        (MessageState::Leased, b"v1".as_slice())
    );

    let before = SystemClock.now_ms();
    node.ack(&q, &id, &got[0].lease_id).await.expect("ack");
    let m = node.get(&q, &id).await.expect("get the successor");
    assert!(m.seq > first.seq, "{m:?}");
    assert!(m.enqueued_at >= before, "{m:?}");
    assert_eq!(
        (m.payload.as_slice(), m.priority, m.max_attempts, m.lease_ms),
        (b"v3".as_slice(), 7, Some(3), Some(500))
    );
    assert_eq!((m.deliver_at, m.attempts), (since + 1_000, 0));
    assert_eq!(m.key.as_ref().map(|k| k.as_str()), Some("k"));
    let (n, fields) = stored_successor(server, &msg, "m1");
    assert!(n < 21, "a new record without a successor: {n}");
    assert_eq!(fields, ["-"]);
    assert_eq!(
        node.get_by_seq(m.seq)
            .await
            .expect("get_by_seq")
            .map(|m| m.id),
        Some(id.clone()),
        "the new seq is indexed"
    );
}

/// A hand-written leased record with a successor (the 23-field layout,
/// the successor {payload, headers, priority, max_attempts, lease_ms, key,
/// deliver_at, since}): a nack gives the message the successor's content
/// and the later due time (its seq and attempts stay); an ack enqueues the
/// successor as a new message; a cancel on a retaining queue drops it (the
/// retained record has no 23rd field).
#[tokio::test]
async fn a_golden_record_with_a_successor_is_taken_at_the_lease_end() {
    let (server, node, q, prefix) = old_queue(retaining(60_000)).await;
    let tag = prefix.tag();
    let now = SystemClock.now_ms();
    let until = now + 60_000;
    // seq 7/8/9, leased (lease id `l<seq>`, until `until`), deliver_at
    // 1000 (enqueued at 1000), priority 1024, payload "hi", attempts 1, no
    // key; the two retention fields '', then the successor: payload
    // "next", headers {"s":"1"}, priority 5, max_attempts 4, no lease_ms,
    // key "k2", due at 2000, since 900.
    let record = |seq: u64| {
        format!(
            "cmsgpack.pack({{{seq}, 'L', 1000, 0, 1024, 'hi', '', 1, '', '', {until}, 'l{seq}', '', \
             0, 0, 0, 0, '', 0, '', '', '', {{'next', '{{\"s\":\"1\"}}', 5, 4, '', 'k2', 2000, 900}}}})"
        )
    };
    let script = format!(
        "for i, id in ipairs({{'m1', 'm2', 'm3'}}) do \
         local seq = 6 + i \
         local v = ({{{}, {}, {}}})[i] \
         redis.call('HSET', KEYS[1], id, v) \
         redis.call('ZADD', KEYS[2], {until}, struct.pack('>I8', seq) .. id) end \
         redis.call('HSET', KEYS[3], 'sl', 9) redis.call('SET', KEYS[4], 9) return 1",
        record(7),
        record(8),
        record(9)
    );
    // The shard issued seqs up to 9, the deployment's counter as well.
    let (msg, lease) = (format!("{tag}:msg"), format!("{tag}:lease"));
    let (cfg, seq) = (format!("{tag}:cfg"), format!("{{{}}}:seq", prefix.0));
    let out = server.cli(&["EVAL", &script, "4", &msg, &lease, &cfg, &seq]);
    assert_eq!(out.trim(), "1", "golden records written: {out}");

    // Nack: the successor's content, due at the later of now and 2000.
    let m1 = MessageId::new("m1").expect("id");
    let nack = Nack {
        delay_ms: Some(0),
        ..Nack::default()
    };
    node.nack(&q, &m1, &LeaseId("l7".into()), nack)
        .await
        .expect("nack");
    let m = node.get(&q, &m1).await.expect("get");
    assert_eq!(
        (m.seq, m.attempts, m.state, m.payload.as_slice(), m.priority),
        (7, 1, MessageState::Ready, b"next".as_slice(), 5),
        "{m:?}"
    );
    assert_eq!((m.max_attempts, m.lease_ms), (Some(4), None));
    assert_eq!(m.headers.get("s").map(String::as_str), Some("1"));
    assert_eq!(m.key.as_ref().map(|k| k.as_str()), Some("k2"));
    assert!(m.deliver_at >= now, "due at the retry, after 2000: {m:?}");
    assert_eq!(stored_successor(server, &msg, "m1").1, ["-"]);

    // Ack: a new message with the id, due at 2000 (ready), not retained.
    let m2 = MessageId::new("m2").expect("id");
    node.ack(&q, &m2, &LeaseId("l8".into())).await.expect("ack");
    let m = node.get(&q, &m2).await.expect("get the successor");
    assert!(m.seq > 9, "a fresh seq: {m:?}");
    assert_eq!(
        (m.state, m.attempts, m.deliver_at, m.payload.as_slice()),
        (MessageState::Ready, 0, 2000, b"next".as_slice()),
        "{m:?}"
    );
    let history = node.events(&q, &m2).await.expect("events");
    assert_eq!(
        history
            .events
            .iter()
            .map(|e| e.kind.clone())
            .collect::<Vec<_>>(),
        [EventKind::Enqueued]
    );
    let retained = server.cli(&["EXISTS", &format!("{tag}:rt:m2")]);
    assert_eq!(retained.trim(), "0", "its id is live again: not retained");

    // Cancel: retained without the successor.
    let m3 = MessageId::new("m3").expect("id");
    node.cancel(&q, &m3).await.expect("cancel");
    let m = node.get(&q, &m3).await.expect("get retained");
    assert_eq!(
        (m.state, m.payload.as_slice()),
        (MessageState::Cancelled, b"".as_slice())
    );
    let kept = stored_fields(server, &format!("{tag}:rt:m3"));
    assert_eq!(
        kept.len(),
        22,
        "the retained layout, no successor: {kept:?}"
    );

    // Two of three messages live; the flow key counts follow the content.
    let stats = node.get_queue(&q).await.expect("get_queue").stats;
    assert_eq!((stats.ready, stats.leased), (2, 0), "{stats:?}");
    let k2 = node
        .key_info(&q, &delayd_core::FlowKey::new("k2").expect("key"))
        .await
        .expect("key_info");
    assert_eq!((k2.ready, k2.leased), (2, 0), "{k2:?}");
}

/// The fields of the record in field `id` of the hash `msg`, printed one a
/// line (a nested successor as redis-cli prints a table: not compared).
fn stored_fields_of(server: &RedisServer, msg: &str, id: &str) -> Vec<String> {
    let script = "local _, t = cmsgpack.unpack_one(redis.call('HGET', KEYS[1], ARGV[1])) \
                  local out = {} for i = 1, 22 do out[i] = tostring(t[i]) end return out";
    let out = server.cli(&["EVAL", script, "1", msg, id]);
    out.lines().map(str::to_owned).collect()
}
