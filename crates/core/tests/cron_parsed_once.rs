//! A schedule's cron is parsed once per definition, not once per plan: a
//! firing step settles, plans, checks the write-ahead, computes the wake
//! time and the next fires, each of which needs the compiled cron. A binary
//! of its own: it reads the process-wide count of parses, which tests
//! running beside it would move.

use delayd_core::recurring::{
    cron_parses, Catchup, MessageTemplate, Overlap, Recurrence, ScheduleDefinition, ScheduleId,
    ScheduleRecord, DEFAULT_CATCHUP_WINDOW_MS,
};
use delayd_core::{fire_step, MessageState, QueueName};

const T0: u64 = 1_700_000_000_000;

fn every_minute_in(tz: &str) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence: Recurrence::Cron {
            expr: "17 * * * * *".to_string(),
            tz: tz.to_string(),
        },
        start_at: T0,
        end_at: None,
        max_fires: None,
        message: MessageTemplate::default(),
        catchup: Catchup::Latest,
        catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
        overlap: Overlap::Allow,
        jitter_ms: 0,
        paused: false,
    }
}

#[test]
fn a_cron_is_parsed_at_most_once_per_firing_step() {
    let parses = cron_parses();
    let queue = QueueName::new("q").expect("name");
    let id = ScheduleId::new("s").expect("id");
    let mut record = ScheduleRecord::create(queue, id, every_minute_in("Europe/Berlin"), T0)
        .expect("a valid definition");
    assert!(
        cron_parses() - parses <= 1,
        "creating the schedule parsed its cron {} times",
        cron_parses() - parses
    );
    // A day of firing steps, each at its wake time, as a backend runs them;
    // the record is what a store would hand back (a copy each step).
    let before_steps = cron_parses();
    for _ in 0..1440 {
        let now = record.wake_at().expect("a cursor");
        let step = fire_step(&record, now, |_| Ok::<_, ()>(None::<MessageState>)).expect("a step");
        let _ = step.record.next_fires();
        record = step.record.clone();
    }
    assert_eq!(
        cron_parses(),
        before_steps,
        "1,440 firing steps parsed the cron again"
    );
    // Another zone, same expression: the parsed cron serves it too.
    let other = ScheduleRecord::create(
        QueueName::new("q").expect("name"),
        ScheduleId::new("t").expect("id"),
        every_minute_in("America/New_York"),
        T0,
    )
    .expect("a valid definition");
    assert!(other.wake_at().is_some());
    assert_eq!(cron_parses(), before_steps, "another zone parsed it again");
}
