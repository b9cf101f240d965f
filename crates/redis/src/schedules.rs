//! Recurring schedules (docs/redis.md, "Schedules"). A schedule's record
//! (JSON) lives in its shard's `schedules` hash and its cursor in the
//! shard's `cursors` zset; its fire messages `<id>:<t>` are placed in the
//! same shard (`Keys::shard_of`), so a fire is one function call.
//!
//! The fire-time arithmetic is core's (`ScheduleRecord::plan`, Rust); Lua
//! cannot compute cron. A node reads the record, plans, and calls
//! `sched_fire`, which applies the plan only if the stored record is still
//! byte for byte the one the plan was computed from (revision, cursor and
//! all), checks `overlap: skip` liveness, enqueues and stores the advanced
//! record atomically (`fire.rs`). Changes (put, pause, resume, delete)
//! here are the same compare-and-set (`sched_set`) of a record computed
//! in Rust.

use delayd_core::{
    BrokerError, BrokerResult, EnqueueOptions, EnqueueOutcome, MessageId, QueueName,
    ScheduleDefinition, ScheduleId, ScheduleRecord, Upsert,
};

use crate::broker::Inner;
use crate::keys::ShardKeys;
use crate::record::{int, status};
use crate::scripts;

/// Compare-and-set rounds before a schedule call fails `Unavailable`: each
/// lost round means another call changed the record, so this is generous.
pub(crate) const MAX_ROUNDS: usize = 100;

/// A stored record and the exact JSON it was read from (the compare
/// value of the next compare-and-set).
type Stored = (String, ScheduleRecord);

pub(crate) fn encode(record: &ScheduleRecord) -> BrokerResult<String> {
    serde_json::to_string(record).map_err(|e| BrokerError::unavailable(e.to_string()))
}

fn decode(json: &str) -> BrokerResult<ScheduleRecord> {
    serde_json::from_str(json)
        .map_err(|e| BrokerError::unavailable(format!("stored schedule is unreadable: {e}")))
}

/// The record's score in the `cursors` zset: when its next firing step
/// runs (`ScheduleRecord::wake_at`: the cursor, or earlier to write a fire
/// ahead).
pub(crate) fn cursor_arg(record: &ScheduleRecord) -> Vec<u8> {
    record
        .wake_at()
        .map(|t| t.to_string())
        .unwrap_or_default()
        .into_bytes()
}

pub(crate) fn too_contended(what: &str) -> BrokerError {
    BrokerError::unavailable(format!("schedule {what}: too many concurrent changes"))
}

impl Inner {
    fn schedule_keys(&self, queue: &QueueName, id: &ScheduleId) -> (u32, ShardKeys) {
        let shard = self.keys.schedule_shard(id);
        (shard, self.keys.shard(queue, shard))
    }

    pub(crate) async fn read_schedule(
        &self,
        keys: &ShardKeys,
        id: &ScheduleId,
    ) -> BrokerResult<Option<Stored>> {
        let json: Option<String> = self
            .query(
                redis::cmd("HGET").arg(keys.schedules()).arg(id.as_str()),
                false,
            )
            .await?;
        json.map(|j| decode(&j).map(|r| (j, r))).transpose()
    }

    /// The error for a schedule that is not stored.
    async fn schedule_missing(&self, queue: &QueueName, id: &ScheduleId) -> BrokerError {
        match self.queue_exists(queue).await {
            Ok(true) => BrokerError::ScheduleNotFound {
                queue: queue.clone(),
                id: id.clone(),
            },
            Ok(false) => BrokerError::QueueNotFound(queue.clone()),
            Err(e) => e,
        }
    }

    /// Replaces the stored record `expected` ('' = none) by `new` (`None`
    /// = delete), and cancels `cancel` (a fire written ahead for a later
    /// time, `ScheduleRecord::written_ahead`) in the same call.
    /// `Ok(false)`: the stored record is not `expected` any more (read
    /// again). A shard without config is repaired (or the queue created,
    /// with `auto_create`) and the call retried.
    #[expect(
        clippy::too_many_arguments,
        reason = "the compare-and-set's values plus the call's context"
    )]
    async fn schedule_cas(
        &self,
        queue: &QueueName,
        keys: &ShardKeys,
        id: &ScheduleId,
        expected: &str,
        new: Option<&ScheduleRecord>,
        cancel: Option<MessageId>,
        auto_create: bool,
    ) -> BrokerResult<bool> {
        let (json, cursor) = match new {
            Some(record) => (encode(record)?, cursor_arg(record)),
            None => (String::new(), Vec::new()),
        };
        let args = vec![
            id.as_str().into(),
            expected.into(),
            json.into_bytes(),
            cursor,
            cancel
                .map(|m| m.as_str().as_bytes().to_vec())
                .unwrap_or_default(),
        ];
        let now = self.clock.now_ms();
        for _ in 0..2 {
            let reply = self
                .run(scripts::SCHED_SET, keys, now, args.clone())
                .await?;
            match status(&reply)? {
                ("OK", [seq, rest @ ..]) => {
                    self.unindex_seq(int(seq)?);
                    self.woke(queue, rest.first()).await;
                    return Ok(true);
                }
                ("OK", _) => return Ok(true),
                ("CHG", _) => return Ok(false),
                _ => self.ensure_queue(queue, auto_create).await?,
            }
        }
        Err(BrokerError::unavailable(format!(
            "queue {queue} has no shard config"
        )))
    }

    pub(crate) async fn put_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        definition: ScheduleDefinition,
        options: EnqueueOptions,
    ) -> BrokerResult<(Upsert, ScheduleRecord)> {
        self.check_open()?;
        // Validate before creating a queue for an invalid schedule.
        definition.validate()?;
        if !self.queue_exists(queue).await? {
            self.ensure_queue(queue, options.auto_create).await?;
        }
        let (shard, keys) = self.schedule_keys(queue, id);
        for _ in 0..MAX_ROUNDS {
            let (stored, now) = self.read_settled(queue, shard, &keys, id).await?;
            let (upsert, expected, record, cancel) = match stored {
                None => {
                    let record =
                        ScheduleRecord::create(queue.clone(), id.clone(), definition.clone(), now)?;
                    (Upsert::Created, String::new(), record, None)
                }
                Some((json, current)) => match current.replace(definition.clone(), now)? {
                    None => return Ok((Upsert::Updated, current)),
                    Some(record) => (Upsert::Updated, json, record, current.written_ahead(now)),
                },
            };
            let stored = self
                .schedule_cas(
                    queue,
                    &keys,
                    id,
                    &expected,
                    Some(&record),
                    cancel,
                    options.auto_create,
                )
                .await?;
            if stored {
                self.announce_cursor(queue, shard, &record).await;
                return Ok((upsert, record));
            }
        }
        Err(too_contended("put"))
    }

    /// A new cursor: arm this node's timer and tell the others when it is
    /// earlier than what this node knew (the sweep covers a lost event).
    async fn announce_cursor(&self, queue: &QueueName, shard: u32, record: &ScheduleRecord) {
        if let Some(t) = record.wake_at() {
            self.announce_due(queue, shard, t).await;
        }
    }

    pub(crate) async fn get_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<ScheduleRecord> {
        self.check_open()?;
        let (_, keys) = self.schedule_keys(queue, id);
        match self.read_schedule(&keys, id).await? {
            Some((_, record)) => Ok(record.settled(self.clock.now_ms())),
            None => Err(self.schedule_missing(queue, id).await),
        }
    }

    pub(crate) async fn list_schedules(
        &self,
        queue: &QueueName,
    ) -> BrokerResult<Vec<ScheduleRecord>> {
        self.check_open()?;
        if !self.queue_exists(queue).await? {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        let mut all = Vec::new();
        let now = self.clock.now_ms();
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            let values: Vec<String> = self
                .query(redis::cmd("HVALS").arg(keys.schedules()), false)
                .await?;
            for json in values {
                all.push(decode(&json)?.settled(now));
            }
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    pub(crate) async fn delete_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<()> {
        self.check_open()?;
        let (shard, keys) = self.schedule_keys(queue, id);
        for _ in 0..MAX_ROUNDS {
            let (Some((json, current)), now) = self.read_settled(queue, shard, &keys, id).await?
            else {
                return Err(self.schedule_missing(queue, id).await);
            };
            let cancel = current.written_ahead(now);
            if self
                .schedule_cas(queue, &keys, id, &json, None, cancel, false)
                .await?
            {
                return Ok(());
            }
        }
        Err(too_contended("delete"))
    }

    pub(crate) async fn set_schedule_paused(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
        paused: bool,
    ) -> BrokerResult<ScheduleRecord> {
        self.check_open()?;
        let (shard, keys) = self.schedule_keys(queue, id);
        for _ in 0..MAX_ROUNDS {
            let (Some((json, current)), now) = self.read_settled(queue, shard, &keys, id).await?
            else {
                return Err(self.schedule_missing(queue, id).await);
            };
            let changed = if paused {
                current.pause(now)
            } else {
                current.resume(now)
            };
            let Some(record) = changed else {
                return Ok(current);
            };
            let cancel = current.written_ahead(now);
            if self
                .schedule_cas(queue, &keys, id, &json, Some(&record), cancel, false)
                .await?
            {
                self.announce_cursor(queue, shard, &record).await;
                return Ok(record);
            }
        }
        Err(too_contended("pause"))
    }

    pub(crate) async fn trigger_schedule(
        &self,
        queue: &QueueName,
        id: &ScheduleId,
    ) -> BrokerResult<EnqueueOutcome> {
        let record = self.get_schedule(queue, id).await?;
        let request = record.trigger_request(self.clock.now_ms());
        let options = EnqueueOptions { auto_create: false };
        let mut outcomes = self.enqueue(queue, vec![request], options).await?;
        outcomes
            .pop()
            .unwrap_or_else(|| Err(BrokerError::unavailable("trigger not processed")))
    }
}
