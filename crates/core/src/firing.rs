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
//! 4. the advanced record ([`ScheduleRecord::apply`]);
//! 5. the fire written ahead: when the new cursor is within
//!    [`crate::recurring::WRITE_AHEAD_MS`] and may be written ahead
//!    ([`ScheduleRecord::ahead_due`]), its message is one more message to
//!    write, and the record notes it (`ahead`). At its fire time the record
//!    counts it as fired ([`ScheduleRecord::settled`], which starts every
//!    step), without another write.
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
    /// the planned fire times whose message id was not taken, then the
    /// fire written ahead (if its id was not taken).
    pub messages: Vec<(u64, EnqueueRequest)>,
    /// The fire time written ahead by this step, if any.
    pub ahead: Option<u64>,
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
    state.is_some_and(|state| state != MessageState::Dead && !state.ended())
}

/// One firing step of `record` at `now` (see the module docs). An empty
/// plan, no messages and the record as [settled](ScheduleRecord::settled)
/// at `now` when the cursor is not due and nothing is to be written ahead.
/// `state_of` fails only as the backend's reads fail; nothing is decided
/// then.
pub fn fire_step<E>(
    record: &ScheduleRecord,
    now: u64,
    mut state_of: impl FnMut(&MessageId) -> Result<Option<MessageState>, E>,
) -> Result<FireStep, E> {
    let settled = record.settled(now);
    let previous_live = match fire_reads(&settled) {
        Some(previous) => is_live(state_of(&previous)?),
        None => false,
    };
    let plan = settled.plan(now, previous_live);
    let mut messages = Vec::with_capacity(plan.fires.len() + 1);
    for &t in &plan.fires {
        let id = settled.id.fire_message_id(t);
        if state_of(&id)?.is_none() {
            messages.push((t, settled.fire_request(t)));
        }
    }
    let mut advanced = settled.apply(&plan);
    let ahead = advanced.ahead_due(now);
    if let Some(t) = ahead {
        // A taken id counts as written, as it would count as fired.
        if state_of(&advanced.id.fire_message_id(t))?.is_none() {
            messages.push((t, advanced.fire_request(t)));
        }
        advanced.ahead = Some(t);
    }
    Ok(FireStep {
        record: advanced,
        plan,
        previous_live,
        messages,
        ahead,
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
        DEFAULT_CATCHUP_WINDOW_MS, WRITE_AHEAD_MS,
    };

    const START: u64 = 1_800_000_000_000;

    fn record(overlap: Overlap) -> ScheduleRecord {
        every(1_000, overlap)
    }

    fn every(every_ms: u64, overlap: Overlap) -> ScheduleRecord {
        let definition = ScheduleDefinition {
            recurrence: Recurrence::Every { every_ms },
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
        // The three due, then the next one, written ahead.
        assert_eq!(
            times,
            vec![START, START + 1_000, START + 2_000, START + 3_000]
        );
        assert_eq!(s.plan.fires, vec![START, START + 1_000, START + 2_000]);
        assert_eq!(s.record.fires, 3);
        assert_eq!(s.record.last_fire_at, Some(START + 2_000));
        assert_eq!(s.record.next_fire_at, Some(START + 3_000));
        assert_eq!(
            (s.ahead, s.record.ahead),
            (Some(START + 3_000), Some(START + 3_000))
        );
        assert!(!s.previous_live, "allow reads nothing");
    }

    /// A fire is written [`WRITE_AHEAD_MS`] before its time; the record
    /// shows it as fired only from that time on, and the next step runs
    /// when the next fire can be written ahead.
    #[test]
    fn a_fire_is_written_ahead_and_counts_at_its_time() {
        let r = every(3_600_000, Overlap::Allow);
        let first = step(&r, START, &BTreeMap::new());
        let t = START + 3_600_000;
        assert_eq!(first.record.wake_at(), Some(t - WRITE_AHEAD_MS));
        let early = step(&first.record, t - WRITE_AHEAD_MS - 1, &BTreeMap::new());
        assert!(
            early.messages.is_empty() && early.ahead.is_none(),
            "{early:?}"
        );
        let ahead = step(&first.record, t - WRITE_AHEAD_MS, &BTreeMap::new());
        let times: Vec<u64> = ahead.messages.iter().map(|(t, _)| *t).collect();
        assert_eq!((times, ahead.ahead), (vec![t], Some(t)));
        let written = ahead.record;
        assert_eq!((written.fires, written.next_fire_at), (1, Some(t)));
        assert_eq!(written.settled(t - 1), written, "not yet its time");
        let settled = written.settled(t);
        assert_eq!(
            (
                settled.fires,
                settled.last_fire_at,
                settled.next_fire_at,
                settled.ahead
            ),
            (2, Some(t), Some(t + 3_600_000), None)
        );
        // Not before its time, then when the next can be written ahead.
        assert_eq!(written.wake_at(), Some(t + 3_600_000 - WRITE_AHEAD_MS));
        assert!(!written.needs_step(t));
        // A change before the time cancels it; after, it is a fire.
        assert_eq!(
            written.written_ahead(t - 1),
            Some(written.id.fire_message_id(t))
        );
        assert_eq!(settled.written_ahead(t), None);
        let paused = written.pause(t - 1).expect("pause");
        assert_eq!((paused.ahead, paused.fires), (None, 1));
        // The step at the next wake settles it and writes the next ahead,
        // without writing `t` again (acked by then: gone).
        let next = step(&written, t + 3_600_000 - WRITE_AHEAD_MS, &BTreeMap::new());
        let times: Vec<u64> = next.messages.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![t + 3_600_000]);
        assert!(next.plan.fires.is_empty(), "{next:?}");
        assert_eq!(next.record.fires, 2);
    }

    /// A minutely schedule writes its next fire half a period after a fire.
    #[test]
    fn a_period_shorter_than_the_lead_writes_at_the_fire() {
        let r = every(60_000, Overlap::Allow);
        let first = step(&r, START, &BTreeMap::new());
        assert_eq!(first.ahead, None, "60 s out: not yet");
        assert_eq!(
            first.record.wake_at(),
            Some(START + 60_000 - WRITE_AHEAD_MS)
        );
        let r = every(10_000, Overlap::Allow);
        let first = step(&r, START, &BTreeMap::new());
        assert_eq!(first.ahead, Some(START + 10_000));
        assert_eq!(
            first.record.wake_at(),
            Some(START + 10_000),
            "at its fire time"
        );
    }

    #[test]
    fn skip_is_not_written_ahead_and_a_taken_id_is_not_written() {
        let r = every(3_600_000, Overlap::Skip);
        let first = step(&r, START, &BTreeMap::new());
        let t = START + 3_600_000;
        assert_eq!(first.record.wake_at(), Some(t));
        let s = step(&first.record, t - 1, &BTreeMap::new());
        assert!(s.messages.is_empty() && s.ahead.is_none(), "{s:?}");

        let r = every(3_600_000, Overlap::Allow);
        let first = step(&r, START, &BTreeMap::new());
        let taken = BTreeMap::from([(r.id.fire_message_id(t), MessageState::Scheduled)]);
        let s = step(&first.record, t - 1, &taken);
        assert!(s.messages.is_empty(), "{s:?}");
        assert_eq!(s.record.ahead, Some(t), "taken counts as written");
    }

    #[test]
    fn a_taken_fire_id_is_not_written_again() {
        let r = every(3_600_000, Overlap::Allow);
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
        let r = every(3_600_000, Overlap::Allow);
        let s = step(&r, START - WRITE_AHEAD_MS - 1, &BTreeMap::new());
        assert!(s.plan.is_empty() && s.messages.is_empty());
        assert_eq!(s.record, r);
    }
}
