//! Schedule rules that need the wall clock moved: DST transitions (the
//! case sets the wall time to just before a 2027 transition and lets
//! virtual time run), `L`/`W`/`#` on their days, and catch-up after a
//! forward jump. Only `conformance_tests_schedules!(virtual_time ..)` runs
//! them. Expected instants are written out by hand in UTC.

use std::sync::Arc;

use chrono::DateTime;

use super::schedule_support::{
    collect_until, cron, every, get_schedule, put_schedule, sid, tick_until, times_of,
};
use crate::broker::Broker;
use crate::recurring::{Catchup, WRITE_AHEAD_MS};
use crate::testkit::support::{self as s, SLACK_MS};

/// Epoch ms of an RFC 3339 instant written in a case.
fn ms(rfc3339: &str) -> u64 {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap_or_else(|e| panic!("bad test instant {rfc3339:?}: {e}"))
        .timestamp_millis() as u64
}

/// One schedule of a phase and what it must do.
struct Expect {
    id: &'static str,
    cron: &'static str,
    /// The fire times between the phase's start and end (UTC).
    fires: &'static [&'static str],
    /// The cursor at the end of the phase (UTC).
    next: &'static str,
}

/// Sets the wall clock to `from`, creates each schedule (cron in `tz`,
/// starting now) in a fresh queue, leases everything until `until`, and
/// compares the fire times and the cursors with `expects`. The queue is
/// deleted after, so a later (forward) phase sees no catch-up.
async fn check_phase(
    b: &Arc<dyn Broker>,
    case: &str,
    tz: &str,
    (from, until): (&str, &str),
    expects: &[Expect],
) {
    let q = s::queue(case, "phase");
    s::set_wall_time(ms(from));
    for e in expects {
        put_schedule(b, &q, &sid(e.id), cron(e.cron, tz, s::now_ms())).await;
    }
    let fired = collect_until(b, &q, ms(until)).await;
    for f in &fired {
        assert!(
            f.leased_at <= f.t + SLACK_MS,
            "{tz} fire {} leased {} ms late",
            f.t,
            f.leased_at - f.t
        );
    }
    for e in expects {
        let id = sid(e.id);
        let want: Vec<u64> = e.fires.iter().map(|t| ms(t)).collect();
        let got = times_of(&fired, &id);
        assert_eq!(got, want, "{tz} {:?} fires from {from} to {until}", e.cron);
        let record = get_schedule(b, &q, &id).await;
        let want_next = Some(ms(e.next));
        assert_eq!(record.next_fire_at, want_next, "{tz} {:?} cursor", e.cron);
    }
    s::must(b.delete_queue(&q).await, "delete_queue");
}

/// Europe/Berlin 2027: 02:00 CET -> 03:00 CEST on 28 March (01:00 UTC),
/// 03:00 CEST -> 02:00 CET on 31 October (01:00 UTC). A fixed-time
/// schedule in the gap fires once after it, in the fold once at the first
/// occurrence; a list fires nothing in the gap and each fold occurrence.
pub async fn schedule_dst_europe_berlin(b: Arc<dyn Broker>) {
    let case = "schedule_dst_europe_berlin";
    let tz = "Europe/Berlin";
    let gap = ("2027-03-28T00:50:00Z", "2027-03-28T02:00:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "30 2 * * *",
            fires: &["2027-03-28T01:00:00Z"], // 03:00 CEST, after the gap
            next: "2027-03-29T00:30:00Z",     // 02:30 CEST
        },
        Expect {
            id: "list",
            cron: "0,30 2 * * *",
            fires: &[],
            next: "2027-03-29T00:00:00Z", // 02:00 CEST the next day
        },
    ];
    check_phase(&b, case, tz, gap, &expects).await;
    let fold = ("2027-10-30T23:50:00Z", "2027-10-31T02:00:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "30 2 * * *",
            fires: &["2027-10-31T00:30:00Z"], // 02:30 CEST, not 02:30 CET
            next: "2027-11-01T01:30:00Z",
        },
        Expect {
            id: "list",
            cron: "0,30 2 * * *",
            fires: &[
                "2027-10-31T00:00:00Z", // 02:00 CEST
                "2027-10-31T00:30:00Z", // 02:30 CEST
                "2027-10-31T01:00:00Z", // 02:00 CET
                "2027-10-31T01:30:00Z", // 02:30 CET
            ],
            next: "2027-11-01T01:00:00Z",
        },
    ];
    check_phase(&b, case, tz, fold, &expects).await;
}

/// America/New_York 2027: 02:00 EST -> 03:00 EDT on 14 March (07:00 UTC),
/// 02:00 EDT -> 01:00 EST on 7 November (06:00 UTC).
pub async fn schedule_dst_america_new_york(b: Arc<dyn Broker>) {
    let case = "schedule_dst_america_new_york";
    let tz = "America/New_York";
    let gap = ("2027-03-14T06:50:00Z", "2027-03-14T08:00:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "30 2 * * *",
            fires: &["2027-03-14T07:00:00Z"], // 03:00 EDT
            next: "2027-03-15T06:30:00Z",
        },
        Expect {
            id: "list",
            cron: "0,30 2 * * *",
            fires: &[],
            next: "2027-03-15T06:00:00Z",
        },
    ];
    check_phase(&b, case, tz, gap, &expects).await;
    let fold = ("2027-11-07T04:50:00Z", "2027-11-07T07:00:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "30 1 * * *",
            fires: &["2027-11-07T05:30:00Z"], // 01:30 EDT only
            next: "2027-11-08T06:30:00Z",
        },
        Expect {
            id: "steps",
            cron: "*/20 1 * * *",
            fires: &[
                "2027-11-07T05:00:00Z", // 01:00 EDT
                "2027-11-07T05:20:00Z",
                "2027-11-07T05:40:00Z",
                "2027-11-07T06:00:00Z", // 01:00 EST
                "2027-11-07T06:20:00Z",
                "2027-11-07T06:40:00Z",
            ],
            next: "2027-11-08T06:00:00Z",
        },
    ];
    check_phase(&b, case, tz, fold, &expects).await;
}

/// Australia/Lord_Howe 2027, a 30-minute DST shift: 02:00 LHDT (+11) ->
/// 01:30 LHST (+10:30) on 4 April (15:00 UTC on the 3rd), 02:00 LHST ->
/// 02:30 LHDT on 3 October (15:30 UTC on the 2nd).
pub async fn schedule_dst_australia_lord_howe(b: Arc<dyn Broker>) {
    let case = "schedule_dst_australia_lord_howe";
    let tz = "Australia/Lord_Howe";
    let fold = ("2027-04-03T14:00:00Z", "2027-04-03T16:00:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "45 1 * * *",
            fires: &["2027-04-03T14:45:00Z"], // 01:45 LHDT, not 01:45 LHST
            next: "2027-04-04T15:15:00Z",     // 01:45 LHST on the 5th
        },
        Expect {
            id: "list",
            cron: "15,45 1 * * *",
            fires: &[
                "2027-04-03T14:15:00Z", // 01:15 LHDT
                "2027-04-03T14:45:00Z", // 01:45 LHDT
                "2027-04-03T15:15:00Z", // 01:45 LHST (01:15 is not repeated)
            ],
            next: "2027-04-04T14:45:00Z",
        },
    ];
    check_phase(&b, case, tz, fold, &expects).await;
    let gap = ("2027-10-02T15:00:00Z", "2027-10-02T16:30:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "15 2 * * *",
            fires: &["2027-10-02T15:30:00Z"], // 02:30 LHDT, after the gap
            next: "2027-10-03T15:15:00Z",
        },
        Expect {
            id: "list",
            cron: "0,15,30,45 2 * * *",
            fires: &["2027-10-02T15:30:00Z", "2027-10-02T15:45:00Z"],
            next: "2027-10-03T15:00:00Z",
        },
    ];
    check_phase(&b, case, tz, gap, &expects).await;
}

/// Asia/Kathmandu: +05:45 all year (no DST); wall times map with the odd
/// offset.
pub async fn schedule_tz_asia_kathmandu(b: Arc<dyn Broker>) {
    let case = "schedule_tz_asia_kathmandu";
    let phase = ("2027-01-10T03:00:00Z", "2027-01-10T03:50:00Z");
    let expects = [
        Expect {
            id: "fixed",
            cron: "0 9 * * *",
            fires: &["2027-01-10T03:15:00Z"], // 09:00 NPT
            next: "2027-01-11T03:15:00Z",
        },
        Expect {
            id: "half-hours",
            cron: "*/30 * * * *",
            fires: &["2027-01-10T03:15:00Z", "2027-01-10T03:45:00Z"],
            next: "2027-01-10T04:15:00Z",
        },
    ];
    check_phase(&b, case, "Asia/Kathmandu", phase, &expects).await;
}

/// `L` (last day of the month), `W` (nearest weekday) and `#` (n-th
/// weekday of the month) fire on their days (UTC, 2027).
pub async fn schedule_cron_l_w_hash(b: Arc<dyn Broker>) {
    let case = "schedule_cron_l_w_hash";
    let phases: [(&str, &str, Expect); 3] = [
        (
            "2027-02-28T11:50:00Z",
            "2027-02-28T12:10:00Z",
            Expect {
                id: "last",
                cron: "0 12 L * *",
                fires: &["2027-02-28T12:00:00Z"],
                next: "2027-03-31T12:00:00Z",
            },
        ),
        (
            // The 15th is a Saturday: the nearest weekday is Friday the 14th.
            "2027-05-14T08:50:00Z",
            "2027-05-14T09:10:00Z",
            Expect {
                id: "weekday",
                cron: "0 9 15W * *",
                fires: &["2027-05-14T09:00:00Z"],
                next: "2027-06-15T09:00:00Z", // a Tuesday
            },
        ),
        (
            "2027-05-21T09:50:00Z",
            "2027-05-21T10:10:00Z",
            Expect {
                id: "third-friday",
                cron: "0 10 * * 5#3",
                fires: &["2027-05-21T10:00:00Z"],
                next: "2027-06-18T10:00:00Z",
            },
        ),
    ];
    for (from, until, expect) in phases {
        check_phase(&b, case, "UTC", (from, until), &[expect]).await;
    }
}

/// Sets up `every_ms: 60000` schedules starting a minute from now, then
/// jumps the wall clock forward just before the first fire time is written
/// ahead (`WRITE_AHEAD_MS` before it), to 10.5 minutes after it, so the
/// broker sees F1..F11 (`F_k = created + k min`) passed unfired whether it
/// notices at once or at its first timer; returns F1. Then leases until
/// F12 has fired.
async fn jump_past_fires(
    b: &Arc<dyn Broker>,
    q: &crate::QueueName,
    schedules: &[(&str, Catchup, u64)],
) -> (u64, Vec<super::schedule_support::Fired>) {
    let created = s::now_ms();
    let first = created + 60_000;
    for &(id, catchup, window) in schedules {
        let mut def = every(60_000, first);
        def.catchup = catchup;
        def.catchup_window_ms = window;
        put_schedule(b, q, &sid(id), def).await;
    }
    tick_until(first - WRITE_AHEAD_MS - 10).await;
    s::jump_wall_time(WRITE_AHEAD_MS as i64 + 630_000);
    let fired = collect_until(b, q, first + 11 * 60_000 + SLACK_MS).await;
    (first, fired)
}

/// A fire written ahead before an outage is not missed by it: it was
/// enqueued before its time, so the catch-up window does not apply to it
/// (docs/schedules.md, "Fires written ahead"). The later fire times the
/// outage passed follow the catch-up rules.
pub async fn schedule_written_ahead_survives_a_jump(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_written_ahead_survives_a_jump", "q");
    let id = sid("tiny");
    let first = s::now_ms() + 60_000;
    let mut def = every(60_000, first);
    def.catchup_window_ms = 20_000;
    put_schedule(&b, &q, &id, def).await;
    tick_until(first - 10).await;
    // A call: the model (no timers) writes ahead at its calls.
    let record = get_schedule(&b, &q, &id).await;
    assert_eq!((record.fires, record.next_fire_at), (0, Some(first)));
    s::get(&b, &q, &id.fire_message_id(first)).await;
    s::jump_wall_time(630_000);
    let fired = collect_until(&b, &q, first + 11 * 60_000 + SLACK_MS).await;
    let f = |k: u64| first + (k - 1) * 60_000;
    assert_eq!(
        times_of(&fired, &id),
        [f(1), f(12)],
        "F1 written ahead, F11 missed"
    );
    assert_eq!(get_schedule(&b, &q, &id).await.fires, 2);
}

/// `catchup: all`: after a forward jump, each passed fire time inside the
/// window is enqueued, oldest first; older ones are missed; then the
/// schedule goes on on time.
pub async fn schedule_catchup_all(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_catchup_all", "q");
    let (wide, narrow) = (sid("wide"), sid("narrow"));
    let schedules = [
        ("wide", Catchup::All, 3_600_000),
        // The window reaches back 5 minutes from ~F11 + 30 s: F7..F11.
        ("narrow", Catchup::All, 300_000),
    ];
    let (first, fired) = jump_past_fires(&b, &q, &schedules).await;
    let f = |k: u64| first + (k - 1) * 60_000;
    let wide_times = times_of(&fired, &wide);
    assert_eq!(
        wide_times,
        (1..=12).map(f).collect::<Vec<_>>(),
        "all in window"
    );
    let narrow_times = times_of(&fired, &narrow);
    assert_eq!(narrow_times, (7..=12).map(f).collect::<Vec<_>>(), "window");
    assert_eq!(get_schedule(&b, &q, &wide).await.fires, 12);
    assert_eq!(get_schedule(&b, &q, &narrow).await.fires, 6);
}

/// `catchup: latest`: after a forward jump only the newest passed fire
/// time is enqueued, and only when it is inside the window.
pub async fn schedule_catchup_latest(b: Arc<dyn Broker>) {
    let q = s::queue("schedule_catchup_latest", "q");
    let (wide, tiny) = (sid("wide"), sid("tiny"));
    let schedules = [
        ("wide", Catchup::Latest, 3_600_000),
        // F11 is >= 30 s old when the broker gets to it: outside 20 s.
        ("tiny", Catchup::Latest, 20_000),
    ];
    let (first, fired) = jump_past_fires(&b, &q, &schedules).await;
    let f = |k: u64| first + (k - 1) * 60_000;
    assert_eq!(times_of(&fired, &wide), [f(11), f(12)], "only the newest");
    assert_eq!(
        times_of(&fired, &tiny),
        [f(12)],
        "newest outside the window"
    );
    assert_eq!(get_schedule(&b, &q, &wide).await.fires, 2);
    assert_eq!(get_schedule(&b, &q, &tiny).await.fires, 1);
}
