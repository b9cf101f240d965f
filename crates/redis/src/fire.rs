//! Firing schedules (docs/redis.md, "Schedules"): a node that finds a due
//! cursor (in a promote reply, or when a change finds it due) reads the
//! record (and, with `overlap: skip`, the previous fire's message), runs
//! core's firing step (`delayd_core::fire_step`) and carries it out with
//! one `sched_fire` call, which only compares and writes: it applies the
//! step if the stored record and the previous message's liveness are
//! still what was read; then reads again while still due.

use std::convert::Infallible;

use delayd_core::firing::fire_reads;
use delayd_core::{
    fire_step, metric, BrokerResult, EnqueueRequest, FirePlan, MessageId, MessageState, QueueName,
    ScheduleId, ScheduleRecord,
};

use crate::broker::Inner;
use crate::keys::ShardKeys;
use crate::messages::{prepare, Prepared};
use crate::record::{self, status};
use crate::schedules::{cursor_arg, encode, too_contended, MAX_ROUNDS};
use crate::scripts;

/// Schedules of one promote reply fired at once (each a few calls in
/// flight on the node's connection).
const FIRES_IN_FLIGHT: usize = 16;

impl Inner {
    /// Fires the due schedules `ids` (space-separated, from the promote
    /// reply) of one shard, [`FIRES_IN_FLIGHT`] at a time (each is its own
    /// compare-and-write call; in flight together they share the
    /// connection's round trips). Failures are logged: the cursor stays
    /// due, and the next sweep (or any node's) fires it. Returns how many
    /// ids the reply listed.
    pub(crate) async fn fire_schedules(&self, queue: &QueueName, shard: u32, ids: &str) -> usize {
        let keys = self.keys.shard(queue, shard);
        let mut ids: Vec<&str> = ids.split(' ').filter(|s| !s.is_empty()).collect();
        let listed = ids.len();
        // Every node's timer for this cursor fires at the same instant:
        // starting at a random one spreads them over different schedules
        // instead of all racing (and all but one losing) on the first.
        if !ids.is_empty() {
            let start = rand::random_range(0..ids.len());
            ids.rotate_left(start);
        }
        let ids: Vec<ScheduleId> = ids
            .into_iter()
            .filter_map(|id| ScheduleId::new(id).ok())
            .collect();
        for chunk in ids.chunks(FIRES_IN_FLIGHT) {
            let mut fires = Vec::with_capacity(chunk.len());
            for id in chunk {
                fires.push(self.fire_logged(queue, shard, &keys, id));
            }
            futures_util::future::join_all(fires).await;
        }
        listed
    }

    async fn fire_logged(&self, queue: &QueueName, shard: u32, keys: &ShardKeys, id: &ScheduleId) {
        if let Err(err) = self.fire_one(queue, shard, keys, id).await {
            tracing::debug!(%queue, schedule = %id, error = %err, "schedule fire failed; retried later");
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
            if !record.needs_step(now) {
                if let Some(t) = record.wake_at() {
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

    /// The schedule as stored (its JSON, the compare value of a change)
    /// and as it stands at `now` (the record [settled], which a change
    /// starts from), once it has no step due (its cursor, or a fire to
    /// write ahead), with the time `now` it was read at. A change that
    /// finds the cursor due (a fire this or
    /// another node's timer has not got to yet) fires under the current
    /// definition first, as if the change had come a moment later, so a
    /// change never drops a fire time that was already due.
    ///
    /// [settled]: ScheduleRecord::settled
    pub(crate) async fn read_settled(
        &self,
        queue: &QueueName,
        shard: u32,
        keys: &ShardKeys,
        id: &ScheduleId,
    ) -> BrokerResult<(Option<(String, ScheduleRecord)>, u64)> {
        for _ in 0..MAX_ROUNDS {
            let now = self.clock.now_ms();
            let Some((json, current)) = self.read_schedule(keys, id).await? else {
                return Ok((None, now));
            };
            let settled = current.settled(now);
            // The step runs when its wake time has come, a write ahead
            // included, as the model settles a schedule at every call.
            if !settled.needs_step(now) {
                return Ok((Some((json, settled)), now));
            }
            self.fire_step(queue, shard, keys, &json, &current, now)
                .await?;
        }
        Err(too_contended("fire"))
    }

    /// One firing step ([`delayd_core::fire_step`]) of the record read as
    /// `json`, carried out by one `sched_fire` call, which writes only if
    /// the stored record and the previous message's liveness are still
    /// what the step read. `Ok(false)`: the queue is gone (stop).
    async fn fire_step(
        &self,
        queue: &QueueName,
        shard: u32,
        keys: &ShardKeys,
        json: &str,
        record: &ScheduleRecord,
        now: u64,
    ) -> BrokerResult<bool> {
        // The one read the step needs before the call (`overlap: skip`):
        // the previous fire's message, with time applied on its shard.
        let previous = fire_reads(&record.settled(now));
        let previous_state = match &previous {
            Some(id) => self.message_state(queue, keys, id, now).await?,
            None => None,
        };
        // Fire ids are not read: `enqueue_items` leaves an id that exists
        // alone, which is what the step's "taken" means.
        let state_of = |id: &MessageId| {
            Ok::<_, Infallible>(if previous.as_ref() == Some(id) {
                previous_state
            } else {
                None
            })
        };
        let step = match fire_step(record, now, state_of) {
            Ok(step) => step,
            Err(never) => match never {},
        };
        let items = self.fire_items(&step.messages, now).await?;
        let mut args: Vec<Vec<u8>> = vec![
            record.id.as_str().as_bytes().to_vec(),
            json.into(),
            previous
                .map(|m| m.as_str().as_bytes().to_vec())
                .unwrap_or_default(),
            if step.previous_live { "1" } else { "0" }.into(),
            encode(&step.record)?.into_bytes(),
            cursor_arg(&step.record),
        ];
        args.extend(items.iter().flat_map(|p| p.args.clone()));
        let reply = self.run(scripts::SCHED_FIRE, keys, now, args).await?;
        let (word, rest) = status(&reply)?;
        match word {
            "OK" => {
                let fires: Vec<u64> = step.messages.iter().map(|(t, _)| *t).collect();
                self.after_fire(queue, shard, &step.plan, &fires, &items, rest, now)
                    .await?;
            }
            "NOQ" => return Ok(false),
            // CHG (another node fired, the schedule changed, or the
            // previous message's liveness changed) or SEQ.
            _ => {}
        }
        Ok(true)
    }

    /// The state of message `id` of this shard, after time is applied on
    /// it (`get`), or `None` when there is no such message (a retained one
    /// has ended: no message, as for the reference model).
    async fn message_state(
        &self,
        queue: &QueueName,
        keys: &ShardKeys,
        id: &MessageId,
        now: u64,
    ) -> BrokerResult<Option<MessageState>> {
        let args = vec![id.as_str().as_bytes().to_vec()];
        let reply = self.run(scripts::GET, keys, now, args).await?;
        match status(&reply)? {
            ("OK", rest) => {
                let state = record::message(queue, rest)?.state;
                Ok((!state.ended()).then_some(state))
            }
            _ => Ok(None),
        }
    }

    /// The fire messages of a step, with fresh seqs.
    async fn fire_items(
        &self,
        messages: &[(u64, EnqueueRequest)],
        now: u64,
    ) -> BrokerResult<Vec<Prepared>> {
        let mut items = Vec::with_capacity(messages.len());
        for (index, (_, request)) in messages.iter().enumerate() {
            items.push(prepare(index, request.clone(), now)?);
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
    /// (of fire times `fires`; `replies`: the enqueue answers, 4 values
    /// per item).
    #[expect(
        clippy::too_many_arguments,
        reason = "the step's plan and items plus the call's context"
    )]
    async fn after_fire(
        &self,
        queue: &QueueName,
        shard: u32,
        plan: &FirePlan,
        fires: &[u64],
        items: &[Prepared],
        replies: &[redis::Value],
        now: u64,
    ) -> BrokerResult<()> {
        let outcomes: Vec<_> = self
            .enqueued(queue, shard, items, replies)
            .await?
            .into_iter()
            .map(Some)
            .collect();
        let created: Vec<u64> = fires
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Some(Ok(o)) if o.created))
            .map(|(t, _)| *t)
            .collect();
        count_plan(queue, plan, created.len() as u64);
        let lateness = metrics::histogram!(metric::SCHEDULE_FIRE_LATENESS_SECONDS, "queue" => queue.to_string());
        // A fire written ahead (its time still to come) is not late: left
        // out, as the embedded store leaves it out.
        for t in created.into_iter().filter(|&t| t <= now) {
            lateness.record((now - t) as f64 / 1_000.0);
        }
        self.index_seqs(queue, &outcomes).await;
        Ok(())
    }
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
