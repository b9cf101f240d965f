//! Focused API tests: stale handles, extreme times, coarse ticks.

use delayd_wheel::{StaleHandle, Wheel, WheelConfig};

fn drain<T>(w: &mut Wheel<T>, now: u64) -> Vec<(u64, T)> {
    std::iter::from_fn(|| w.poll_expired(now))
        .map(|e| (e.deadline, e.value))
        .collect()
}

#[test]
fn wheel_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Wheel<u64>>();
}

#[test]
fn stale_handle_never_touches_slot_reuser() {
    let mut w = Wheel::new();
    let a = w.insert(10, "a");
    assert_eq!(w.cancel(a), Some("a"));
    let b = w.insert(20, "b");
    assert_eq!(a.index(), b.index(), "slot is reused");
    assert_ne!(a.generation(), b.generation());
    assert_eq!(w.cancel(a), None);
    assert_eq!(w.reschedule(a, 1), Err(StaleHandle));
    assert_eq!(w.get(a), None);
    assert_eq!(w.deadline(a), None);
    assert_eq!(w.get_mut(b).map(|v| std::mem::replace(v, "b2")), Some("b"));
    assert_eq!(drain(&mut w, 20), [(20, "b2")]);
}

#[test]
fn past_deadlines_fire_at_next_poll_in_order() {
    let mut w = Wheel::new();
    w.advance(1_000);
    w.insert(500, 'b');
    w.insert(100, 'a');
    w.insert(500, 'c');
    w.insert(1_000, 'd');
    assert_eq!(w.next_deadline(), Some(100));
    assert_eq!(
        drain(&mut w, 0),
        [(100, 'a'), (500, 'b'), (500, 'c'), (1_000, 'd')]
    );
    assert_eq!(w.now(), 1_000, "time never goes backwards");
}

#[test]
fn extreme_deadlines_and_times() {
    let mut w = Wheel::new();
    let max = w.insert(u64::MAX, "max");
    w.insert(u64::MAX - 1, "max-1");
    w.insert(1 << 40, "far");
    assert_eq!(w.next_deadline(), Some(1 << 40));
    assert_eq!(drain(&mut w, u64::MAX / 2), [(1 << 40, "far")]);
    assert_eq!(w.next_deadline(), Some(u64::MAX - 1));
    assert_eq!(drain(&mut w, u64::MAX - 2), []);
    assert_eq!(w.deadline(max), Some(u64::MAX));
    assert_eq!(
        drain(&mut w, u64::MAX),
        [(u64::MAX - 1, "max-1"), (u64::MAX, "max")]
    );
    w.insert(u64::MAX, "again");
    assert_eq!(drain(&mut w, u64::MAX), [(u64::MAX, "again")]);
    assert!(w.is_empty());
}

#[test]
fn coarse_tick_rounds_up_never_early() {
    let mut w = Wheel::with_config(WheelConfig { tick: 10, start: 5 });
    w.insert(6, 'a');
    w.insert(15, 'b');
    w.insert(u64::MAX, 'z');
    assert_eq!(w.next_deadline(), Some(15), "6 rounds up to the grid");
    assert_eq!(drain(&mut w, 14), []);
    assert_eq!(drain(&mut w, 15), [(6, 'a'), (15, 'b')]);
    assert_eq!(drain(&mut w, u64::MAX - 1), []);
    assert_eq!(drain(&mut w, u64::MAX), [(u64::MAX, 'z')]);
}

#[test]
fn zero_tick_is_treated_as_one() {
    let mut w = Wheel::with_config(WheelConfig { tick: 0, start: 0 });
    w.insert(3, ());
    assert_eq!(drain(&mut w, 3), [(3, ())]);
}
