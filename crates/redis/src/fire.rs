//! Firing schedules (docs/redis.md, "Schedules"): a node that finds a due
//! cursor (in a promote reply, or when a change finds it due) reads the
//! record, plans in Rust (`ScheduleRecord::plan`) and carries the plan out
//! with one `sched_fire` call, which applies it only if the stored record
//! is still the one planned from; then reads again while still due.

use delayd_core::{metric, BrokerResult, FirePlan, Overlap, QueueName, ScheduleId, ScheduleRecord};

use crate::broker::Inner;
use crate::keys::ShardKeys;
use crate::messages::{prepare, Prepared};
use crate::record::{status, text};
use crate::schedules::{cursor_arg, encode, too_contended, MAX_ROUNDS};
use crate::scripts;

impl Inner {
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

    /// The schedule as stored (its JSON and record) once its cursor is not
    /// due, with the time it was read at. A change that finds the cursor
    /// due (a fire this or another node's timer has not got to yet) fires
    /// under the current definition first, as if the change had come a
    /// moment later, so a change never drops a fire time that was already
    /// due.
    pub(crate) async fn read_settled(
        &self,
        queue: &QueueName,
        shard: u32,
        keys: &ShardKeys,
        id: &ScheduleId,
    ) -> BrokerResult<(Option<(String, ScheduleRecord)>, u64)> {
        for _ in 0..MAX_ROUNDS {
            let now = self.clock.now_ms();
            match self.read_schedule(keys, id).await? {
                Some((json, current)) if current.is_due(now) => {
                    self.fire_step(queue, shard, keys, &json, &current, now)
                        .await?;
                }
                stored => return Ok((stored, now)),
            }
        }
        Err(too_contended("fire"))
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
        let outcomes: Vec<_> = self
            .enqueued(queue, shard, items, replies)
            .await?
            .into_iter()
            .map(|o| Some(Ok(o)))
            .collect();
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
