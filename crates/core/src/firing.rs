//! The firing step of a schedule, written once (issue 31): every backend
//! and the model call [`fire_step`] and only store what it returns.
//!
//! One step, for a record whose cursor is due at `now`:
//! 1. whether the previous fire's message is *live* (scheduled, ready or
//!    leased; a dead or gone one is not), read only with `overlap: skip`;
//! 2. the plan ([`ScheduleRecord::plan`]): which fire times to enqueue,
//!    how many were missed or skipped, the new cursor;
//! 3. the messages to write: each planned fire time's message
//!    ([`ScheduleRecord::fire_request`]) whose id is not already taken (an
//!    enqueue of an id that exists, in any state, adds nothing);
//! 4. the advanced record ([`ScheduleRecord::apply`]).
//!
//! The backend writes the messages and the record in one atomic step
//! (docs/schedules.md). What it knows of message ids comes in through a
//! closure, `state_of`, answering a message's state by id, or `None` when
//! there is no such message. A backend that reads before its write and
//! writes in a later step (Redis) reads the previous message first
//! ([`fire_reads`]), checks in the write that it is still what was read
//! (else plans again), and answers `None` for the fire ids, which its write
//! then must not overwrite if they exist.

use crate::message::{EnqueueRequest, MessageState};
use crate::model::MessageId;
use crate::recurring::{FirePlan, Overlap, ScheduleRecord};

/// What one firing step does.
#[derive(Clone, Debug, PartialEq)]
pub struct FireStep {
    /// The plan carried out (for the counters: fires, missed, skipped).
    pub plan: FirePlan,
    /// Whether the previous fire's message was found live (`overlap: skip`
    /// only; `false` otherwise): what a backend that writes in a later step
    /// checks again there.
    pub previous_live: bool,
    /// The messages to enqueue, as `(fire time, request)`, oldest first:
    /// the planned fire times whose message id was not taken.
    pub messages: Vec<(u64, EnqueueRequest)>,
    /// The record after the step, stored with the messages.
    pub record: ScheduleRecord,
}

/// The message whose state the step reads before it plans: the previous
/// fire's, when `overlap: skip` makes its liveness matter.
pub fn fire_reads(record: &ScheduleRecord) -> Option<MessageId> {
    record
        .previous_message()
        .filter(|_| record.definition.overlap == Overlap::Skip)
}

/// Whether a message in `state` blocks a fire under `overlap: skip`.
pub fn is_live(state: Option<MessageState>) -> bool {
    state.is_some_and(|state| state != MessageState::Dead)
}

/// One firing step of `record` at `now` (see the module docs). An empty
/// plan, no messages and the record unchanged when the cursor is not due.
/// `state_of` fails only as the backend's reads fail; nothing is decided
/// then.
pub fn fire_step<E>(
    record: &ScheduleRecord,
    now: u64,
    mut state_of: impl FnMut(&MessageId) -> Result<Option<MessageState>, E>,
) -> Result<FireStep, E> {
    let previous_live = match fire_reads(record) {
        Some(previous) => is_live(state_of(&previous)?),
        None => false,
    };
    let plan = record.plan(now, previous_live);
    let mut messages = Vec::with_capacity(plan.fires.len());
    for &t in &plan.fires {
        let request = record.fire_request(t);
        let id = record.id.fire_message_id(t);
        if state_of(&id)?.is_none() {
            messages.push((t, request));
        }
    }
    Ok(FireStep {
        record: record.apply(&plan),
        plan,
        previous_live,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::convert::Infallible;

    use super::*;
    use crate::model::QueueName;
    use crate::recurring::{
        Catchup, MessageTemplate, Recurrence, ScheduleDefinition, ScheduleId,
        DEFAULT_CATCHUP_WINDOW_MS,
    };

    const START: u64 = 1_800_000_000_000;

    fn record(overlap: Overlap) -> ScheduleRecord {
        let definition = ScheduleDefinition {
            recurrence: Recurrence::Every { every_ms: 1_000 },
            start_at: START,
            end_at: None,
            max_fires: None,
            message: MessageTemplate::default(),
            catchup: Catchup::All,
            catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
            overlap,
            jitter_ms: 0,
            paused: false,
        };
        let queue = QueueName::new("q").expect("queue name");
        let id = ScheduleId::new("s").expect("schedule id");
        ScheduleRecord::create(queue, id, definition, START).expect("valid definition")
    }

    fn step(
        record: &ScheduleRecord,
        now: u64,
        states: &BTreeMap<MessageId, MessageState>,
    ) -> FireStep {
        let view = |id: &MessageId| Ok::<_, Infallible>(states.get(id).copied());
        match fire_step(record, now, view) {
            Ok(step) => step,
            Err(never) => match never {},
        }
    }

    #[test]
    fn fires_each_due_time_and_advances() {
        let r = record(Overlap::Allow);
        let s = step(&r, START + 2_500, &BTreeMap::new());
        let times: Vec<u64> = s.messages.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![START, START + 1_000, START + 2_000]);
        assert_eq!(s.record.fires, 3);
        assert_eq!(s.record.last_fire_at, Some(START + 2_000));
        assert_eq!(s.record.next_fire_at, Some(START + 3_000));
        assert!(!s.previous_live, "allow reads nothing");
    }

    #[test]
    fn a_taken_fire_id_is_not_written_again() {
        let r = record(Overlap::Allow);
        let taken = BTreeMap::from([(r.id.fire_message_id(START), MessageState::Dead)]);
        let s = step(&r, START, &taken);
        assert!(s.messages.is_empty(), "{s:?}");
        assert_eq!(s.record.fires, 1, "the fire counts: its message exists");
    }

    #[test]
    fn skip_reads_the_previous_message() {
        let r = record(Overlap::Skip);
        let first = step(&r, START, &BTreeMap::new());
        let fired = first.record;
        let previous = fired.id.fire_message_id(START);
        for (state, live) in [
            (Some(MessageState::Scheduled), true),
            (Some(MessageState::Ready), true),
            (Some(MessageState::Leased), true),
            (Some(MessageState::Dead), false),
            (None, false),
        ] {
            let states: BTreeMap<_, _> = state.map(|s| (previous.clone(), s)).into_iter().collect();
            let s = step(&fired, START + 1_000, &states);
            assert_eq!(s.previous_live, live, "previous {state:?}");
            assert_eq!(s.messages.len(), usize::from(!live), "previous {state:?}");
            assert_eq!(s.plan.skipped, u64::from(live), "previous {state:?}");
            assert_eq!(s.record.next_fire_at, Some(START + 2_000));
        }
    }

    #[test]
    fn not_due_changes_nothing() {
        let r = record(Overlap::Allow);
        let s = step(&r, START - 1, &BTreeMap::new());
        assert!(s.plan.is_empty() && s.messages.is_empty());
        assert_eq!(s.record, r);
    }
}
