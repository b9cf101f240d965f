//! Model-based property tests: the wheel against a `BTreeMap<(deadline, seq)>`
//! reference. `PROPTEST_CASES` (default 256) sets the number of cases.

use std::collections::BTreeMap;

use delayd_wheel::{Handle, StaleHandle, Wheel, WheelConfig};
use proptest::prelude::*;

/// A deadline or time, resolved against the current time when the op runs.
#[derive(Debug, Clone)]
enum When {
    Delta(u64),
    Medium(u64),
    Huge(u64),
    Max,
    Past(u64),
}

impl When {
    fn resolve(&self, now: u64) -> u64 {
        match *self {
            When::Delta(d) | When::Medium(d) | When::Huge(d) => now.saturating_add(d),
            When::Max => u64::MAX,
            When::Past(d) => now.saturating_sub(d),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(When),
    Cancel(usize),
    Reschedule(usize, When),
    Advance(When),
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        6 => (0u64..200).prop_map(When::Delta),
        3 => (0u64..300_000).prop_map(When::Medium),
        1 => (0u64..=u64::MAX / 2).prop_map(When::Huge),
        1 => Just(When::Max),
        1 => (0u64..100).prop_map(When::Past),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => when().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), when()).prop_map(|(i, w)| Op::Reschedule(i, w)),
        3 => when().prop_map(Op::Advance),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Reference model plus the bookkeeping needed to replay ops on both sides.
struct Harness {
    wheel: Wheel<usize>,
    tick: u64,
    start: u64,
    model: BTreeMap<(u64, u64), usize>,
    /// Per key: its handle and, while live, its model key.
    keys: Vec<(Handle, Option<(u64, u64)>)>,
    seq: u64,
    now: u64,
}

impl Harness {
    fn new(tick: u64, start: u64) -> Self {
        Harness {
            wheel: Wheel::with_config(WheelConfig { tick, start }),
            tick,
            start,
            model: BTreeMap::new(),
            keys: Vec::new(),
            seq: 0,
            now: start,
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The first time at which the wheel may fire `deadline`.
    fn fire_time(&self, deadline: u64) -> u64 {
        let Some(off) = deadline.checked_sub(self.start) else {
            return self.start;
        };
        let ticks = off / self.tick + u64::from(off % self.tick != 0);
        self.start.saturating_add(ticks.saturating_mul(self.tick))
    }

    fn due(&self, deadline: u64) -> bool {
        self.now == u64::MAX || self.fire_time(deadline) <= self.now
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Insert(w) => {
                let deadline = w.resolve(self.now);
                let key = self.keys.len();
                let handle = self.wheel.insert(deadline, key);
                let mk = (deadline, self.next_seq());
                self.model.insert(mk, key);
                self.keys.push((handle, Some(mk)));
            }
            Op::Cancel(i) if !self.keys.is_empty() => {
                let key = i % self.keys.len();
                let (handle, live) = self.keys[key];
                let got = self.wheel.cancel(handle);
                match live {
                    Some(mk) => {
                        assert_eq!(got, Some(key));
                        self.model.remove(&mk);
                        self.keys[key].1 = None;
                    }
                    None => assert_eq!(got, None, "stale handle cancelled something"),
                }
            }
            Op::Reschedule(i, w) if !self.keys.is_empty() => {
                let key = i % self.keys.len();
                let deadline = w.resolve(self.now);
                let (handle, live) = self.keys[key];
                let got = self.wheel.reschedule(handle, deadline);
                match live {
                    Some(mk) => {
                        assert_eq!(got, Ok(()));
                        self.model.remove(&mk);
                        let mk = (deadline, self.next_seq());
                        self.model.insert(mk, key);
                        self.keys[key].1 = Some(mk);
                    }
                    None => assert_eq!(got, Err(StaleHandle)),
                }
            }
            Op::Advance(w) => {
                self.now = self.now.max(w.resolve(self.now));
                self.fire();
            }
            Op::Cancel(_) | Op::Reschedule(..) => {}
        }
    }

    fn fire(&mut self) {
        let mut fired = Vec::new();
        while let Some(e) = self.wheel.poll_expired(self.now) {
            assert!(
                e.deadline <= self.now,
                "early: {} > {}",
                e.deadline,
                self.now
            );
            assert_eq!(self.wheel.cancel(e.handle), None, "fired handle still live");
            fired.push((e.deadline, e.value));
        }
        let due: Vec<_> = self
            .model
            .iter()
            .filter(|((d, _), _)| self.due(*d))
            .map(|(&mk, &key)| (mk, key))
            .collect();
        for (mk, key) in &due {
            self.model.remove(mk);
            self.keys[*key].1 = None;
        }
        let want: Vec<_> = due.into_iter().map(|((d, _), k)| (d, k)).collect();
        assert_eq!(fired, want, "fired set/order at now={}", self.now);
    }

    fn check(&self, exact_next: bool) {
        assert_eq!(self.wheel.len(), self.model.len());
        assert_eq!(self.wheel.now(), self.now);
        let next = self.wheel.next_deadline();
        let min = self.model.keys().next().map(|&(d, _)| d);
        if exact_next {
            assert_eq!(next, min, "next_deadline");
        } else {
            let min_fire = self.model.keys().map(|&(d, _)| self.fire_time(d)).min();
            assert_eq!(next.is_some(), min.is_some());
            if let (Some(n), Some(lo), Some(hi)) = (next, min, min_fire) {
                assert!(lo <= n && n <= hi, "next {n} outside [{lo}, {hi}]");
            }
        }
        for (handle, live) in &self.keys {
            assert_eq!(self.wheel.deadline(*handle), live.map(|(d, _)| d));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn matches_model_tick_1(ops in prop::collection::vec(op(), 1..200)) {
        let mut h = Harness::new(1, 0);
        for op in &ops {
            h.apply(op);
            h.check(true);
        }
        h.now = u64::MAX;
        h.fire();
        h.check(true);
        prop_assert!(h.wheel.is_empty());
    }

    #[test]
    fn never_early_tick_10(
        start in prop_oneof![Just(0u64), 0u64..1_000_000, Just(u64::MAX - 1000)],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut h = Harness::new(10, start);
        for op in &ops {
            h.apply(op);
            h.check(false);
        }
        h.now = u64::MAX;
        h.fire();
        prop_assert!(h.wheel.is_empty());
    }
}
