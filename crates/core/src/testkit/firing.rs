//! How the model fires schedules: the shared firing step
//! ([`crate::firing::fire_step`]: plan, enqueue each planned fire, store
//! the advanced record), applied by [`State::settle`] at the moment a
//! broker arming a timer for each cursor would have applied it.
//!
//! The model has no timers: it catches up on every call. Planning at the
//! call's `now` would make a quiet stretch look like an outage (with
//! `catchup: latest` only the newest of the fire times since the last call
//! would be enqueued). So each cursor `t` fires at its *moment*: `t` itself
//! when the wall clock ran with tokio's time since the last call, or `t`
//! plus the forward wall-clock jump when the clock jumped meanwhile (a
//! timer armed before the jump goes off that much later by wall time, and
//! the plan at that moment applies the catch-up rules), and never after
//! `now`. A cursor set during this call (after a fire) fires on time.

use std::collections::BTreeSet;
use std::convert::Infallible;

use super::state::State;
use crate::model::{MessageId, QueueName};
use crate::recurring::ScheduleId;

type ScheduleKey = (QueueName, ScheduleId);

impl State {
    /// The due schedule that fires first, and the wall time it fires at
    /// (see the module docs). `behind`: the forward wall-clock jump since
    /// the last settle; `rearmed`: schedules whose cursor this settle set.
    pub(super) fn first_fire(
        &self,
        now: u64,
        behind: u64,
        rearmed: &BTreeSet<ScheduleKey>,
    ) -> Option<(u64, ScheduleKey)> {
        self.schedules
            .iter()
            .filter_map(|(key, record)| {
                let t = record.wake_at().filter(|&t| t <= now)?;
                let late = if rearmed.contains(key) { 0 } else { behind };
                Some((t.saturating_add(late).min(now), key.clone()))
            })
            .min()
    }

    /// One firing step of schedule `key` at wall time `moment`
    /// ([`crate::firing::fire_step`]): whether the record advanced (a due
    /// cursor always does).
    pub(super) fn fire_step(&mut self, key: &ScheduleKey, moment: u64) -> bool {
        let Some(record) = self.schedules.get(key).cloned() else {
            return false;
        };
        let state_of = |id: &MessageId| {
            let stored = self.messages.get(&(key.0.clone(), id.clone()));
            Ok::<_, Infallible>(stored.map(|s| s.msg.state))
        };
        let step = match crate::firing::fire_step(&record, moment, state_of) {
            Ok(step) => step,
            Err(never) => match never {},
        };
        for (t, request) in step.messages {
            let fired = self.enqueue(&key.0, request, moment);
            debug_assert!(fired.is_ok(), "fire {t} of {record:?}: {fired:?}");
        }
        if step.record == record {
            return false;
        }
        self.schedules.insert(key.clone(), step.record);
        true
    }
}
