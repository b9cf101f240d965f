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
//! record atomically. Changes (put, pause, resume, delete) are the same
//! compare-and-set (`sched_set`) of a record computed in Rust.

use delayd_core::{
    metric, BrokerError, BrokerResult, EnqueueOptions, EnqueueOutcome, FirePlan, Overlap,
    QueueName, ScheduleDefinition, ScheduleId, ScheduleRecord, Upsert,
};

use crate::broker::Inner;
use crate::keys::ShardKeys;
use crate::messages::{prepare, Prepared};
use crate::record::{int, status, text};
use crate::scripts;

/// Compare-and-set rounds before a schedule call fails `Unavailable`: each
/// lost round means another call changed the record, so this is generous.
const MAX_ROUNDS: usize = 100;

/// A stored record and the exact JSON it was read from (the compare
/// value of the next compare-and-set).
type Stored = (String, ScheduleRecord);

fn encode(record: &ScheduleRecord) -> BrokerResult<String> {
    serde_json::to_string(record).map_err(|e| BrokerError::unavailable(e.to_string()))
}

fn decode(json: &str) -> BrokerResult<ScheduleRecord> {
    serde_json::from_str(json)
        .map_err(|e| BrokerError::unavailable(format!("stored schedule is unreadable: {e}")))
}

fn cursor_arg(record: &ScheduleRecord) -> Vec<u8> {
    record
        .next_fire_at
        .map(|t| t.to_string())
        .unwrap_or_default()
        .into_bytes()
}

fn too_contended(what: &str) -> BrokerError {
    BrokerError::unavailable(format!("schedule {what}: too many concurrent changes"))
}

impl Inner {
    fn schedule_keys(&self, queue: &QueueName, id: &ScheduleId) -> (u32, ShardKeys) {
        let shard = self.keys.schedule_shard(id);
        (shard, self.keys.shard(queue, shard))
    }

    async fn read_schedule(
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
    /// = delete). `Ok(false)`: the stored record is not `expected` any
    /// more (read again). A shard without config is repaired (or the
    /// queue created, with `auto_create`) and the call retried.
    async fn schedule_cas(
        &self,
        queue: &QueueName,
        keys: &ShardKeys,
        id: &ScheduleId,
        expected: &str,
        new: Option<&ScheduleRecord>,
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
        ];
        let now = self.clock.now_ms();
        for _ in 0..2 {
            let reply = self
                .run(scripts::SCHED_SET, keys, now, args.clone())
                .await?;
            match status(&reply)?.0 {
                "OK" => return Ok(true),
                "CHG" => return Ok(false),
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
            let now = self.clock.now_ms();
            let (upsert, expected, record) = match self.read_schedule(&keys, id).await? {
                None => {
                    let record =
                        ScheduleRecord::create(queue.clone(), id.clone(), definition.clone(), now)?;
                    (Upsert::Created, String::new(), record)
                }
                Some((json, current)) if current.is_due(now) => {
                    self.fire_first(queue, shard, &keys, &json, &current, now)
                        .await?;
                    continue;
                }
                Some((json, current)) => match current.replace(definition.clone(), now)? {
                    None => return Ok((Upsert::Updated, current)),
                    Some(record) => (Upsert::Updated, json, record),
                },
            };
            let stored = self
                .schedule_cas(
                    queue,
                    &keys,
                    id,
                    &expected,
                    Some(&record),
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
        if let Some(t) = record.next_fire_at {
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
            Some((_, record)) => Ok(record),
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
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            let values: Vec<String> = self
                .query(redis::cmd("HVALS").arg(keys.schedules()), false)
                .await?;
            for json in values {
                all.push(decode(&json)?);
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
            let now = self.clock.now_ms();
            let Some((json, current)) = self.read_schedule(&keys, id).await? else {
                return Err(self.schedule_missing(queue, id).await);
            };
            if current.is_due(now) {
                self.fire_first(queue, shard, &keys, &json, &current, now)
                    .await?;
                continue;
            }
            if self
                .schedule_cas(queue, &keys, id, &json, None, false)
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
            let now = self.clock.now_ms();
            let Some((json, current)) = self.read_schedule(&keys, id).await? else {
                return Err(self.schedule_missing(queue, id).await);
            };
            if current.is_due(now) {
                self.fire_first(queue, shard, &keys, &json, &current, now)
                    .await?;
                continue;
            }
            let changed = if paused {
                current.pause(now)
            } else {
                current.resume(now)
            };
            let Some(record) = changed else {
                return Ok(current);
            };
            if self
                .schedule_cas(queue, &keys, id, &json, Some(&record), false)
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

    /// Fires the due schedules `ids` (space-separated, from the promote
    /// reply) of one shard. Failures are logged: the cursor stays due, and
    /// the next sweep (or any node's) fires it.
    pub(crate) async fn fire_schedules(&self, queue: &QueueName, shard: u32, ids: &str) {
        let keys = self.keys.shard(queue, shard);
        let mut ids: Vec<&str> = ids.split(' ').filter(|s| !s.is_empty()).collect();
        // Every node's timer for this cursor fires at the same instant:
        // starting at a random one spreads them over different schedules
        // instead of all racing (and all but one losing) on the first.
        if !ids.is_empty() {
            let start = rand::random_range(0..ids.len());
            ids.rotate_left(start);
        }
        for id in ids {
            let Ok(id) = ScheduleId::new(id) else {
                continue;
            };
            if let Err(err) = self.fire_one(queue, shard, &keys, &id).await {
                tracing::debug!(%queue, schedule = %id, error = %err, "schedule fire failed; retried later");
            }
        }
    }

    /// Fires one schedule while its cursor is due (a plan is bounded), then
    /// arms this node's timer for the new cursor.
    async fn fire_one(
        &self,
        queue: &QueueName,
        shard: u32,
        keys: &ShardKeys,
        id: &ScheduleId,
    ) -> BrokerResult<()> {
        for _ in 0..MAX_ROUNDS {
            let now = self.clock.now_ms();
            let Some((json, record)) = self.read_schedule(keys, id).await? else {
                return Ok(());
            };
            if !record.is_due(now) {
                if let Some(t) = record.next_fire_at {
                    self.wake.arm(queue, shard, t);
                }
                return Ok(());
            }
            // Whatever the answer (fired, skipped, lost a race, fresh seqs
            // needed), the record is read again and planned anew.
            if !self
                .fire_step(queue, shard, keys, &json, &record, now)
                .await?
            {
                return Ok(());
            }
        }
        Err(too_contended("fire"))
    }

    /// A change found the cursor due (a fire this or another node's timer
    /// has not got to yet): fire under the current definition first, as if
    /// the change had come a moment later, so a change never drops a fire
    /// time that was already due.
    async fn fire_first(
        &self,
        queue: &QueueName,
        shard: u32,
        keys: &ShardKeys,
        json: &str,
        record: &ScheduleRecord,
        now: u64,
    ) -> BrokerResult<()> {
        self.fire_step(queue, shard, keys, json, record, now)
            .await
            .map(|_| ())
    }

    /// One `sched_fire` call for the record read as `json`. `Ok(false)`:
    /// the queue is gone (stop).
    async fn fire_step(
        &self,
        queue: &QueueName,
        shard: u32,
        keys: &ShardKeys,
        json: &str,
        record: &ScheduleRecord,
        now: u64,
    ) -> BrokerResult<bool> {
        let plan = record.plan(now, false);
        // With `overlap: skip` the function checks the previous message
        // itself and, if it is live, stores this plan instead (at most one
        // fire per plan there, which then becomes a skip).
        let previous = record
            .previous_message()
            .filter(|_| record.definition.overlap == Overlap::Skip);
        let blocked = match previous {
            Some(_) => record.plan(now, true),
            None => plan.clone(),
        };
        let fired = record.apply(&plan);
        let skipped = record.apply(&blocked);
        let items = self.fire_items(record, &plan, now).await?;
        let mut args: Vec<Vec<u8>> = vec![
            id_bytes(record),
            json.into(),
            previous
                .map(|m| m.as_str().as_bytes().to_vec())
                .unwrap_or_default(),
            encode(&fired)?.into_bytes(),
            cursor_arg(&fired),
            encode(&skipped)?.into_bytes(),
            cursor_arg(&skipped),
        ];
        args.extend(items.iter().flat_map(|p| p.args.clone()));
        let reply = self.run(scripts::SCHED_FIRE, keys, now, args).await?;
        let (word, rest) = status(&reply)?;
        match (word, rest.first().map(text).transpose()?) {
            ("OK", Some("F")) => {
                self.after_fire(queue, shard, &plan, &items, &rest[1..], now)
                    .await?;
            }
            ("OK", Some("S")) => count_plan(queue, &blocked, 0),
            ("NOQ", _) => return Ok(false),
            // CHG (another node fired, or the schedule changed) or SEQ.
            _ => {}
        }
        Ok(true)
    }

    /// The fire messages of `plan`, with fresh seqs.
    async fn fire_items(
        &self,
        record: &ScheduleRecord,
        plan: &FirePlan,
        now: u64,
    ) -> BrokerResult<Vec<Prepared>> {
        let mut items = Vec::with_capacity(plan.fires.len());
        for (index, t) in plan.fires.iter().enumerate() {
            items.push(prepare(index, record.fire_request(*t), now)?);
        }
        if items.is_empty() {
            return Ok(items);
        }
        let mut seq = self.alloc_seqs(items.len() as u64).await?;
        for p in &mut items {
            p.args.insert(1, seq.to_string().into_bytes());
            p.seq = seq;
            seq += 1;
        }
        Ok(items)
    }

    /// Metrics, wake-ups and the seq index after a fire enqueued `items`
    /// (`replies`: the enqueue answers, 4 values per item).
    async fn after_fire(
        &self,
        queue: &QueueName,
        shard: u32,
        plan: &FirePlan,
        items: &[Prepared],
        replies: &[redis::Value],
        now: u64,
    ) -> BrokerResult<()> {
        let mut outcomes = Vec::with_capacity(items.len());
        let (mut ready, mut earliest) = (false, None::<u64>);
        for (item, r) in items.iter().zip(replies.chunks(4)) {
            let created = int(&r[0])? == 1;
            let deliver_at = int(&r[2])?;
            match (created, text(&r[3])?) {
                (true, "R") => ready = true,
                (true, "S") => earliest = Some(earliest.map_or(deliver_at, |e| e.min(deliver_at))),
                _ => {}
            }
            outcomes.push(Some(Ok(EnqueueOutcome {
                id: item.id.clone(),
                seq: int(&r[1])?,
                deliver_at,
                created,
            })));
        }
        let created: Vec<u64> = plan
            .fires
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Some(Ok(o)) if o.created))
            .map(|(t, _)| *t)
            .collect();
        count_plan(queue, plan, created.len() as u64);
        let lateness = metrics::histogram!(metric::SCHEDULE_FIRE_LATENESS_SECONDS, "queue" => queue.to_string());
        for t in created {
            lateness.record(now.saturating_sub(t) as f64 / 1_000.0);
        }
        self.index_seqs(queue, &outcomes).await;
        if ready {
            self.announce_ready(queue).await;
        }
        if let Some(due) = earliest {
            self.announce_due(queue, shard, due).await;
        }
        Ok(())
    }
}

fn id_bytes(record: &ScheduleRecord) -> Vec<u8> {
    record.id.as_str().as_bytes().to_vec()
}

/// Adds a carried-out plan to the schedule counters (`fires`: messages it
/// created; an id still live created nothing).
fn count_plan(queue: &QueueName, plan: &FirePlan, fires: u64) {
    let label = queue.to_string();
    if fires > 0 {
        metrics::counter!(metric::SCHEDULE_FIRES_TOTAL, "queue" => label.clone()).increment(fires);
    }
    if plan.missed > 0 {
        metrics::counter!(metric::SCHEDULE_MISSED_TOTAL, "queue" => label.clone())
            .increment(plan.missed);
    }
    if plan.skipped > 0 {
        metrics::counter!(metric::SCHEDULE_SKIPPED_TOTAL, "queue" => label).increment(plan.skipped);
    }
}
