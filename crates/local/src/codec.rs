//! Key and value encodings of the store (specified in docs/storage.md).
//!
//! Keys are binary and big-endian so that byte order is the order the
//! broker scans in (due time, then seq). Values carry a format version byte
//! first so that a later format can be read next to this one.

use std::collections::BTreeMap;

use delayd_core::{
    FlowKey, LeaseId, MessageCounters, MessageId, MessageState, QueueConfig, QueueName, QueueStats,
};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Version byte in front of every record value.
pub(crate) const RECORD_VERSION: u8 = 1;
/// Version of the whole on-disk layout, kept in `meta`.
pub(crate) const FORMAT_VERSION: u8 = 1;

pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_SEQ: &[u8] = b"seq_high_water";

/// A message without its payload: what the `messages` keyspace stores and
/// what the broker keeps in memory for messages near their due time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct MessageRecord {
    pub id: MessageId,
    pub seq: u64,
    /// In memory the exact state. On disk `Ready` is written as `Scheduled`:
    /// becoming ready is a function of time, so firing costs no write.
    pub state: MessageState,
    pub deliver_at: u64,
    pub enqueued_at: u64,
    pub priority: u32,
    pub attempts: u32,
    pub max_attempts: Option<u32>,
    pub lease_ms: Option<u64>,
    pub lease_until: Option<u64>,
    pub lease_id: Option<LeaseId>,
    pub died_at: Option<u64>,
    pub counters: MessageCounters,
    pub headers: BTreeMap<String, String>,
    /// The flow key (version 2).
    pub key: Option<FlowKey>,
    /// Deferrals in a row (version 2).
    pub deferrals: u32,
    /// The last failure's text ([`delayd_core::Message::last_error`];
    /// version 3).
    pub last_error: Option<Box<str>>,
    /// Events of its history so far (version 4): event 0 is the implied
    /// `enqueued`, the latest is `last`, the others of the last
    /// [`delayd_core::HISTORY_LEN`] are in the `events` keyspace under
    /// `[seq][n]` (module `history`).
    pub events: u32,
    /// Its latest event once it had one after the enqueue (version 4).
    pub last: Option<Box<delayd_core::Event>>,
}

impl MessageRecord {
    /// Whether it holds its flow key ([`delayd_core::Message::holds_key`]):
    /// delivered before and back, not dead.
    pub fn holds_key(&self) -> bool {
        self.key.is_some()
            && self.state != MessageState::Dead
            && (self.attempts > 0 || self.deferrals > 0)
    }

    /// The state as persisted (see [`MessageRecord::state`]).
    pub fn stored_state(&self) -> MessageState {
        match self.state {
            MessageState::Ready => MessageState::Scheduled,
            other => other,
        }
    }
}

/// Persisted counts of a queue's messages. `waiting` is scheduled + ready,
/// because the split moves with time and is recomputed in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredCounts {
    pub waiting: u64,
    pub leased: u64,
    pub dead: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct QueueRecord {
    pub config: QueueConfig,
    /// `Some(u64::MAX)`: paused until resumed.
    pub paused_until: Option<u64>,
    pub counts: StoredCounts,
    /// The latest time any of the queue's retained messages is kept until
    /// (0: none ever; version 4). Before it an enqueue with an id looks
    /// for a retained one on disk; after it nothing is retained.
    pub retained_until: u64,
}

/// An ended message kept for its queue's `retain_ms` (the `retained`
/// keyspace): its record without the payload (state `Acked` or
/// `Cancelled`, lease and death cleared), when it ended, and until when
/// it is kept. The `expiry` index finds it at `until`. (The message record
/// is nested in place: a new [`MessageRecord`] version is a new version of
/// this record too.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RetainedRecord {
    pub message: MessageRecord,
    pub ended_at: u64,
    pub until: u64,
}

impl RetainedRecord {
    /// `rec` ended at `now` as `how`, kept until `until`.
    pub fn new(rec: &MessageRecord, how: MessageState, now: u64, until: u64) -> Self {
        let mut message = rec.clone();
        message.state = how;
        message.lease_until = None;
        message.lease_id = None;
        message.died_at = None;
        RetainedRecord {
            message,
            ended_at: now,
            until,
        }
    }
}

impl Record for RetainedRecord {}

impl QueueRecord {
    pub fn stats(&self, ready: u64, ready_urgent: u64) -> QueueStats {
        QueueStats {
            cooling_keys: 0,
            flow_keys: 0,
            scheduled: self.counts.waiting.saturating_sub(ready),
            ready,
            leased: self.counts.leased,
            dead: self.counts.dead,
            ready_urgent,
        }
    }
}

/// A record kind stored behind a version byte. A kind whose fields change
/// bumps its own `VERSION` and reads the older layouts in `upgrade`, so a
/// store written by an older delayd opens without a migration step.
pub(crate) trait Record: Serialize + for<'de> Deserialize<'de> {
    const VERSION: u8 = RECORD_VERSION;

    /// Decodes `bytes` written at an older `version` (after the version
    /// byte); `None` when that version is unknown.
    fn upgrade(version: u8, bytes: &[u8]) -> Option<Result<Self, StoreError>> {
        let _ = (version, bytes);
        None
    }
}

/// Version 2 added `key` and `deferrals` (flow control); version 3
/// `last_error`; version 4 `events`.
impl Record for MessageRecord {
    const VERSION: u8 = 4;

    fn upgrade(version: u8, bytes: &[u8]) -> Option<Result<Self, StoreError>> {
        match version {
            1 => Some(postcard_decode::<MessageRecordV1>(bytes).map(MessageRecord::from)),
            2 => Some(postcard_decode::<MessageRecordV2>(bytes).map(MessageRecord::from)),
            3 => Some(postcard_decode::<MessageRecordV3>(bytes).map(MessageRecord::from)),
            _ => None,
        }
    }
}

/// One event of a message's history (the `events` keyspace): the core
/// [`Event`](delayd_core::Event) as postcard writes it (a core type: its
/// serde derives shape these bytes, pinned by `golden`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct EventRecord {
    pub event: delayd_core::Event,
}

impl Record for EventRecord {}

/// The successor of a leased message (the `successors` keyspace, under
/// its message key): the core [`delayd_core::Replacement`] as postcard
/// writes it (a core type: its serde derives shape these bytes, pinned by
/// `golden`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SuccessorRecord {
    pub next: delayd_core::Replacement,
}

impl Record for SuccessorRecord {}

/// The key of event `n` (counted from 0 over the message's life) of the
/// message with `seq`: a message's events are one prefix, in order.
pub(crate) fn event_key(seq: u64, n: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&seq.to_be_bytes());
    key[8..].copy_from_slice(&n.to_be_bytes());
    key
}

/// The (seq, n) of an `events` key.
pub(crate) fn decode_event_key(key: &[u8]) -> Result<(u64, u32), StoreError> {
    let (Some(seq), Some(n)) = (key.get(..8), key.get(8..12)) else {
        return Err(StoreError::Corrupt("short event key".into()));
    };
    if key.len() != 12 {
        return Err(StoreError::Corrupt("event key of the wrong length".into()));
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(seq);
    let mut k = [0u8; 4];
    k.copy_from_slice(n);
    Ok((u64::from_be_bytes(s), u32::from_be_bytes(k)))
}

/// [`MessageRecord`] as version 3 stored it: no history.
#[derive(Deserialize)]
struct MessageRecordV3 {
    v2: MessageRecordV2,
    last_error: Option<Box<str>>,
}

impl From<MessageRecordV3> for MessageRecord {
    fn from(old: MessageRecordV3) -> Self {
        MessageRecord {
            last_error: old.last_error,
            ..MessageRecord::from(old.v2)
        }
    }
}
impl Record for StoredCounts {}

/// Version 2 added `push.headers`; version 3 `flow`; version 4
/// `config.retain_ms` and `retained_until`.
impl Record for QueueRecord {
    const VERSION: u8 = 4;

    fn upgrade(version: u8, bytes: &[u8]) -> Option<Result<Self, StoreError>> {
        match version {
            1 => Some(postcard_decode::<QueueRecordV1>(bytes).map(QueueRecord::from)),
            2 => Some(postcard_decode::<QueueRecordV2>(bytes).map(QueueRecord::from)),
            3 => Some(postcard_decode::<QueueRecordV3>(bytes).map(QueueRecord::from)),
            _ => None,
        }
    }
}

/// [`QueueRecord`] as version 3 stored it: no retention.
#[derive(Deserialize)]
struct QueueRecordV3 {
    config: QueueConfigV3,
    paused_until: Option<u64>,
    counts: StoredCounts,
}

#[derive(Deserialize)]
struct QueueConfigV3 {
    lease_ms: u64,
    max_attempts: u32,
    retry: delayd_core::RetryPolicy,
    push: Option<delayd_core::PushConfig>,
    flow: Option<delayd_core::FlowConfig>,
}

impl From<QueueRecordV3> for QueueRecord {
    fn from(old: QueueRecordV3) -> Self {
        QueueRecord {
            config: QueueConfig {
                lease_ms: old.config.lease_ms,
                max_attempts: old.config.max_attempts,
                retry: old.config.retry,
                push: old.config.push,
                flow: old.config.flow,
                retain_ms: 0,
            },
            paused_until: old.paused_until,
            counts: old.counts,
            retained_until: 0,
        }
    }
}

/// [`MessageRecord`] as version 2 stored it: version 1's fields, then the
/// flow key and the deferrals; no `last_error`. (postcard writes a nested
/// struct's fields in place, so version 1 nested here reads the same bytes.)
#[derive(Deserialize)]
struct MessageRecordV2 {
    v1: MessageRecordV1,
    key: Option<FlowKey>,
    deferrals: u32,
}

impl From<MessageRecordV2> for MessageRecord {
    fn from(old: MessageRecordV2) -> Self {
        MessageRecord {
            key: old.key,
            deferrals: old.deferrals,
            ..MessageRecord::from(old.v1)
        }
    }
}

/// [`MessageRecord`] as version 1 stored it: no flow key, no deferrals.
#[derive(Deserialize)]
struct MessageRecordV1 {
    id: MessageId,
    seq: u64,
    state: MessageState,
    deliver_at: u64,
    enqueued_at: u64,
    priority: u32,
    attempts: u32,
    max_attempts: Option<u32>,
    lease_ms: Option<u64>,
    lease_until: Option<u64>,
    lease_id: Option<LeaseId>,
    died_at: Option<u64>,
    counters: MessageCounters,
    headers: BTreeMap<String, String>,
}

impl From<MessageRecordV1> for MessageRecord {
    fn from(old: MessageRecordV1) -> Self {
        MessageRecord {
            id: old.id,
            seq: old.seq,
            state: old.state,
            deliver_at: old.deliver_at,
            enqueued_at: old.enqueued_at,
            priority: old.priority,
            attempts: old.attempts,
            max_attempts: old.max_attempts,
            lease_ms: old.lease_ms,
            lease_until: old.lease_until,
            lease_id: old.lease_id,
            died_at: old.died_at,
            counters: old.counters,
            headers: old.headers,
            key: None,
            deferrals: 0,
            last_error: None,
            events: 0,
            last: None,
        }
    }
}

/// [`QueueRecord`] as version 2 stored it: no flow control.
#[derive(Deserialize)]
struct QueueRecordV2 {
    config: QueueConfigV2,
    paused_until: Option<u64>,
    counts: StoredCounts,
}

#[derive(Deserialize)]
struct QueueConfigV2 {
    lease_ms: u64,
    max_attempts: u32,
    retry: delayd_core::RetryPolicy,
    push: Option<delayd_core::PushConfig>,
}

/// Version 2 is version 3 without flow control.
impl From<QueueRecordV2> for QueueRecord {
    fn from(old: QueueRecordV2) -> Self {
        QueueRecord::from(QueueRecordV3 {
            config: QueueConfigV3 {
                lease_ms: old.config.lease_ms,
                max_attempts: old.config.max_attempts,
                retry: old.config.retry,
                push: old.config.push,
                flow: None,
            },
            paused_until: old.paused_until,
            counts: old.counts,
        })
    }
}

/// [`QueueRecord`] as version 1 stored it: push targets without headers.
#[derive(Deserialize)]
struct QueueRecordV1 {
    config: QueueConfigV1,
    paused_until: Option<u64>,
    counts: StoredCounts,
}

#[derive(Deserialize)]
struct QueueConfigV1 {
    lease_ms: u64,
    max_attempts: u32,
    retry: delayd_core::RetryPolicy,
    push: Option<PushConfigV1>,
}

#[derive(Deserialize)]
struct PushConfigV1 {
    url: String,
    timeout_ms: u64,
    concurrency: u32,
    secret: Option<String>,
}

impl From<QueueRecordV1> for QueueRecord {
    fn from(old: QueueRecordV1) -> Self {
        let push = old.config.push.map(|push| delayd_core::PushConfig {
            url: push.url,
            timeout_ms: push.timeout_ms,
            concurrency: push.concurrency,
            secret: push.secret,
            headers: BTreeMap::new(),
        });
        QueueRecord {
            config: QueueConfig {
                flow: None,
                lease_ms: old.config.lease_ms,
                max_attempts: old.config.max_attempts,
                retry: old.config.retry,
                push,
                retain_ms: 0,
            },
            paused_until: old.paused_until,
            counts: old.counts,
            retained_until: 0,
        }
    }
}

fn postcard_decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("decode: {e}")))
}

pub(crate) fn encode_record<T: Record>(record: &T) -> Result<Vec<u8>, StoreError> {
    let out = vec![T::VERSION];
    postcard::to_extend(record, out).map_err(|e| StoreError::Corrupt(format!("encode: {e}")))
}

pub(crate) fn decode_record<T: Record>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&version, rest)) if version == T::VERSION => postcard_decode(rest),
        Some((&version, rest)) => T::upgrade(version, rest).unwrap_or_else(|| {
            Err(StoreError::Corrupt(format!(
                "unknown record version {version}"
            )))
        }),
        None => Err(StoreError::Corrupt("empty record".into())),
    }
}

/// `messages` key: `[queue len u8][queue][id]`. The id is last, so it needs
/// no length; the queue prefix makes "all messages of a queue" one range.
pub(crate) fn message_key(queue: &QueueName, id: &MessageId) -> Vec<u8> {
    let q = queue.as_str().as_bytes();
    let mut key = Vec::with_capacity(1 + q.len() + id.as_str().len());
    // Queue names are at most 200 bytes (validated), so the length fits.
    key.push(q.len() as u8);
    key.extend_from_slice(q);
    key.extend_from_slice(id.as_str().as_bytes());
    key
}

pub(crate) fn queue_prefix(queue: &QueueName) -> Vec<u8> {
    let q = queue.as_str().as_bytes();
    let mut key = Vec::with_capacity(1 + q.len());
    key.push(q.len() as u8);
    key.extend_from_slice(q);
    key
}

pub(crate) fn decode_message_key(key: &[u8]) -> Result<(QueueName, MessageId), StoreError> {
    let (queue, id) = split_queue_key(key, "message")?;
    let id = MessageId::new(id).map_err(|_| StoreError::Corrupt("malformed message key".into()))?;
    Ok((queue, id))
}

/// Splits a `[queue len u8][queue][rest]` key (messages, schedules) into the
/// queue and the non-empty UTF-8 rest; `kind` names the key in the error.
pub(crate) fn split_queue_key<'k>(
    key: &'k [u8],
    kind: &str,
) -> Result<(QueueName, &'k str), StoreError> {
    let bad = || StoreError::Corrupt(format!("malformed {kind} key"));
    let (&len, rest) = key.split_first().ok_or_else(bad)?;
    let len = usize::from(len);
    if rest.len() <= len {
        return Err(bad());
    }
    let queue = std::str::from_utf8(&rest[..len]).map_err(|_| bad())?;
    let id = std::str::from_utf8(&rest[len..]).map_err(|_| bad())?;
    Ok((QueueName::new(queue).map_err(|_| bad())?, id))
}

/// A `queues` keyspace key: the queue's name.
pub(crate) fn decode_queue_key(key: &[u8]) -> Result<QueueName, StoreError> {
    std::str::from_utf8(key)
        .ok()
        .and_then(|s| QueueName::new(s).ok())
        .ok_or_else(|| StoreError::Corrupt("malformed queue name".into()))
}

/// `due` key: `[deliver_at u64 BE][seq u64 BE]`, so a range scan yields
/// scheduled messages in firing order.
pub(crate) fn due_key(deliver_at: u64, seq: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&deliver_at.to_be_bytes());
    key[8..].copy_from_slice(&seq.to_be_bytes());
    key
}

pub(crate) fn decode_due_key(key: &[u8]) -> Result<(u64, u64), StoreError> {
    let bad = || StoreError::Corrupt("malformed due key".into());
    let at: [u8; 8] = key
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(bad)?;
    let seq: [u8; 8] = key
        .get(8..16)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(bad)?;
    Ok((u64::from_be_bytes(at), u64::from_be_bytes(seq)))
}

pub(crate) fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

pub(crate) fn decode_u64(bytes: &[u8]) -> Result<u64, StoreError> {
    let arr: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt("expected 8 bytes".into()))?;
    Ok(u64::from_be_bytes(arr))
}

/// `payloads` value: `[message key len u16 BE][message key][payload]`. The
/// message key makes `get_by_seq` one point read here plus one in `messages`.
pub(crate) fn encode_payload(message_key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + message_key.len() + payload.len());
    // Message keys are at most 1 + 200 + 256 bytes.
    out.extend_from_slice(&(message_key.len() as u16).to_be_bytes());
    out.extend_from_slice(message_key);
    out.extend_from_slice(payload);
    out
}

pub(crate) fn decode_payload(value: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let bad = || StoreError::Corrupt("malformed payload value".into());
    let len: [u8; 2] = value
        .get(..2)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(bad)?;
    let len = usize::from(u16::from_be_bytes(len));
    let key = value.get(2..2 + len).ok_or_else(bad)?;
    Ok((key, &value[2 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_keys_sort_by_time_then_seq() {
        let a = due_key(5, 900);
        let b = due_key(6, 1);
        let c = due_key(6, 2);
        assert!(a < b && b < c);
        assert_eq!(decode_due_key(&c).unwrap(), (6, 2));
    }

    #[test]
    fn message_keys_round_trip_and_group_by_queue() {
        let q = QueueName::new("orders").unwrap();
        let id = MessageId::new("a:1").unwrap();
        let key = message_key(&q, &id);
        assert!(key.starts_with(&queue_prefix(&q)));
        assert_eq!(decode_message_key(&key).unwrap(), (q, id));
        assert!(decode_message_key(&[3, b'a']).is_err());
    }

    #[test]
    fn payload_values_round_trip() {
        let v = encode_payload(b"key", b"body");
        assert_eq!(decode_payload(&v).unwrap(), (&b"key"[..], &b"body"[..]));
        assert!(decode_payload(&[0, 9, 1]).is_err());
    }

    #[test]
    fn records_carry_a_version() {
        let counts = StoredCounts {
            waiting: 3,
            leased: 1,
            dead: 0,
        };
        let bytes = encode_record(&counts).unwrap();
        assert_eq!(bytes[0], RECORD_VERSION);
        assert_eq!(decode_record::<StoredCounts>(&bytes).unwrap(), counts);
        let mut bad = bytes.clone();
        bad[0] = 99;
        assert!(decode_record::<StoredCounts>(&bad).is_err());
    }
}

/// The stored bytes of each record kind, pinned: a change to a record's
/// fields (or to a core type it embeds, whose serde derives shape these
/// bytes) fails here instead of silently changing the on-disk format. A
/// deliberate format change bumps `RECORD_VERSION` or `FORMAT_VERSION` and
/// updates these bytes and docs/storage.md together.
#[cfg(test)]
mod golden {
    use super::*;
    use delayd_core::{PushConfig, RetryPolicy};

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn message() -> MessageRecord {
        MessageRecord {
            id: MessageId::new("order-42").expect("id"),
            seq: 300,
            state: MessageState::Leased,
            deliver_at: 1_700_000_000_000,
            enqueued_at: 1_699_999_999_000,
            priority: 1024,
            attempts: 2,
            max_attempts: Some(5),
            lease_ms: None,
            lease_until: Some(1_700_000_030_000),
            lease_id: Some(LeaseId("L1".to_string())),
            died_at: None,
            counters: MessageCounters {
                timeouts: 1,
                releases: 0,
                buries: 0,
                kicks: 3,
            },
            headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
            key: Some(FlowKey::new("tenant-1").expect("key")),
            deferrals: 2,
            last_error: Some("boom".into()),
            events: 5,
            last: Some(Box::new(delayd_core::Event {
                at: 1_700_000_000_000,
                attempt: 2,
                kind: delayd_core::EventKind::Leased {
                    lease_until: 1_700_000_030_000,
                    via: delayd_core::Via::Http,
                },
            })),
        }
    }

    /// version 04: version 03's fields, then events 5 and the latest
    /// event Some(at, attempt 2, leased (3): lease_until, via http (0)).
    const MESSAGE: &str = "04086f726465722d3432ac020280d095ffbc3198c895ffbc3180080201050001\
b0ba97ffbc3101024c31000100000301016b0176010874656e616e742d31020104626f6f6d05\
0180d095ffbc310203b0ba97ffbc3100";

    /// version 03: version 02's fields, then last_error Some("boom").
    const MESSAGE_V3: &str = "03086f726465722d3432ac020280d095ffbc3198c895ffbc3180080201050001\
b0ba97ffbc3101024c31000100000301016b0176010874656e616e742d31020104626f6f6d";

    /// version 02: version 01's fields, then key Some("tenant-1"),
    /// deferrals 2.
    const MESSAGE_V2: &str = "02086f726465722d3432ac020280d095ffbc3198c895ffbc3180080201050001\
b0ba97ffbc3101024c31000100000301016b0176010874656e616e742d3102";

    /// A store written before message history still opens: its message
    /// records (version 3) read with no events.
    #[test]
    fn message_record_version_3_reads() {
        let decoded: MessageRecord = decode_record(&unhex(MESSAGE_V3)).expect("decode");
        let mut expected = message();
        expected.events = 0;
        expected.last = None;
        assert_eq!(decoded, expected);
    }

    /// A store written before `last_error` still opens: its message records
    /// (version 2) read with none.
    #[test]
    fn message_record_version_2_reads() {
        let decoded: MessageRecord = decode_record(&unhex(MESSAGE_V2)).expect("decode");
        let mut expected = message();
        expected.last_error = None;
        expected.events = 0;
        expected.last = None;
        assert_eq!(decoded, expected);
    }

    /// A store written before flow control still opens: its message records
    /// (version 1) read with no key and no deferrals.
    #[test]
    fn message_record_version_1_reads() {
        let decoded: MessageRecord = decode_record(&unhex(MESSAGE_V1)).expect("decode");
        let mut expected = message();
        expected.key = None;
        expected.deferrals = 0;
        expected.last_error = None;
        expected.events = 0;
        expected.last = None;
        assert_eq!(decoded, expected);
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// version 01, id "order-42", seq 300, state 2 (leased), deliver_at,
    /// enqueued_at (varints), priority 1024, attempts 2, max_attempts
    /// Some(5), lease_ms None, lease_until Some, lease_id Some("L1"),
    /// died_at None, counters (1, 0, 0, 3), headers {k: v}.
    const MESSAGE_V1: &str = "01086f726465722d3432ac020280d095ffbc3198c895ffbc3180080201050001\
b0ba97ffbc3101024c31000100000301016b0176";

    #[test]
    fn message_record_bytes() {
        let bytes = encode_record(&message()).expect("encode");
        assert_eq!(hex(&bytes), MESSAGE);
        assert_eq!(
            decode_record::<MessageRecord>(&bytes).expect("decode"),
            message()
        );
    }

    fn queue() -> QueueRecord {
        QueueRecord {
            config: QueueConfig {
                flow: Some(delayd_core::FlowConfig {
                    rate: Some(delayd_core::Rate {
                        limit: 50,
                        period_ms: 1_000,
                        burst: 5,
                    }),
                    key_rate: None,
                    concurrency: Some(8),
                    key_concurrency: Some(1),
                    ordered: true,
                    max_deferrals: 100,
                }),
                retain_ms: 3_600_000,
                lease_ms: 30_000,
                max_attempts: 10,
                retry: RetryPolicy {
                    initial_ms: 1_000,
                    max_ms: 3_600_000,
                    multiplier: 2.0,
                },
                push: Some(PushConfig {
                    url: "http://127.0.0.1:9/hook".into(),
                    timeout_ms: 5_000,
                    concurrency: 16,
                    secret: Some("s".into()),
                    headers: BTreeMap::from([("authorization".into(), "Bearer t".into())]),
                }),
            },
            paused_until: Some(u64::MAX),
            counts: StoredCounts {
                waiting: 7,
                leased: 1,
                dead: 2,
            },
            retained_until: 1_700_000_000_000,
        }
    }

    /// [`queue`] as a store before retention (version 3) holds it.
    fn queue_without_retention() -> QueueRecord {
        let mut q = queue();
        q.config.retain_ms = 0;
        q.retained_until = 0;
        q
    }

    /// A store written before retention still opens: its queue records
    /// (version 3) read with `retain_ms` 0 and nothing retained.
    #[test]
    fn queue_record_version_3_reads() {
        let decoded: QueueRecord = decode_record(&unhex(QUEUE_V3)).expect("decode");
        assert_eq!(decoded, queue_without_retention());
    }

    /// Events of each shape: a plain one, one with fields, one with
    /// optional fields set.
    fn events() -> Vec<EventRecord> {
        use delayd_core::{DeathReason, Event, EventKind, Via};
        [
            EventKind::Enqueued,
            EventKind::Leased {
                lease_until: 1_700_000_030_000,
                via: Via::Beanstalk,
            },
            EventKind::PushFailed {
                status: Some(503),
                error: "HTTP 503: busy".into(),
                duration_ms: 12,
            },
            EventKind::Dead {
                reason: DeathReason::MaxDeferrals,
            },
        ]
        .into_iter()
        .map(|kind| EventRecord {
            event: Event {
                at: 1_700_000_000_000,
                attempt: 2,
                kind,
            },
        })
        .collect()
    }

    #[test]
    fn event_record_bytes() {
        let bytes: Vec<String> = events()
            .iter()
            .map(|e| hex(&encode_record(e).expect("encode")))
            .collect();
        assert_eq!(bytes, EVENTS);
        for e in events() {
            let encoded = encode_record(&e).expect("encode");
            assert_eq!(decode_record::<EventRecord>(&encoded).expect("decode"), e);
        }
        assert_eq!(decode_event_key(&event_key(300, 7)).expect("key"), (300, 7));
        assert!(event_key(300, 7) < event_key(300, 8) && event_key(300, 9) < event_key(301, 0));
    }

    fn successor() -> SuccessorRecord {
        let next = delayd_core::Replacement {
            payload: b"next".to_vec(),
            headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
            priority: 7,
            key: Some(FlowKey::new("tenant-1").expect("key")),
            max_attempts: Some(3),
            lease_ms: None,
            deliver_at: 1_700_000_000_000,
            since: 1_699_999_999_000,
        };
        SuccessorRecord { next }
    }

    /// version 01: payload (length 4) "next", headers (1 entry) {k: v},
    /// priority 7, key Some("tenant-1"), max_attempts Some(3), lease_ms
    /// None, deliver_at and since (varints).
    const SUCCESSOR: &str =
        "01046e65787401016b017607010874656e616e742d3101030080d095ffbc3198c895ffbc31";

    #[test]
    fn successor_record_bytes() {
        let encoded = encode_record(&successor()).expect("encode");
        assert_eq!(hex(&encoded), SUCCESSOR);
        let decoded: SuccessorRecord = decode_record(&unhex(SUCCESSOR)).expect("decode");
        assert_eq!(decoded, successor());
    }

    /// version 01, at (varint), attempt 2, then the kind: its variant index
    /// (0 enqueued, 3 leased, 8 push_failed, 9 dead) and fields.
    const EVENTS: [&str; 4] = [
        "0180d095ffbc310200",
        "0180d095ffbc310203b0ba97ffbc3101",
        "0180d095ffbc31020801f7030e48545450203530333a20627573790c",
        "0180d095ffbc31020901",
    ];

    fn retained() -> RetainedRecord {
        RetainedRecord::new(
            &message(),
            MessageState::Acked,
            1_700_000_001_000,
            1_700_003_601_000,
        )
    }

    #[test]
    fn retained_record_bytes() {
        let r = retained();
        assert_eq!(r.message.state, MessageState::Acked);
        assert_eq!(
            (r.message.lease_until, r.message.lease_id.as_ref()),
            (None, None)
        );
        let bytes = encode_record(&r).expect("encode");
        assert_eq!(hex(&bytes), RETAINED);
        assert_eq!(decode_record::<RetainedRecord>(&bytes).expect("decode"), r);
    }

    #[test]
    fn queue_record_bytes() {
        let bytes = encode_record(&queue()).expect("encode");
        let decoded: QueueRecord = decode_record(&bytes).expect("decode");
        assert_eq!(decoded, queue());
        assert_eq!(hex(&bytes), QUEUE);
    }

    /// A store written before flow control still opens: its queue records
    /// (version 2) read with no flow.
    #[test]
    fn queue_record_version_2_reads() {
        let decoded: QueueRecord = decode_record(&unhex(QUEUE_V2)).expect("decode");
        let mut expected = queue_without_retention();
        expected.config.flow = None;
        assert_eq!(decoded, expected);
    }

    /// A store written before push headers existed still opens: its queue
    /// records (version 1) read with no headers.
    #[test]
    fn queue_record_version_1_reads() {
        let bytes: Vec<u8> = (0..QUEUE_V1.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&QUEUE_V1[i..i + 2], 16).expect("hex"))
            .collect();
        let decoded: QueueRecord = decode_record(&bytes).expect("decode");
        let mut expected = queue_without_retention();
        expected.config.flow = None;
        if let Some(push) = expected.config.push.as_mut() {
            push.headers.clear();
        }
        assert_eq!(decoded, expected);
    }

    /// version 04: version 3's fields with `retain_ms` 3600000 after the
    /// flow config and `retained_until` 1700000000000 at the end.
    const QUEUE: &str = "04b0ea010ae80780dddb0100000000000000400117687474703a2f2f3132372e302e\
302e313a392f686f6f6b882710010173010d617574686f72697a6174696f6e084265617265722074010132e807\
050001080101016480dddb0101ffffffffffffffffff0107010280d095ffbc31";

    /// The same queue as version 3 wrote it (no retention): version 03, lease_ms 30000, max_attempts 10, retry (1000, 3600000,
    /// 2.0 as f64 LE), push Some(url, 5000, 16, secret Some("s"), headers
    /// {authorization: "Bearer t"}), flow Some(rate Some(50, 1000, 5),
    /// key_rate None, concurrency Some(8), key_concurrency Some(1), ordered
    /// true, max_deferrals 100), paused_until Some(u64::MAX), counts (7, 1,
    /// 2).
    const QUEUE_V3: &str = "03b0ea010ae80780dddb0100000000000000400117687474703a2f2f3132372e302e\
302e313a392f686f6f6b882710010173010d617574686f72697a6174696f6e084265617265722074010132e807\
050001080101016401ffffffffffffffffff01070102";

    /// The message of [`message`] acked at 1700000001000 and kept until
    /// 1700003601000: its record as version 4 writes it (state 4, `Acked`;
    /// lease cleared; events 5), then the two times.
    const RETAINED: &str = "01086f726465722d3432ac020480d095ffbc3198c895ffbc318008020105000000000100000301016b01760108\
74656e616e742d31020104626f6f6d050180d095ffbc310203b0ba97ffbc3100e8d795ffbc31e8b4f180bd31";

    /// The same queue as version 2 wrote it (no flow).
    const QUEUE_V2: &str = "02b0ea010ae80780dddb0100000000000000400117687474703a2f2f3132372e302e\
302e313a392f686f6f6b882710010173010d617574686f72697a6174696f6e08426561726572207401ffffffffffffffffff01070102";

    /// The same queue as version 1 wrote it (no headers).
    const QUEUE_V1: &str = "01b0ea010ae80780dddb0100000000000000400117687474703a2f2f3132372e302e\
302e313a392f686f6f6b88271001017301ffffffffffffffffff01070102";
}
