//! Key and channel names. Every key of one queue shard carries the hash tag
//! `{prefix:queue#k}`, so one script touching them runs on one Cluster slot;
//! the registry keys carry `{prefix}` (one slot for the whole deployment).

use delayd_core::{MessageId, QueueName, ScheduleId};

/// The keys of one queue shard, in the order the scripts take them.
#[derive(Clone, Debug)]
pub(crate) struct ShardKeys {
    /// cfg, sched, ready, lease, dead, msg (hash: id -> packed record),
    /// schedules (hash: schedule id -> record JSON), cursors (zset: score
    /// next_fire_at, member schedule id). The functions reach the shard's
    /// other keys (flow control's, retention's `rt:<id>` and `retained`)
    /// by the same tag (lua/common.lua).
    pub(crate) keys: [String; 8],
}

impl ShardKeys {
    /// Hash: schedule id -> `ScheduleRecord` JSON.
    pub(crate) fn schedules(&self) -> &str {
        &self.keys[6]
    }
}

/// Seqs per seq index bucket: at most Redis's default
/// `hash-max-listpack-entries` (128), so each bucket stays a compact
/// listpack (~45 bytes per entry instead of ~100 in one big hash).
const SEQ_BUCKET: u64 = 128;

#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
    pub(crate) shards: u32,
    /// Hash: queue name -> config JSON. The list of queues.
    pub(crate) registry: String,
    /// Counter: seqs are handed out from it in blocks.
    pub(crate) seq: String,
    /// Prefix of the seq index buckets: hash `<seq_index>:<seq / 128>`,
    /// field `seq % 128` -> `queue/id`, best effort (see docs/redis.md).
    pub(crate) seq_index: String,
    /// Hash of deployment-wide settings every node must share (`shards`).
    pub(crate) meta: String,
    /// Pub/sub channel of wake-up events.
    pub(crate) channel: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, shards: u32) -> Self {
        Self {
            prefix: prefix.to_owned(),
            shards,
            registry: format!("{{{prefix}}}:queues"),
            seq: format!("{{{prefix}}}:seq"),
            seq_index: format!("{{{prefix}}}:seqidx"),
            meta: format!("{{{prefix}}}:meta"),
            channel: format!("{prefix}:events"),
        }
    }

    pub(crate) fn shard(&self, queue: &QueueName, shard: u32) -> ShardKeys {
        let tag = format!("{{{}:{}#{}}}", self.prefix, queue, shard);
        ShardKeys {
            keys: [
                format!("{tag}:cfg"),
                format!("{tag}:sched"),
                format!("{tag}:ready"),
                format!("{tag}:lease"),
                format!("{tag}:dead"),
                format!("{tag}:msg"),
                format!("{tag}:schedules"),
                format!("{tag}:cursors"),
            ],
        }
    }

    /// The seq index bucket (a small listpack hash) and field of `seq`.
    pub(crate) fn seq_slot(&self, seq: u64) -> (String, u64) {
        (
            format!("{}:{}", self.seq_index, seq / SEQ_BUCKET),
            seq % SEQ_BUCKET,
        )
    }

    /// The shard holding message `id`: a stable hash, so an id always maps
    /// to the same shard (idempotent enqueue and lookups need one place).
    /// A schedule's fire messages `<schedule id>:<t>` are placed by the
    /// schedule id alone, so they share the schedule's shard and one fire
    /// is one function call (docs/redis.md, "Schedules").
    pub(crate) fn shard_of(&self, id: &MessageId) -> u32 {
        let key = fire_schedule_part(id.as_str()).unwrap_or(id.as_str());
        self.shard_of_key(key)
    }

    /// The shard holding schedule `id` (and its fire messages).
    pub(crate) fn schedule_shard(&self, id: &ScheduleId) -> u32 {
        self.shard_of_key(id.as_str())
    }

    fn shard_of_key(&self, key: &str) -> u32 {
        (fnv1a(key.as_bytes()) % u64::from(self.shards)) as u32
    }
}

/// The schedule id of a fire message id (`<schedule id>:<digits>`, the
/// schedule id without `:`), else `None`.
fn fire_schedule_part(id: &str) -> Option<&str> {
    let (head, tail) = id.split_once(':')?;
    let digits = !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit());
    (digits && !head.is_empty()).then_some(head)
}

/// FNV-1a, 64 bit: stable across processes and versions (unlike std's
/// `DefaultHasher`), which every node of a deployment relies on.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_keys_share_one_hash_tag() {
        let keys = Keys::new("t1", 4);
        let q = QueueName::new("orders").unwrap();
        let s = keys.shard(&q, 3);
        for k in &s.keys {
            assert!(k.starts_with("{t1:orders#3}:"), "{k}");
        }
    }

    #[test]
    fn shard_of_is_stable_and_spreads() {
        let keys = Keys::new("p", 4);
        let mut seen = [0u32; 4];
        for i in 0..400 {
            let id = MessageId::new(format!("m{i}")).unwrap();
            let s = keys.shard_of(&id);
            assert_eq!(s, keys.shard_of(&id));
            seen[s as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 50), "{seen:?}");
    }

    #[test]
    fn fire_messages_share_their_schedules_shard() {
        let keys = Keys::new("p", 8);
        let mut shards = std::collections::BTreeSet::new();
        for i in 0..40 {
            let sid = ScheduleId::new(format!("s{i}")).unwrap();
            let home = keys.schedule_shard(&sid);
            shards.insert(home);
            for t in [0, 1_000, 1_764_000_000_000] {
                assert_eq!(keys.shard_of(&sid.fire_message_id(t)), home);
            }
        }
        assert!(shards.len() > 4, "schedules spread: {shards:?}");
        // Other ids with a colon are placed by the whole id.
        let other = MessageId::new("a:b1").unwrap();
        assert_eq!(keys.shard_of(&other), keys.shard_of_key("a:b1"));
        let manual = MessageId::new("s1:manual:5").unwrap();
        assert_eq!(keys.shard_of(&manual), keys.shard_of_key("s1:manual:5"));
    }
}
