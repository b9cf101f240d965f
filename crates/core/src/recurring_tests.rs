//! Fire-time arithmetic against instants written out by hand (UTC), and the
//! firing step's rules. The conformance suite (testkit) checks the same
//! rules through every broker.

use super::*;

fn ms(rfc3339: &str) -> u64 {
    DateTime::parse_from_rfc3339(rfc3339)
        .expect("a test instant")
        .timestamp_millis() as u64
}

fn cron(expr: &str, tz: &str) -> Recurrence {
    Recurrence::Cron {
        expr: expr.into(),
        tz: tz.into(),
    }
}

fn fires(recurrence: &Recurrence, from: &str, count: usize) -> Vec<u64> {
    preview(recurrence, ms(from), count).expect("a valid recurrence")
}

fn all(instants: &[&str]) -> Vec<u64> {
    instants.iter().map(|s| ms(s)).collect()
}

#[test]
fn berlin_gap_fixed_time_fires_once_after_the_gap() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    let got = fires(
        &cron("30 2 * * *", "Europe/Berlin"),
        "2026-03-28T00:00:00Z",
        3,
    );
    assert_eq!(
        got,
        all(&[
            "2026-03-28T01:30:00Z", // 02:30 CET
            "2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST
            "2026-03-30T00:30:00Z", // 02:30 CEST
        ])
    );
}

#[test]
fn berlin_gap_interval_skips_the_missing_hour() {
    let got = fires(
        &cron("*/30 * * * *", "Europe/Berlin"),
        "2026-03-29T00:00:00Z",
        4,
    );
    assert_eq!(
        got,
        all(&[
            "2026-03-29T00:00:00Z", // 01:00 CET
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST (02:00 and 02:30 do not exist)
            "2026-03-29T01:30:00Z",
        ])
    );
    // A list in the gap hour is not fixed-time: nothing in the gap.
    let got = fires(
        &cron("0,30 2 * * *", "Europe/Berlin"),
        "2026-03-28T12:00:00Z",
        2,
    );
    assert_eq!(got, all(&["2026-03-30T00:00:00Z", "2026-03-30T00:30:00Z"]));
}

#[test]
fn berlin_fold_fixed_time_fires_at_the_first_occurrence_only() {
    // 2026-10-25: 03:00 CEST goes back to 02:00 CET (01:00 UTC).
    let got = fires(
        &cron("30 2 * * *", "Europe/Berlin"),
        "2026-10-24T12:00:00Z",
        2,
    );
    assert_eq!(
        got,
        all(&["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]) // 02:30 CEST; then 02:30 CET
    );
}

#[test]
fn berlin_fold_interval_fires_in_both_passes() {
    let got = fires(
        &cron("*/30 2 * * *", "Europe/Berlin"),
        "2026-10-24T12:00:00Z",
        5,
    );
    assert_eq!(
        got,
        all(&[
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:30:00Z", // 02:30 CEST
            "2026-10-25T01:00:00Z", // 02:00 CET
            "2026-10-25T01:30:00Z", // 02:30 CET
            "2026-10-26T01:00:00Z",
        ])
    );
}

#[test]
fn new_york_gap_and_fold() {
    // 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC); 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC).
    let daily = cron("30 2 * * *", "America/New_York");
    assert_eq!(
        fires(&daily, "2026-03-07T00:00:00Z", 3),
        all(&[
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z", // gap: 03:00 EDT
            "2026-03-09T06:30:00Z",
        ])
    );
    let early = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        fires(&early, "2026-10-31T12:00:00Z", 2),
        all(&["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]) // 01:30 EDT once
    );
    let hourly = cron("30 * * * *", "America/New_York");
    assert_eq!(
        fires(&hourly, "2026-11-01T04:00:00Z", 4),
        all(&[
            "2026-11-01T04:30:00Z", // 00:30 EDT
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-01T06:30:00Z", // 01:30 EST
            "2026-11-01T07:30:00Z", // 02:30 EST
        ])
    );
}

#[test]
fn lord_howe_half_hour_shift() {
    // Lord Howe: +10:30 standard, +11:00 summer. 2026-10-04 02:00 -> 02:30
    // (15:30 UTC on the 3rd); 2026-04-05 02:00 -> 01:30 (15:00 UTC on the 4th).
    let gap = cron("15 2 * * *", "Australia/Lord_Howe");
    assert_eq!(
        fires(&gap, "2026-10-02T12:00:00Z", 3),
        all(&[
            "2026-10-02T15:45:00Z", // 02:15 +10:30
            "2026-10-03T15:30:00Z", // 02:15 does not exist: 02:30 +11:00
            "2026-10-04T15:15:00Z", // 02:15 +11:00
        ])
    );
    let fold = cron("45 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        fires(&fold, "2026-04-03T12:00:00Z", 2),
        all(&["2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z"]) // 01:45 +11:00, once on the 5th
    );
    let every_15 = cron("*/15 1 * * *", "Australia/Lord_Howe");
    assert_eq!(
        fires(&every_15, "2026-04-04T14:40:00Z", 4),
        all(&[
            "2026-04-04T14:45:00Z", // 01:45 +11:00
            "2026-04-04T15:00:00Z", // 01:30 +10:30 (repeated half hour)
            "2026-04-04T15:15:00Z", // 01:45 +10:30
            "2026-04-05T14:30:00Z", // 01:00 +10:30 next day
        ])
    );
}

#[test]
fn kathmandu_quarter_hour_offset() {
    let got = fires(
        &cron("0 9 * * *", "Asia/Kathmandu"),
        "2026-06-30T00:00:00Z",
        2,
    );
    assert_eq!(got, all(&["2026-06-30T03:15:00Z", "2026-07-01T03:15:00Z"]));
}

#[test]
fn last_weekday_and_nth() {
    let last_day = cron("0 12 L * *", "UTC");
    assert_eq!(
        fires(&last_day, "2026-02-01T00:00:00Z", 2),
        all(&["2026-02-28T12:00:00Z", "2026-03-31T12:00:00Z"])
    );
    // 15W: the weekday nearest the 15th (2026-08-15 is a Saturday: Friday 14th).
    let nearest = cron("0 9 15W * *", "UTC");
    assert_eq!(
        fires(&nearest, "2026-08-01T00:00:00Z", 2),
        all(&["2026-08-14T09:00:00Z", "2026-09-15T09:00:00Z"])
    );
    // 1#2: the second Monday.
    let second_monday = cron("0 9 * * 1#2", "UTC");
    assert_eq!(
        fires(&second_monday, "2026-11-01T00:00:00Z", 2),
        all(&["2026-11-09T09:00:00Z", "2026-12-14T09:00:00Z"])
    );
    // 5L: the last Friday.
    let last_friday = cron("0 9 * * 5L", "UTC");
    assert_eq!(
        fires(&last_friday, "2026-11-01T00:00:00Z", 1),
        all(&["2026-11-27T09:00:00Z"])
    );
}

#[test]
fn macros_names_seconds_and_classic_day_or() {
    assert_eq!(
        fires(&cron("@daily", "UTC"), "2026-11-25T10:00:00Z", 1),
        all(&["2026-11-26T00:00:00Z"])
    );
    assert_eq!(
        fires(&cron("0 0 1 jan *", "UTC"), "2026-11-25T10:00:00Z", 1),
        fires(&cron("@yearly", "UTC"), "2026-11-25T10:00:00Z", 1)
    );
    assert_eq!(
        fires(&cron("*/20 * * * * *", "UTC"), "2026-11-25T10:00:01Z", 2),
        all(&["2026-11-25T10:00:20Z", "2026-11-25T10:00:40Z"])
    );
    // Both day fields restricted: either matches (the 13th, or a Friday).
    assert_eq!(
        fires(&cron("0 0 13 * FRI", "UTC"), "2026-11-12T00:00:01Z", 3),
        all(&[
            "2026-11-13T00:00:00Z", // a Friday the 13th
            "2026-11-20T00:00:00Z",
            "2026-11-27T00:00:00Z",
        ])
    );
    // 0 and 7 are both Sunday.
    assert_eq!(
        fires(&cron("0 0 * * 0", "UTC"), "2026-11-25T00:00:00Z", 1),
        fires(&cron("0 0 * * 7", "UTC"), "2026-11-25T00:00:00Z", 1)
    );
}

#[test]
fn bad_recurrences_name_their_field() {
    let cases = [
        (cron("61 * * * *", "UTC"), "cron"),
        (cron("* * * *", "UTC"), "cron"),
        (cron("0 0 0 1 1 * 2030", "UTC"), "cron"),
        (cron("0 0 30 2 *", "UTC"), "cron"), // never: no 30th of February
        (cron("0 0 * * *", "Mars/Olympus"), "tz"),
        (Recurrence::Every { every_ms: 999 }, "every_ms"),
    ];
    for (recurrence, field) in cases {
        match recurrence.compile(ms("2026-01-01T00:00:00Z")) {
            Err(BrokerError::InvalidArgument(text)) => {
                assert!(
                    text.starts_with(&format!("{field}:")),
                    "{recurrence:?}: {text}"
                )
            }
            other => panic!("{recurrence:?} gave {other:?}"),
        }
    }
}

#[test]
fn every_ms_is_anchored_at_start() {
    let every = Recurrence::Every { every_ms: 60_000 };
    let times = every.compile(1_000).expect("valid");
    assert_eq!(times.at_or_after(0), Some(1_000));
    assert_eq!(times.at_or_after(1_000), Some(1_000));
    assert_eq!(times.at_or_after(1_001), Some(61_000));
    assert_eq!(times.after(61_000), Some(121_000));
}

fn definition(recurrence: Recurrence, start_at: u64) -> ScheduleDefinition {
    ScheduleDefinition {
        recurrence,
        start_at,
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

fn record(definition: ScheduleDefinition, now: u64) -> ScheduleRecord {
    ScheduleRecord::create(
        QueueName::new("q").expect("name"),
        ScheduleId::new("s").expect("id"),
        definition,
        now,
    )
    .expect("valid definition")
}

#[test]
fn catchup_latest_all_and_window() {
    let every = Recurrence::Every { every_ms: 1_000 };
    let mut def = definition(every, 10_000);
    def.catchup_window_ms = 5_000;
    let latest = record(def.clone(), 10_000);
    assert_eq!(latest.next_fire_at, Some(10_000));
    // Down until 30_500: 10..=30 s are due; 26..=30 are inside the window.
    let plan = latest.plan(30_500, false);
    assert_eq!(plan.fires, vec![30_000]);
    assert_eq!(plan.missed, 20);
    assert_eq!(plan.next_fire_at, Some(31_000));
    def.catchup = Catchup::All;
    let all = record(def, 10_000);
    let plan = all.plan(30_500, false);
    assert_eq!(plan.fires, vec![26_000, 27_000, 28_000, 29_000, 30_000]);
    assert_eq!(plan.missed, 16);
    let after = all.apply(&plan);
    assert_eq!((after.fires, after.last_fire_at), (5, Some(30_000)));
}

#[test]
fn overlap_skip_end_and_max() {
    let mut def = definition(Recurrence::Every { every_ms: 1_000 }, 0);
    def.overlap = Overlap::Skip;
    def.catchup = Catchup::All;
    def.max_fires = Some(3);
    let r = record(def.clone(), 0);
    let plan = r.plan(2_000, false);
    assert_eq!((plan.fires.clone(), plan.skipped), (vec![0], 2));
    let r = r.apply(&plan);
    let plan = r.plan(3_000, true);
    assert_eq!((plan.fires.clone(), plan.skipped), (vec![], 1));
    let r = r.apply(&plan);
    let r = r.apply(&r.plan(4_000, false));
    let r = r.apply(&r.plan(5_000, false));
    assert_eq!(
        (r.fires, r.next_fire_at),
        (3, None),
        "finished by max_fires"
    );
    def.max_fires = None;
    def.overlap = Overlap::Allow;
    def.end_at = Some(2_500);
    let r = record(def, 0);
    let plan = r.plan(10_000, false);
    assert_eq!(
        (plan.fires, plan.next_fire_at),
        (vec![0, 1_000, 2_000], None)
    );
}

#[test]
fn replace_same_definition_changes_nothing_and_pause_resume_skip_the_pause() {
    let def = definition(Recurrence::Every { every_ms: 1_000 }, 0);
    let r = record(def.clone(), 0);
    assert_eq!(r.replace(def.clone(), 5_000).expect("valid"), None);
    let paused = r.pause(1_500).expect("was running");
    assert_eq!((paused.revision, paused.next_fire_at), (2, None));
    assert!(paused.pause(1_600).is_none());
    let resumed = paused.resume(4_200).expect("was paused");
    assert_eq!((resumed.revision, resumed.next_fire_at), (3, Some(5_000)));
    let mut changed = def;
    changed.jitter_ms = 10;
    let replaced = resumed
        .replace(changed, 7_500)
        .expect("valid")
        .expect("changed");
    assert_eq!((replaced.revision, replaced.next_fire_at), (4, Some(8_000)));
}

#[test]
fn fire_request_carries_id_jitter_and_headers() {
    let mut def = definition(Recurrence::Every { every_ms: 1_000 }, 0);
    def.jitter_ms = 500;
    def.message.headers.insert("k".into(), "v".into());
    let r = record(def, 0);
    let request = r.fire_request(3_000);
    assert_eq!(request.id.as_ref().map(MessageId::as_str), Some("s:3000"));
    let Schedule::At(at) = request.schedule else {
        panic!("fires are due at a time")
    };
    assert!((3_000..3_500).contains(&at));
    assert_eq!(at, 3_000 + jitter(&r.id, 3_000, 500), "deterministic");
    assert_eq!(
        request.headers.get(HEADER_SCHEDULE).map(String::as_str),
        Some("s")
    );
    assert_eq!(
        request
            .headers
            .get(HEADER_SCHEDULED_FOR)
            .map(String::as_str),
        Some("3000")
    );
    assert_eq!(request.headers.get("k").map(String::as_str), Some("v"));
    let manual = r.trigger_request(42);
    assert_eq!(
        manual.id.as_ref().map(MessageId::as_str),
        Some("s:manual:42")
    );
}

#[test]
fn schedule_ids() {
    assert!(ScheduleId::new("daily-report.v2_x").is_ok());
    for bad in ["", "a:b", "a/b", &"x".repeat(129)] {
        assert!(ScheduleId::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_start_at_of_the_creating_request_fires_at_once() {
    // The frontend stamped start_at a few ms before the broker's now.
    let r = record(
        definition(Recurrence::Every { every_ms: 60_000 }, 10_000),
        10_004,
    );
    assert_eq!(
        r.next_fire_at,
        Some(10_000),
        "k = 0 is the creation's own fire time"
    );
    // An explicit start_at well in the past: fire times before creation never fire.
    let r = record(
        definition(Recurrence::Every { every_ms: 60_000 }, 10_000),
        200_000,
    );
    assert_eq!(r.next_fire_at, Some(250_000));
}
