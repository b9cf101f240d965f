//! Each property against a deliberately broken history the checker must
//! flag, next to the nearest valid history it must pass (a checker that
//! cannot fail proves nothing; one that flags the valid twin is useless).

use delayd_history::{
    check, Crash, Enqueue, Every, Extend, Fire, FiresObserved, Flow, History, Lease, LeaseCall,
    LeaseFailed, MessageCall, Nack, Observe, Observed, Op, Outcome, Property, QueueConfig, Rate,
    Report, ScheduleAction, ScheduleChange, Span, Stop,
};

const Q: &str = "q";

fn enqueue(t: u64, id: &str, seq: u64, deliver_at: u64) -> Op {
    Op::Enqueue(Enqueue {
        invoke: t,
        complete: t + 1,
        queue: Q.into(),
        id: id.into(),
        outcome: Outcome::Ok,
        seq: Some(seq),
        deliver_at: Some(deliver_at),
        ..Enqueue::default()
    })
}

fn keyed(t: u64, id: &str, seq: u64, key: &str, priority: u32) -> Op {
    Op::Enqueue(Enqueue {
        invoke: t,
        complete: t + 1,
        queue: Q.into(),
        id: id.into(),
        outcome: Outcome::Ok,
        seq: Some(seq),
        deliver_at: Some(t),
        key: Some(key.into()),
        priority: Some(priority),
        ..Enqueue::default()
    })
}

/// A lease answered at `t + 1`, for 1000 ms.
fn lease(t: u64, id: &str, seq: u64, attempt: u32, lease_id: &str) -> Lease {
    Lease {
        invoke: t,
        complete: t + 1,
        queue: Q.into(),
        id: id.into(),
        seq,
        attempt,
        lease_id: lease_id.into(),
        lease_until: t + 1_000,
        deliver_at: 0,
        ..Lease::default()
    }
}

fn leased(t: u64, id: &str, seq: u64, attempt: u32, lease_id: &str) -> Op {
    Op::Lease(lease(t, id, seq, attempt, lease_id))
}

fn leased_key(t: u64, id: &str, seq: u64, key: &str, lease_id: &str) -> Op {
    Op::Lease(Lease {
        key: Some(key.into()),
        ..lease(t, id, seq, 1, lease_id)
    })
}

fn call(t: u64, id: &str, lease_id: &str, outcome: Outcome) -> LeaseCall {
    LeaseCall {
        invoke: t,
        complete: t + 1,
        queue: Q.into(),
        id: id.into(),
        lease_id: lease_id.into(),
        outcome,
    }
}

fn ack(t: u64, id: &str, lease_id: &str) -> Op {
    Op::Ack(call(t, id, lease_id, Outcome::Ok))
}

fn nack(t: u64, id: &str, lease_id: &str, defer: bool, delay_ms: Option<u64>) -> Op {
    let c = call(t, id, lease_id, Outcome::Ok);
    Op::Nack(Nack {
        invoke: c.invoke,
        complete: c.complete,
        queue: c.queue,
        id: c.id,
        lease_id: c.lease_id,
        outcome: Outcome::Ok,
        defer,
        delay_ms,
    })
}

fn crash(t: u64) -> Op {
    Op::Crash(Crash {
        invoke: t,
        complete: t + 1,
        ends_leases: true,
        maybe: false,
    })
}

fn restart(t: u64) -> Op {
    Op::Restart(Span {
        invoke: t,
        complete: t + 10,
    })
}

fn observe(t: u64, id: &str, state: Observed) -> Op {
    Op::Observe(Observe {
        invoke: t,
        complete: t + 1,
        queue: Q.into(),
        id: id.into(),
        state,
        seq: None,
    })
}

fn stop(at: u64, drained: bool) -> Op {
    Op::Stop(Stop { at, drained })
}

fn flow(flow: Flow) -> Op {
    Op::QueueConfig(QueueConfig {
        invoke: 0,
        complete: 1,
        queue: Q.into(),
        outcome: Outcome::Ok,
        flow: Some(flow),
        ..QueueConfig::default()
    })
}

fn run(ops: Vec<Op>) -> Report {
    check(&History { ops })
}

/// `broken` is flagged with `property` (and only it); `valid` passes.
fn contrast(property: Property, broken: Vec<Op>, valid: Vec<Op>) {
    let bad = run(broken);
    assert!(bad.has(property), "not flagged as {property}: {bad}");
    assert!(
        bad.violations.iter().all(|v| v.property == property),
        "flagged as more than {property}: {bad}"
    );
    let good = run(valid);
    assert!(good.ok(), "valid twin of {property} flagged: {good}");
}

#[test]
fn lost_read_absent() {
    let base = vec![enqueue(10, "a", 1, 10)];
    let mut broken = base.clone();
    broken.push(observe(100, "a", Observed::Absent));
    let mut valid = base;
    valid.push(Op::Cancel(MessageCall {
        invoke: 50,
        complete: 51,
        queue: Q.into(),
        id: "a".into(),
        outcome: Outcome::Unknown,
    }));
    valid.push(observe(100, "a", Observed::Absent));
    contrast(Property::Lost, broken, valid);
}

#[test]
fn lost_at_stop_of_a_drained_run() {
    let base = vec![enqueue(10, "a", 1, 10), enqueue(10, "late", 2, 5_000)];
    let mut broken = base.clone();
    broken.push(stop(1_000, true));
    let mut valid = base;
    valid.extend([
        leased(20, "a", 1, 1, "l1"),
        ack(30, "a", "l1"),
        stop(1_000, true),
    ]);
    contrast(Property::Lost, broken, valid);
}

#[test]
fn lost_at_stop_of_a_run_stopped_early() {
    let base = vec![enqueue(10, "a", 1, 10)];
    let mut broken = base.clone();
    broken.push(stop(1_000, false));
    let mut valid = base;
    valid.extend([observe(900, "a", Observed::Live), stop(1_000, false)]);
    contrast(Property::Lost, broken, valid);
    let mut report = run(vec![
        enqueue(10, "a", 1, 10),
        observe(900, "a", Observed::Live),
        stop(1_000, false),
    ]);
    assert_eq!(report.pending_at_stop, 1);
    report.pending_at_stop = 0;
}

#[test]
fn resurrected_after_ack() {
    let base = vec![
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 1, "l1"),
        ack(30, "a", "l1"),
    ];
    let mut broken = base.clone();
    broken.push(observe(100, "a", Observed::Live));
    let mut valid = base;
    // A new enqueue of the id (answer lost) may have made it again.
    valid.push(Op::Enqueue(Enqueue {
        invoke: 50,
        complete: 60,
        queue: Q.into(),
        id: "a".into(),
        outcome: Outcome::Unknown,
        ..Enqueue::default()
    }));
    valid.push(observe(100, "a", Observed::Live));
    contrast(Property::Resurrected, broken, valid);
}

#[test]
fn early_before_deliver_at() {
    let broken = vec![
        enqueue(10, "a", 1, 500),
        leased(20, "a", 1, 1, "l1"),
        ack(30, "a", "l1"),
    ];
    let valid = vec![
        enqueue(10, "a", 1, 500),
        leased(499, "a", 1, 1, "l1"),
        ack(600, "a", "l1"),
    ];
    contrast(Property::Early, broken, valid);
}

#[test]
fn early_by_the_servers_own_times() {
    let mut l = lease(20, "a", 1, 1, "l1");
    l.deliver_at = 20;
    l.granted_at = Some(19);
    let broken = vec![Op::Lease(l.clone())];
    l.granted_at = Some(20);
    contrast(Property::Early, broken, vec![Op::Lease(l)]);
}

#[test]
fn early_after_a_nack_delay() {
    let base = vec![
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 1, "l1"),
        nack(30, "a", "l1", false, Some(200)),
    ];
    let mut broken = base.clone();
    broken.push(leased(100, "a", 1, 2, "l2"));
    let mut valid = base;
    valid.push(leased(229, "a", 1, 2, "l2"));
    contrast(Property::Early, broken, valid);
}

#[test]
fn duplicate_while_leased() {
    let base = vec![enqueue(10, "a", 1, 10), leased(20, "a", 1, 1, "l1")];
    let mut broken = base.clone();
    broken.push(leased(500, "a", 1, 2, "l2"));
    // Explained three ways: the expiry, a crash, a nack whose answer was lost.
    let mut valid = base.clone();
    valid.push(leased(1_020, "a", 1, 2, "l2"));
    contrast(Property::Duplicate, broken.clone(), valid);
    let mut crashed = base.clone();
    crashed.extend([crash(300), restart(310), leased(500, "a", 1, 2, "l2")]);
    assert!(run(crashed).ok());
    let mut unknown = base;
    unknown.push(Op::Nack(Nack {
        invoke: 400,
        complete: 2_000,
        queue: Q.into(),
        id: "a".into(),
        lease_id: "l1".into(),
        outcome: Outcome::Unknown,
        ..Nack::default()
    }));
    unknown.push(leased(500, "a", 1, 2, "l2"));
    assert!(run(unknown).ok());
}

#[test]
fn duplicate_after_an_accepted_ack() {
    let base = vec![
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 1, "l1"),
        ack(30, "a", "l1"),
    ];
    let mut broken = base.clone();
    broken.push(leased(2_000, "a", 1, 2, "l2"));
    let mut valid = base;
    // The id again, as a new message (a new seq).
    valid.extend([enqueue(40, "a", 2, 40), leased(2_000, "a", 2, 1, "l2")]);
    contrast(Property::Duplicate, broken, valid);
}

#[test]
fn seq_reused() {
    let broken = vec![enqueue(10, "a", 1, 10), enqueue(20, "b", 1, 20)];
    let valid = vec![enqueue(10, "a", 1, 10), enqueue(20, "b", 2, 20)];
    contrast(Property::SeqReused, broken, valid);
}

#[test]
fn ack_after_expiry() {
    let base = vec![enqueue(10, "a", 1, 10), leased(20, "a", 1, 1, "l1")];
    let mut broken = base.clone();
    broken.push(ack(1_500, "a", "l1"));
    let mut valid = base.clone();
    valid.push(Op::Ack(call(1_500, "a", "l1", Outcome::LeaseMismatch)));
    contrast(Property::AckAfterExpiry, broken, valid);
    // An extend moves the expiry.
    let mut extended = base;
    extended.push(Op::Extend(Extend {
        invoke: 900,
        complete: 901,
        queue: Q.into(),
        id: "a".into(),
        lease_id: "l1".into(),
        outcome: Outcome::Ok,
        lease_until: Some(1_900),
    }));
    extended.push(ack(1_500, "a", "l1"));
    assert!(run(extended).ok());
}

#[test]
fn ack_accepted_after_a_crash() {
    let base = vec![
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 1, "l1"),
        crash(100),
        restart(110),
    ];
    let mut broken = base.clone();
    broken.push(ack(200, "a", "l1"));
    let mut valid = base;
    valid.push(Op::Ack(call(200, "a", "l1", Outcome::LeaseMismatch)));
    contrast(Property::AckAfterExpiry, broken, valid);
}

#[test]
fn attempts_skip_a_number() {
    let base = vec![
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 1, "l1"),
        nack(30, "a", "l1", false, None),
    ];
    let mut broken = base.clone();
    broken.push(leased(40, "a", 1, 3, "l2"));
    let mut valid = base.clone();
    valid.push(leased(40, "a", 1, 2, "l2"));
    contrast(Property::Attempts, broken, valid);
    // A lease answer lost in between may have spent one attempt.
    let mut lost_answer = base;
    lost_answer.push(Op::LeaseFailed(LeaseFailed {
        invoke: 35,
        complete: 36,
        queue: Q.into(),
    }));
    lost_answer.push(leased(1_100, "a", 1, 3, "l2"));
    assert!(run(lost_answer).ok());
}

#[test]
fn attempts_start_at_one() {
    let broken = vec![enqueue(10, "a", 1, 10), leased(20, "a", 1, 2, "l1")];
    let valid = vec![enqueue(10, "a", 1, 10), leased(20, "a", 1, 1, "l1")];
    contrast(Property::Attempts, broken, valid);
}

/// api.md, "Crash and shutdown": a lease open at a crash comes back
/// expired (counted) or, not yet durable, uncounted; never lower.
#[test]
fn attempts_across_a_crash() {
    let base = vec![
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 2, "l1"),
        crash(100),
        restart(110),
    ];
    let mut broken = base.clone();
    broken.push(leased(200, "a", 1, 1, "l2"));
    let mut counted = base.clone();
    counted.push(leased(200, "a", 1, 3, "l2"));
    let mut uncounted = base;
    uncounted.push(leased(200, "a", 1, 2, "l2"));
    // The first line says attempt 2: only a lost answer explains it.
    let lost = Op::LeaseFailed(LeaseFailed {
        invoke: 12,
        complete: 13,
        queue: Q.into(),
    });
    let with = |mut ops: Vec<Op>| {
        ops.push(lost.clone());
        ops
    };
    contrast(Property::Attempts, with(broken), with(counted));
    assert!(run(with(uncounted)).ok());
}

#[test]
fn a_deferral_spends_no_attempt() {
    let base = vec![
        flow(Flow::default()),
        enqueue(10, "a", 1, 10),
        leased(20, "a", 1, 1, "l1"),
        nack(30, "a", "l1", true, None),
    ];
    let mut broken = base.clone();
    broken.push(leased(40, "a", 1, 2, "l2"));
    let mut valid = base;
    valid.push(leased(40, "a", 1, 1, "l2"));
    contrast(Property::Deferral, broken, valid);
}

#[test]
fn concurrency() {
    let base = vec![
        flow(Flow {
            concurrency: Some(2),
            ..Flow::default()
        }),
        enqueue(10, "a", 1, 10),
        enqueue(10, "b", 2, 10),
        enqueue(10, "c", 3, 10),
        leased(20, "a", 1, 1, "la"),
        leased(20, "b", 2, 1, "lb"),
    ];
    let mut broken = base.clone();
    broken.push(leased(30, "c", 3, 1, "lc"));
    let mut valid = base.clone();
    valid.extend([ack(25, "a", "la"), leased(30, "c", 3, 1, "lc")]);
    contrast(Property::Concurrency, broken, valid);
    // A crash frees every slot (its leases come back expired).
    let mut crashed = base;
    crashed.extend([crash(25), restart(26), leased(40, "c", 3, 1, "lc")]);
    assert!(run(crashed).ok());
}

#[test]
fn key_concurrency() {
    let base = vec![
        flow(Flow {
            key_concurrency: Some(1),
            ..Flow::default()
        }),
        keyed(10, "a", 1, "k", 1024),
        keyed(10, "b", 2, "k", 1024),
        keyed(10, "c", 3, "other", 1024),
        leased_key(20, "a", 1, "k", "la"),
        leased_key(20, "c", 3, "other", "lc"),
    ];
    let mut broken = base.clone();
    broken.push(leased_key(30, "b", 2, "k", "lb"));
    let mut valid = base;
    valid.push(leased_key(1_030, "b", 2, "k", "lb"));
    contrast(Property::KeyConcurrency, broken, valid);
}

/// Deliveries of `key` (`None`: no key) one per call, at `times`.
fn stream(times: &[u64], key: Option<&str>) -> Vec<Op> {
    let mut ops = Vec::new();
    for (n, &t) in times.iter().enumerate() {
        let id = format!("m{n}");
        let seq = n as u64 + 1;
        ops.push(enqueue(0, &id, seq, 0));
        let mut l = lease(t, &id, seq, 1, &format!("l{n}"));
        l.key = key.map(str::to_string);
        ops.push(Op::Lease(l));
        ops.push(ack(t + 2, &id, &format!("l{n}")));
    }
    ops
}

#[test]
fn rate_bound_in_any_span() {
    // limit 10 per 1000 ms, burst 2: 2 at once, then one per 100 ms.
    let rate = Rate {
        limit: 10,
        period_ms: 1_000,
        burst: Some(2),
    };
    let config = flow(Flow {
        rate: Some(rate),
        ..Flow::default()
    });
    let valid_times = [100, 100, 200, 300, 400, 500];
    // The same, except that the fifth comes 50 ms early.
    let broken_times = [100, 100, 200, 300, 340, 500];
    let with = |times: &[u64]| {
        let mut ops = vec![config.clone()];
        ops.extend(stream(times, None));
        ops
    };
    contrast(Property::Rate, with(&broken_times), with(&valid_times));
}

/// A restart does not refill the bucket: a burst right after it counts
/// with the deliveries before.
#[test]
fn rate_bound_across_a_restart() {
    let rate = Rate {
        limit: 1,
        period_ms: 1_000,
        burst: Some(1),
    };
    let config = flow(Flow {
        rate: Some(rate),
        ..Flow::default()
    });
    let mut broken = vec![config.clone(), crash(150), restart(160)];
    broken.extend(stream(&[100, 200], None));
    let mut valid = vec![config, crash(150), restart(160)];
    valid.extend(stream(&[100, 1_200], None));
    contrast(Property::Rate, broken, valid);
}

#[test]
fn key_rate() {
    let config = flow(Flow {
        key_rate: Some(Rate {
            limit: 1,
            period_ms: 1_000,
            burst: Some(1),
        }),
        ..Flow::default()
    });
    let mut broken = vec![config.clone()];
    broken.extend(stream(&[100, 600], Some("k")));
    let mut valid = vec![config];
    valid.extend(stream(&[100, 1_200], Some("k")));
    contrast(Property::KeyRate, broken, valid);
}

fn ordered() -> Op {
    flow(Flow {
        ordered: true,
        ..Flow::default()
    })
}

#[test]
fn ordered_first_deliveries_follow_priority_deliver_at_seq() {
    let base = vec![
        ordered(),
        keyed(10, "a", 1, "k", 1024),
        keyed(10, "b", 2, "k", 1024),
    ];
    let mut broken = base.clone();
    broken.extend([leased_key(20, "b", 2, "k", "lb"), ack(30, "b", "lb")]);
    let mut valid = base;
    valid.extend([leased_key(20, "a", 1, "k", "la"), ack(30, "a", "la")]);
    valid.extend([leased_key(40, "b", 2, "k", "lb"), ack(50, "b", "lb")]);
    contrast(Property::Order, broken, valid);
    // A lower priority number goes first, whatever the seq.
    let prioritized = vec![
        ordered(),
        keyed(10, "a", 1, "k", 1024),
        keyed(10, "b", 2, "k", 5),
        leased_key(20, "b", 2, "k", "lb"),
        ack(30, "b", "lb"),
    ];
    assert!(run(prioritized).ok());
}

#[test]
fn ordered_a_failed_message_holds_its_key() {
    let base = vec![
        ordered(),
        keyed(10, "a", 1, "k", 1024),
        keyed(10, "b", 2, "k", 1024),
        leased_key(20, "a", 1, "k", "la"),
        nack(30, "a", "la", false, Some(500)),
    ];
    let mut broken = base.clone();
    broken.extend([leased_key(100, "b", 2, "k", "lb"), ack(110, "b", "lb")]);
    let mut valid = base;
    let mut again = lease(600, "a", 1, 2, "la2");
    again.key = Some("k".into());
    valid.extend([Op::Lease(again), ack(610, "a", "la2")]);
    valid.extend([leased_key(700, "b", 2, "k", "lb"), ack(710, "b", "lb")]);
    contrast(Property::Order, broken, valid);
}

fn every() -> Op {
    every_ms(1_000)
}

fn every_ms(every_ms: u64) -> Op {
    Op::Schedule(ScheduleChange {
        invoke: 0,
        complete: 1,
        queue: Q.into(),
        schedule: "s".into(),
        action: ScheduleAction::Put,
        outcome: Outcome::Ok,
        every: Some(Every {
            every_ms,
            start_at: 0,
            end_at: None,
            catchup_all: false,
            catchup_window_ms: 60_000,
            paused: false,
        }),
    })
}

fn fired(fire_at: u64, seq: u64) -> Op {
    Op::Fire(Fire {
        invoke: fire_at + 5,
        complete: fire_at + 6,
        queue: Q.into(),
        schedule: "s".into(),
        fire_at,
        seq,
    })
}

fn observed_through(through: u64) -> Op {
    Op::FiresObserved(FiresObserved {
        invoke: through + 10_000,
        complete: through + 10_001,
        queue: Q.into(),
        schedule: "s".into(),
        through,
    })
}

#[test]
fn a_fire_time_enqueued_twice() {
    let broken = vec![every(), fired(1_000, 1), fired(1_000, 7)];
    let valid = vec![every(), fired(1_000, 1), fired(1_000, 1), fired(2_000, 2)];
    contrast(Property::FireTwice, broken, valid);
}

#[test]
fn a_fire_time_missed_while_up() {
    let broken = vec![
        every(),
        fired(1_000, 1),
        fired(3_000, 3),
        observed_through(3_000),
    ];
    let valid = vec![
        every(),
        fired(1_000, 1),
        fired(2_000, 2),
        fired(3_000, 3),
        observed_through(3_000),
    ];
    contrast(Property::FireMissed, broken, valid);
}

/// `catchup: latest`: of the fire times passed while down, only the
/// newest is enqueued at the restart; older ones are excused, the newest
/// is not.
#[test]
fn a_fire_time_missed_across_a_restart() {
    // Every 10 s; down from 15 s to 55 s: 20, 30, 40 s excused, 50 s due.
    let base = vec![
        every_ms(10_000),
        fired(10_000, 1),
        crash(15_000),
        restart(55_000),
    ];
    let mut valid = base.clone();
    valid.extend([fired(50_000, 5), fired(60_000, 6), observed_through(60_000)]);
    let mut broken = base;
    broken.extend([fired(40_000, 4), fired(60_000, 6), observed_through(60_000)]);
    contrast(Property::FireMissed, broken, valid);
}

#[test]
fn a_history_naming_an_unknown_lease_is_malformed() {
    let report = run(vec![ack(10, "a", "nobody")]);
    assert!(report.has(Property::Malformed), "{report}");
}

#[test]
fn the_file_format_round_trips() {
    let ops = vec![
        every(),
        ordered(),
        keyed(10, "a", 1, "k", 7),
        leased_key(20, "a", 1, "k", "la"),
        nack(30, "a", "la", true, Some(5)),
        crash(40),
        restart(50),
        stop(60, true),
    ];
    let history = History { ops };
    let mut out = Vec::new();
    history.write(&mut out).expect("write");
    let text = String::from_utf8(out.clone()).expect("utf-8");
    assert!(text.lines().all(|l| l.starts_with("{\"op\":")), "{text}");
    let back = History::read(out.as_slice()).expect("read");
    assert_eq!(back, history);
    let err = History::read("{\"op\":\"lease\"}\n".as_bytes()).expect_err("missing fields");
    assert!(err.to_string().starts_with("line 1:"), "{err}");
    let unknown = History::read("{\"op\":\"ack\",\"invoke\":1,\"complete\":2,\"queue\":\"q\",\"id\":\"a\",\"lease_id\":\"l\",\"outcome\":\"ok\",\"extra\":1}\n".as_bytes());
    assert!(unknown.is_err(), "an unknown field is refused");
}
