//! Firing a schedule whose timer came due (driver round, state lock held).
//!
//! One step: read the record, check it against what the timer was armed
//! for (revision and cursor), run core's firing step
//! ([`delayd_core::fire_step`], which reads the messages it needs through
//! `State::lookup`), enqueue the messages it returns and write the
//! advanced record in one `Tx`,
//! which joins the open commit group whole: the group is written as one
//! engine batch, so after a crash both are on disk or neither is
//! (docs/storage.md, "Schedules"). Steps repeat while the record needs one
//! (a plan is bounded), then the timer is armed at the record's next wake
//! time (`ScheduleRecord::wake_at`): its cursor, or a fire written ahead.
//!
//! A fire adds data: while the store refuses writes (disk reserve, a
//! failed write) or a read fails, nothing changes and the timer is armed
//! again [`RETRY_MS`] later; the plan made then applies the catch-up rules
//! to the time that passed.

use delayd_core::{metric, MessageId, QueueName, ScheduleId, ScheduleRecord};

use crate::broker::Inner;
use crate::error::StoreError;
use crate::schedule_codec::ScheduleHead;
use crate::schedules::ArmedSchedule;
use crate::state::{State, Tx};
use crate::store::Space;

/// Wait before a fire the store refused (or could not read for) is tried
/// again.
pub(crate) const RETRY_MS: u64 = 1_000;

/// Plans carried out per timer per round; a cursor still due after them
/// fires in the next round, so one schedule far behind cannot hold the
/// lock for long.
const STEPS_PER_ROUND: usize = 4;

impl Inner {
    /// Fires the schedule `(queue, id)` whose timer came due. `tx` is the
    /// round's: it is absorbed here (before, so the fire's reads see its
    /// writes, and after each step). Errors are failures after memory
    /// changed: the engine must be reopened.
    pub(crate) fn fire_schedule(
        &self,
        state: &mut State,
        queue: &QueueName,
        id: &ScheduleId,
        now: u64,
        tx: &mut Tx,
    ) -> Result<(), StoreError> {
        let Some(armed) = state.armed(queue, id) else {
            return Ok(());
        };
        self.absorb_writes(state, tx, now);
        if self.check_writable().is_err() || self.disk.check_add().is_err() {
            state.timer_at(queue, id, armed.timer, now + RETRY_MS, now, tx);
            return Ok(());
        }
        let mut record = match state.stored_schedule(&self.store, queue, id) {
            Ok(Some(record)) => record,
            Ok(None) => {
                debug_assert!(false, "armed schedule {queue}/{id} has no record");
                state.disarm_schedule(queue, id);
                return Ok(());
            }
            Err(e) => {
                self.retry(state, armed.timer, queue, id, &e, now, tx);
                return Ok(());
            }
        };
        if !armed_for(armed, &record) {
            // A change of the record always re-arms its timer under the
            // same lock hold; this guard keeps a stale timer harmless.
            debug_assert!(false, "timer of {queue}/{id} armed for {armed:?}");
            state.arm_schedule(queue, id, head(&record), now, tx);
            return Ok(());
        }
        // The head (wake time) is planned once per record: here, then by
        // each step's encoding.
        let mut head = head(&record);
        for _ in 0..STEPS_PER_ROUND {
            if head.wake_at.is_none_or(|t| t > now) {
                break;
            }
            match self.fire_step(state, &record, now, tx) {
                Ok((next, next_head)) => (record, head) = (next, next_head),
                Err(StepError::Read(e)) => {
                    // Earlier steps moved the cursor: armed for it, retried
                    // later.
                    state.arm_schedule(queue, id, head, now, tx);
                    self.retry(state, armed.timer, queue, id, &e, now, tx);
                    return Ok(());
                }
                Err(StepError::Changed(e)) => return Err(e),
            }
        }
        state.arm_schedule(queue, id, head, now, tx);
        Ok(())
    }

    /// One firing step of a due record ([`delayd_core::fire_step`]):
    /// enqueue its fires and store the advanced record, in `tx`, absorbed
    /// whole. Returns the advanced record and its head.
    fn fire_step(
        &self,
        state: &mut State,
        record: &ScheduleRecord,
        now: u64,
        tx: &mut Tx,
    ) -> Result<(ScheduleRecord, ScheduleHead), StepError> {
        let queue = &record.queue;
        // Reads first (inside the step), so that a failed read changes
        // nothing.
        let state_of = |id: &MessageId| {
            let found = state.lookup(&self.store, queue, id)?;
            Ok(found.map(|m| m.state))
        };
        let step = delayd_core::fire_step(record, now, state_of).map_err(StepError::read)?;
        let changed =
            |e: delayd_core::BrokerError| StepError::Changed(StoreError::Corrupt(e.to_string()));
        for (t, request) in &step.messages {
            let message = record.id.fire_message_id(*t);
            state
                .insert_message(queue, message, request.clone(), now, tx)
                .map_err(changed)?;
        }
        let next = step.record;
        let key = crate::schedule_codec::schedule_key(queue, &next.id);
        let (value, head) =
            crate::schedule_codec::encode_schedule(&next).map_err(StepError::Changed)?;
        tx.ws.put(Space::Schedules, key, value);
        self.absorb_writes(state, tx, now);
        record_metrics(queue, &step.plan, step.messages.len(), now);
        Ok((next, head))
    }

    /// Joins `tx`'s writes to the open group, so the next step's reads see
    /// them; the queues that became ready stay in `tx`, for whoever
    /// settles the round to wake their waiters (the driver) or not (a call
    /// catching up).
    fn absorb_writes(&self, state: &mut State, tx: &mut Tx, now: u64) {
        let mut writes = std::mem::take(tx);
        tx.ready_queues = std::mem::take(&mut writes.ready_queues);
        self.absorb_locked(state, writes, now);
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the fire's context, passed on to re-arm its timer"
    )]
    /// Moves the schedule's timer (`timer`) [`RETRY_MS`] on after a failed
    /// read; the index keeps the cursor it was armed for.
    fn retry(
        &self,
        state: &mut State,
        timer: u64,
        queue: &QueueName,
        id: &ScheduleId,
        why: &dyn std::fmt::Display,
        now: u64,
        tx: &mut Tx,
    ) {
        tracing::warn!(%queue, schedule = %id, error = %why, "schedule fire failed reading the store; retrying");
        state.timer_at(queue, id, timer, now + RETRY_MS, now, tx);
    }
}

/// Why a fire step stopped.
enum StepError {
    /// A read failed before anything changed: retried later.
    Read(delayd_core::BrokerError),
    /// A failure after memory changed: the engine must be reopened.
    Changed(StoreError),
}

impl StepError {
    fn read(e: delayd_core::BrokerError) -> Self {
        Self::Read(e)
    }
}

fn armed_for(armed: ArmedSchedule, record: &ScheduleRecord) -> bool {
    record.revision == armed.revision && record.next_fire_at == Some(armed.cursor)
}

fn head(record: &ScheduleRecord) -> ScheduleHead {
    ScheduleHead::of(record)
}

fn record_metrics(queue: &QueueName, plan: &delayd_core::FirePlan, created: usize, now: u64) {
    let label = queue.to_string();
    if created > 0 {
        metrics::counter!(metric::SCHEDULE_FIRES_TOTAL, "queue" => label.clone())
            .increment(created as u64);
    }
    if plan.missed > 0 {
        metrics::counter!(metric::SCHEDULE_MISSED_TOTAL, "queue" => label.clone())
            .increment(plan.missed);
    }
    if plan.skipped > 0 {
        metrics::counter!(metric::SCHEDULE_SKIPPED_TOTAL, "queue" => label.clone())
            .increment(plan.skipped);
    }
    for &t in &plan.fires {
        let lateness = now.saturating_sub(t) as f64 / 1000.0;
        metrics::histogram!(metric::SCHEDULE_FIRE_LATENESS_SECONDS, "queue" => label.clone())
            .record(lateness);
    }
}
