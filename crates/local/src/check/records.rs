//! Reads every key and value of every keyspace through fjall (which
//! verifies each block's checksum as it reads it) and decodes each delayd
//! record, so damage the files' checksums cannot see (a record this
//! version cannot decode) is found too.

use crate::codec::{self, MessageRecord, QueueRecord};
use crate::error::StoreError;
use crate::schedule_codec;
use crate::store::Store;

/// A record that could not be read or decoded.
pub(crate) struct BadRecord {
    pub keyspace: &'static str,
    /// The key, described (`message orders/42`), when it could be read.
    pub key: Option<String>,
    pub problem: String,
}

/// Every keyspace's records; returns how many were read, and the bad ones.
pub(crate) fn check(store: &Store) -> (u64, Vec<BadRecord>) {
    let spaces = match store.keyspaces() {
        Ok(spaces) => spaces,
        Err(e) => {
            let problem = format!("store closed, nothing read: {e}");
            let bad = BadRecord {
                keyspace: "meta",
                key: None,
                problem,
            };
            return (0, vec![bad]);
        }
    };
    let (mut read, mut bad) = (0, Vec::new());
    for (name, keyspace) in spaces {
        for guard in keyspace.iter() {
            let (key, value) = match guard.into_inner() {
                Ok(kv) => kv,
                Err(e) => {
                    // The iterator cannot go past a block it cannot read.
                    bad.push(BadRecord {
                        keyspace: name,
                        key: None,
                        problem: format!("read failed, rest of keyspace unread: {e}"),
                    });
                    break;
                }
            };
            read += 1;
            if let Err(e) = decode(name, &key, &value) {
                bad.push(BadRecord {
                    keyspace: name,
                    key: Some(describe_key(name, &key)),
                    problem: e.to_string(),
                });
            }
        }
    }
    (read, bad)
}

fn decode(keyspace: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    match keyspace {
        "meta" if key == codec::META_SEQ => codec::decode_u64(value).map(drop),
        "meta" if key == codec::META_FORMAT && value.len() == 1 => Ok(()),
        "meta" => Err(StoreError::Corrupt("unknown meta entry".into())),
        "queues" => {
            codec::decode_queue_key(key)?;
            codec::decode_record::<QueueRecord>(value).map(drop)
        }
        "messages" => {
            codec::decode_message_key(key)?;
            codec::decode_record::<MessageRecord>(value).map(drop)
        }
        "payloads" => {
            codec::decode_u64(key)?;
            codec::decode_message_key(codec::decode_payload(value)?.0).map(drop)
        }
        "due" => {
            codec::decode_due_key(key)?;
            codec::decode_message_key(value).map(drop)
        }
        "schedules" => schedule_codec::decode_schedule(key, value).map(drop),
        "retained" => {
            codec::decode_message_key(key)?;
            codec::decode_record::<codec::RetainedRecord>(value).map(drop)
        }
        "expiry" => {
            codec::decode_due_key(key)?;
            codec::decode_message_key(value).map(drop)
        }
        "events" => {
            codec::decode_event_key(key)?;
            codec::decode_record::<codec::EventRecord>(value).map(drop)
        }
        "successors" => {
            codec::decode_message_key(key)?;
            codec::decode_record::<codec::SuccessorRecord>(value).map(drop)
        }
        _ => {
            codec::decode_u64(key)?;
            codec::decode_message_key(value).map(drop)
        }
    }
}

/// A key as an operator can use it: `message orders/42`, `queue orders`,
/// `seq 17`; hex when it does not decode.
pub(crate) fn describe_key(keyspace: &str, key: &[u8]) -> String {
    let described = match keyspace {
        "messages" | "retained" | "successors" => codec::decode_message_key(key)
            .ok()
            .map(|(q, id)| format!("message {}/{}", q.as_str(), id.as_str())),
        "queues" => codec::decode_queue_key(key)
            .ok()
            .map(|q| format!("queue {}", q.as_str())),
        "payloads" | "pinned" => codec::decode_u64(key).ok().map(|s| format!("seq {s}")),
        "due" => codec::decode_due_key(key)
            .ok()
            .map(|(at, seq)| format!("seq {seq} due at {at}")),
        "expiry" => codec::decode_due_key(key)
            .ok()
            .map(|(at, seq)| format!("seq {seq} kept until {at}")),
        "events" => codec::decode_event_key(key)
            .ok()
            .map(|(seq, n)| format!("event {n} of seq {seq}")),
        "meta" => std::str::from_utf8(key).ok().map(|k| format!("meta {k}")),
        "schedules" => schedule_codec::decode_schedule_key(key)
            .ok()
            .map(|(q, id)| format!("schedule {}/{}", q.as_str(), id.as_str())),
        _ => None,
    };
    described.unwrap_or_else(|| {
        let hex: String = key.iter().take(32).map(|b| format!("{b:02x}")).collect();
        format!("key {hex}")
    })
}
