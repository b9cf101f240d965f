//! Key and value encodings of the `schedules` keyspace (docs/storage.md,
//! "Schedules"). Apart from `codec.rs` so that schedule records can change
//! without touching the message and queue formats.
//!
//! Key: `[queue len u8][queue][schedule id]`, the message key's layout, so
//! a queue's schedules are one prefix range in id order.
//!
//! Value: `[0x03][StoredSchedule]` in postcard. The fields a timer needs
//! (`revision`, `next_fire_at`, `wake_at`) come first, so that open decodes
//! only that head ([`decode_head`]) and never builds the definition
//! (payload, headers) of a schedule it only has to arm. Versions 1 and 2
//! (before fires were written ahead) have no `wake_at`: their head wakes at
//! the cursor, where the first step writes the next fire ahead.

use delayd_core::{QueueName, ScheduleDefinition, ScheduleId, ScheduleRecord};
use serde::{Deserialize, Serialize};

use crate::codec::{self, RECORD_VERSION};
use crate::error::StoreError;

/// A schedule record without its key (queue and id are the key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredSchedule {
    pub revision: u64,
    /// The cursor: next fire time not yet handled (`None`: paused or
    /// finished).
    pub next_fire_at: Option<u64>,
    /// When the next firing step runs (`ScheduleRecord::wake_at`), kept so
    /// that open arms the timer from the head alone.
    pub wake_at: Option<u64>,
    /// The fire time written ahead (`ScheduleRecord::ahead`).
    pub ahead: Option<u64>,
    pub fires: u64,
    pub last_fire_at: Option<u64>,
    pub since: u64,
    pub definition: ScheduleDefinition,
}

/// The leading fields of a [`StoredSchedule`]: what a timer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub(crate) struct ScheduleHead {
    pub revision: u64,
    pub next_fire_at: Option<u64>,
    pub wake_at: Option<u64>,
}

/// The head of versions 1 and 2.
#[derive(Deserialize)]
struct HeadV2 {
    revision: u64,
    next_fire_at: Option<u64>,
}

impl ScheduleHead {
    pub fn of(record: &ScheduleRecord) -> Self {
        Self {
            revision: record.revision,
            next_fire_at: record.next_fire_at,
            wake_at: record.wake_at(),
        }
    }
}

impl StoredSchedule {
    /// `record` stored with `head` (its [`ScheduleHead::of`], computed
    /// once by the caller, which arms the timer with it too).
    fn from_record(record: &ScheduleRecord, head: ScheduleHead) -> Self {
        Self {
            revision: record.revision,
            next_fire_at: record.next_fire_at,
            wake_at: head.wake_at,
            ahead: record.ahead,
            fires: record.fires,
            last_fire_at: record.last_fire_at,
            since: record.since,
            definition: record.definition.clone(),
        }
    }

    pub fn into_record(self, queue: QueueName, id: ScheduleId) -> ScheduleRecord {
        ScheduleRecord {
            queue,
            id,
            definition: self.definition,
            revision: self.revision,
            fires: self.fires,
            last_fire_at: self.last_fire_at,
            next_fire_at: self.next_fire_at,
            since: self.since,
            ahead: self.ahead,
        }
    }
}

/// Version 2 added the template's flow `key`; version 3 `wake_at` and
/// `ahead` (fires written ahead).
impl codec::Record for StoredSchedule {
    const VERSION: u8 = 3;

    fn upgrade(version: u8, bytes: &[u8]) -> Option<Result<Self, StoreError>> {
        let decoded = match version {
            1 => {
                postcard::from_bytes::<StoredBefore<DefinitionV1>>(bytes).map(StoredSchedule::from)
            }
            2 => postcard::from_bytes::<StoredBefore<ScheduleDefinition>>(bytes)
                .map(StoredSchedule::from),
            _ => return None,
        };
        Some(decoded.map_err(|e| StoreError::Corrupt(format!("decode: {e}"))))
    }
}

/// [`StoredSchedule`] as versions 1 and 2 stored it (nothing written
/// ahead), with version 1's definition ([`DefinitionV1`]) or version 2's
/// (today's).
#[derive(Deserialize)]
struct StoredBefore<D> {
    revision: u64,
    next_fire_at: Option<u64>,
    fires: u64,
    last_fire_at: Option<u64>,
    since: u64,
    definition: D,
}

impl<D: Into<ScheduleDefinition>> From<StoredBefore<D>> for StoredSchedule {
    fn from(old: StoredBefore<D>) -> Self {
        StoredSchedule {
            revision: old.revision,
            next_fire_at: old.next_fire_at,
            wake_at: old.next_fire_at,
            ahead: None,
            fires: old.fires,
            last_fire_at: old.last_fire_at,
            since: old.since,
            definition: old.definition.into(),
        }
    }
}

/// The definition as version 1 stored it: templates without a key.
#[derive(Deserialize)]
struct DefinitionV1 {
    recurrence: delayd_core::Recurrence,
    start_at: u64,
    end_at: Option<u64>,
    max_fires: Option<u64>,
    message: TemplateV1,
    catchup: delayd_core::Catchup,
    catchup_window_ms: u64,
    overlap: delayd_core::Overlap,
    jitter_ms: u64,
    paused: bool,
}

#[derive(Deserialize)]
struct TemplateV1 {
    payload: Vec<u8>,
    priority: Option<u32>,
    headers: std::collections::BTreeMap<String, String>,
    max_attempts: Option<u32>,
}

impl From<DefinitionV1> for ScheduleDefinition {
    fn from(d: DefinitionV1) -> Self {
        ScheduleDefinition {
            recurrence: d.recurrence,
            start_at: d.start_at,
            end_at: d.end_at,
            max_fires: d.max_fires,
            message: delayd_core::MessageTemplate {
                payload: d.message.payload,
                priority: d.message.priority,
                headers: d.message.headers,
                max_attempts: d.message.max_attempts,
                key: None,
            },
            catchup: d.catchup,
            catchup_window_ms: d.catchup_window_ms,
            overlap: d.overlap,
            jitter_ms: d.jitter_ms,
            paused: d.paused,
        }
    }
}

/// `schedules` key of `(queue, id)`.
pub(crate) fn schedule_key(queue: &QueueName, id: &ScheduleId) -> Vec<u8> {
    let mut key = codec::queue_prefix(queue);
    key.extend_from_slice(id.as_str().as_bytes());
    key
}

pub(crate) fn decode_schedule_key(key: &[u8]) -> Result<(QueueName, ScheduleId), StoreError> {
    let (queue, id) = codec::split_queue_key(key, "schedule")?;
    let id =
        ScheduleId::new(id).map_err(|_| StoreError::Corrupt("malformed schedule key".into()))?;
    Ok((queue, id))
}

/// The stored bytes of `record`, and its head (what its timer is armed
/// with): the wake time is planned once for both.
pub(crate) fn encode_schedule(
    record: &ScheduleRecord,
) -> Result<(Vec<u8>, ScheduleHead), StoreError> {
    let head = ScheduleHead::of(record);
    let bytes = codec::encode_record(&StoredSchedule::from_record(record, head))?;
    Ok((bytes, head))
}

pub(crate) fn decode_schedule(key: &[u8], value: &[u8]) -> Result<ScheduleRecord, StoreError> {
    let (queue, id) = decode_schedule_key(key)?;
    let stored: StoredSchedule = codec::decode_record(value)?;
    Ok(stored.into_record(queue, id))
}

/// Only the head of a value (the rest is not decoded).
pub(crate) fn decode_head(value: &[u8]) -> Result<ScheduleHead, StoreError> {
    let corrupt = |e: postcard::Error| StoreError::Corrupt(format!("decode schedule head: {e}"));
    match value.split_first() {
        Some((3, rest)) => postcard::take_from_bytes::<ScheduleHead>(rest)
            .map(|(head, _)| head)
            .map_err(corrupt),
        // Before fires were written ahead: a step at the cursor.
        Some((&(RECORD_VERSION | 2), rest)) => postcard::take_from_bytes::<HeadV2>(rest)
            .map(|(head, _)| ScheduleHead {
                revision: head.revision,
                next_fire_at: head.next_fire_at,
                wake_at: head.next_fire_at,
            })
            .map_err(corrupt),
        Some((v, _)) => Err(StoreError::Corrupt(format!("unknown record version {v}"))),
        None => Err(StoreError::Corrupt("empty record".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_group_by_queue() {
        let queue = QueueName::new("orders").expect("queue");
        let id = ScheduleId::new("nightly.report").expect("id");
        let key = schedule_key(&queue, &id);
        assert!(key.starts_with(&codec::queue_prefix(&queue)));
        assert_eq!(decode_schedule_key(&key).expect("decode"), (queue, id));
        assert!(decode_schedule_key(&[6, b'o']).is_err());
        // A message id with ':' is not a schedule id.
        assert!(decode_schedule_key(b"\x01qa:b").is_err());
    }
}

/// The stored bytes of a schedule record, pinned like `codec::golden`: a
/// change to `StoredSchedule` or to the core types it embeds
/// (`ScheduleDefinition` and its parts, whose serde derives shape these
/// bytes) fails here instead of silently changing the on-disk format.
#[cfg(test)]
mod golden {
    use std::collections::BTreeMap;

    use delayd_core::{Catchup, MessageTemplate, Overlap, Recurrence};

    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn record() -> ScheduleRecord {
        ScheduleRecord {
            queue: QueueName::new("reports").expect("queue"),
            id: ScheduleId::new("daily").expect("id"),
            definition: ScheduleDefinition {
                recurrence: Recurrence::Cron {
                    expr: "0 6 * * *".into(),
                    tz: "UTC".into(),
                },
                start_at: 1_700_000_000_000,
                end_at: None,
                max_fires: Some(3),
                message: MessageTemplate {
                    key: Some(delayd_core::FlowKey::new("t").expect("key")),
                    payload: b"go".to_vec(),
                    priority: Some(7),
                    headers: BTreeMap::from([("k".to_string(), "v".to_string())]),
                    max_attempts: None,
                },
                catchup: Catchup::All,
                catchup_window_ms: 3_600_000,
                overlap: Overlap::Skip,
                jitter_ms: 0,
                paused: false,
            },
            revision: 2,
            fires: 1,
            last_fire_at: Some(1_700_028_000_000),
            next_fire_at: Some(1_700_114_400_000),
            since: 1_700_000_000_000,
            ahead: None,
        }
    }

    /// version 03; revision 2, next_fire_at Some(varint), wake_at Some
    /// (the cursor: `overlap: skip` is not written ahead), ahead None,
    /// fires 1, last_fire_at Some, since; definition: recurrence 0 (cron)
    /// "0 6 * * *" "UTC", start_at, end_at None, max_fires Some(3), message
    /// (payload "go", priority Some(7), headers {k: v}, max_attempts None,
    /// key Some("t")),
    /// catchup 1 (all), window 3600000, overlap 1 (skip), jitter 0,
    /// paused false.
    const SCHEDULE: &str = "0302018086dcb5bd31018086dcb5bd3100010180cec28cbd3180d095ffbc3100\
09302036202a202a202a0355544380d095ffbc3100010302676f010701016b0176\
000101740180dddb01010000";

    /// The same schedule as version 2 wrote it (before fires were written
    /// ahead: no `wake_at`, no `ahead`).
    const SCHEDULE_V2: &str = "0202018086dcb5bd31010180cec28cbd3180d095ffbc310009302036202a202a\
202a0355544380d095ffbc3100010302676f010701016b017600010174\
0180dddb01010000";

    /// A store written before fires were written ahead still opens: its
    /// schedules read with nothing written ahead, and their heads wake at
    /// the cursor.
    #[test]
    fn schedule_record_version_2_reads() {
        let bytes = unhex(SCHEDULE_V2);
        let key = schedule_key(&record().queue, &record().id);
        assert_eq!(decode_schedule(&key, &bytes).expect("decode"), record());
        let head = decode_head(&bytes).expect("head");
        assert_eq!(
            (head.revision, head.next_fire_at, head.wake_at),
            (2, Some(1_700_114_400_000), Some(1_700_114_400_000))
        );
    }

    /// A store written before flow control still opens: its schedules
    /// (version 1) read with no template key, and their heads too.
    #[test]
    fn schedule_record_version_1_reads() {
        let bytes = unhex(SCHEDULE_V1);
        let key = schedule_key(&record().queue, &record().id);
        let mut expected = record();
        expected.definition.message.key = None;
        assert_eq!(decode_schedule(&key, &bytes).expect("decode"), expected);
        assert_eq!(decode_head(&bytes).expect("head").revision, 2);
    }

    /// The same schedule as version 1 wrote it (no template key).
    const SCHEDULE_V1: &str = "0102018086dcb5bd31010180cec28cbd3180d095ffbc310009302036202a202a\
202a0355544380d095ffbc3100010302676f010701016b0176000180dddb01010000";

    #[test]
    fn schedule_record_bytes() {
        let (bytes, encoded_head) = encode_schedule(&record()).expect("encode");
        assert_eq!(hex(&bytes), SCHEDULE);
        let key = schedule_key(&record().queue, &record().id);
        assert_eq!(decode_schedule(&key, &bytes).expect("decode"), record());
        let head = decode_head(&bytes).expect("head");
        assert_eq!(head, ScheduleHead::of(&record()));
        assert_eq!(head, encoded_head);
        assert_eq!(
            (head.revision, head.next_fire_at, head.wake_at),
            (2, Some(1_700_114_400_000), Some(1_700_114_400_000))
        );
    }
}
