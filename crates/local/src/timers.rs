//! The broker's timers: one per in-memory message that waits for a time
//! (scheduled: its `deliver_at`; leased: its `lease_until`), keyed by seq.
//!
//! # Time
//! Deadlines given to [`Timers`] are wall-clock ms, but they are scheduled on
//! a `delayd_wheel::Wheel` running on *wheel time* `W`: monotonic ms since
//! the timers were created plus an adjustment that only grows, so `W` never
//! goes backwards. A wall deadline `d` is placed at `W = d - offset`, where
//! `offset` is the wall-minus-wheel offset measured when the timers were
//! created (and re-measured, see below).
//!
//! Every [`poll_expired`](Timers::poll_expired) re-reads both clocks:
//! - **forward jump** (wall − W grew): the adjustment grows by the same
//!   amount, so `W` jumps with the wall clock and everything now due by wall
//!   time fires at once, in order. No entry is re-keyed: their `W` deadlines
//!   stay valid because `offset` is unchanged.
//! - **backward jump** (wall − W shrank by more than [`BACKWARD_SLACK_MS`]):
//!   `offset` is lowered, so new entries are placed later. Entries placed
//!   before the jump fire by `W` too early; each fired entry is compared with
//!   the wall clock and, if its wall deadline is still ahead, re-armed at
//!   `W_now + remaining`. Nothing fires before its wall deadline.
//!
//! Entries keep their wall deadline in the value. Entries that come out of
//! the wheel at the same `W` are staged and handed out in (wall deadline,
//! seq) order.

use std::collections::BTreeMap;
use std::time::Duration;

use delayd_wheel::{Handle, Wheel};

use crate::bounded_map::BoundedMap;
use tokio::time::Instant;

/// A drop of (wall − W) up to this many ms is treated as clock jitter (ms
/// truncation of two clocks) rather than a backward jump.
const BACKWARD_SLACK_MS: i128 = 2;

struct Entry<V> {
    seq: u64,
    wall: u64,
    value: V,
}

/// Where an armed timer currently is.
#[derive(Clone, Copy)]
enum Slot {
    Wheel(Handle),
    /// Out of the wheel, due by wall time, waiting in `staged`.
    Staged(u64),
}

pub(crate) struct Timers<V> {
    wheel: Wheel<Entry<V>>,
    /// By seq; resized incrementally (no O(n) insert, see `bounded_map`).
    slots: BoundedMap<u64, Slot>,
    /// Due entries taken out of the wheel, by (wall deadline, seq).
    staged: BTreeMap<(u64, u64), V>,
    origin: Instant,
    /// Added to monotonic ms to get wheel time; only grows.
    adjust: u64,
    /// Wall minus wheel time; `None` until the first clock reading.
    offset: Option<i128>,
    /// Wheel time at the last clock reading.
    w_now: u64,
    /// Wheel time the driver plans to wake at (set by `next_wait`). An
    /// insert earlier than it must wake the driver. Kept here so that insert
    /// need not ask the wheel for its minimum (after the minimum is
    /// cancelled, the wheel rescans a slot to find the next one).
    wake_at: Option<u64>,
}

impl<V> Default for Timers<V> {
    fn default() -> Self {
        Self {
            wheel: Wheel::new(),
            slots: BoundedMap::default(),
            staged: BTreeMap::new(),
            origin: Instant::now(),
            adjust: 0,
            offset: None,
            w_now: 0,
            wake_at: None,
        }
    }
}

fn clamp_u64(v: i128) -> u64 {
    v.clamp(0, u64::MAX as i128) as u64
}

impl<V> Timers<V> {
    fn mono_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Reads the monotonic clock, compares with `wall_now` and updates the
    /// wheel time (see the module docs).
    fn sync(&mut self, wall_now: u64) {
        let mut w = self.mono_ms().saturating_add(self.adjust).max(self.w_now);
        let cur = wall_now as i128 - w as i128;
        match self.offset {
            None => self.offset = Some(cur),
            Some(offset) if cur > offset => {
                // Wall time moved ahead of wheel time (forward jump or drift).
                let delta = clamp_u64(cur - offset);
                self.adjust = self.adjust.saturating_add(delta);
                w = w.saturating_add(delta);
            }
            Some(offset) if cur < offset - BACKWARD_SLACK_MS => self.offset = Some(cur),
            Some(_) => {}
        }
        self.w_now = w;
    }

    fn wheel_deadline(&self, wall: u64) -> u64 {
        clamp_u64(wall as i128 - self.offset.unwrap_or(0))
    }

    /// Arms (or re-arms) the timer of `seq` at wall-clock `deadline`. True
    /// when it is due before the driver's planned wake-up (wake it).
    pub fn insert(&mut self, seq: u64, deadline: u64, value: V, wall_now: u64) -> bool {
        self.cancel(seq);
        if self.offset.is_none() {
            self.sync(wall_now);
        }
        let at = self.wheel_deadline(deadline);
        let earliest = self.wake_at.is_none_or(|wake| at < wake);
        let handle = self.wheel.insert(
            at,
            Entry {
                seq,
                wall: deadline,
                value,
            },
        );
        self.slots.insert(seq, Slot::Wheel(handle));
        earliest
    }

    pub fn cancel(&mut self, seq: u64) -> Option<V> {
        match self.slots.remove(&seq)? {
            Slot::Wheel(handle) => self.wheel.cancel(handle).map(|e| e.value),
            Slot::Staged(wall) => self.staged.remove(&(wall, seq)),
        }
    }

    /// How long (monotonic) until the next timer may be due, at most `max`.
    /// Remembers the planned wake-up (see `insert`).
    pub fn next_wait(&mut self, max: Duration) -> Duration {
        let w = self.mono_ms().saturating_add(self.adjust).max(self.w_now);
        let wait = if self.staged.is_empty() {
            self.wheel
                .next_deadline()
                .map_or(max, |at| Duration::from_millis(at.saturating_sub(w)))
                .min(max)
        } else {
            Duration::ZERO
        };
        self.wake_at = Some(w.saturating_add(wait.as_millis() as u64));
        wait
    }

    /// The earliest timer whose wall deadline is `<= wall_now`, as
    /// `(seq, wall deadline, value)`, in (deadline, seq) order.
    pub fn poll_expired(&mut self, wall_now: u64) -> Option<(u64, u64, V)> {
        self.sync(wall_now);
        loop {
            if let Some(entry) = self.staged.first_entry() {
                let (wall, seq) = *entry.key();
                let value = entry.remove();
                self.slots.remove(&seq);
                if wall <= wall_now {
                    return Some((seq, wall, value));
                }
                // The wall clock went back since it was staged.
                self.rearm(Entry { seq, wall, value }, wall_now);
                continue;
            }
            if !self.stage_next(wall_now) {
                return None;
            }
        }
    }

    /// Takes the entries of the earliest due wheel time out of the wheel:
    /// those due by wall time go to `staged`, the others are re-armed.
    /// False when nothing is due by wheel time.
    fn stage_next(&mut self, wall_now: u64) -> bool {
        let Some(first) = self.wheel.poll_expired(self.w_now) else {
            return false;
        };
        let at = first.deadline;
        self.stage(first.value, wall_now);
        while self.wheel.next_deadline() == Some(at) {
            let Some(next) = self.wheel.poll_expired(self.w_now) else {
                break;
            };
            self.stage(next.value, wall_now);
        }
        true
    }

    fn stage(&mut self, entry: Entry<V>, wall_now: u64) {
        if entry.wall <= wall_now {
            self.slots.insert(entry.seq, Slot::Staged(entry.wall));
            self.staged.insert((entry.wall, entry.seq), entry.value);
        } else {
            self.rearm(entry, wall_now);
        }
    }

    /// Re-arms an entry that fired by wheel time but not by wall time
    /// (the wall clock went backwards): at `W_now + remaining`.
    fn rearm(&mut self, entry: Entry<V>, wall_now: u64) {
        let at = self
            .w_now
            .saturating_add(entry.wall.saturating_sub(wall_now).max(1));
        let seq = entry.seq;
        let handle = self.wheel.insert(at, entry);
        self.slots.insert(seq, Slot::Wheel(handle));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_deadline_then_seq_order_and_never_early() {
        let base = 1_000_000;
        let mut t = Timers::default();
        t.insert(2, base + 10, "b", base);
        t.insert(1, base + 10, "a", base);
        t.insert(3, base + 5, "c", base);
        t.insert(4, base + 20, "d", base);
        assert_eq!(t.cancel(4), Some("d"));
        assert_eq!(t.poll_expired(base + 4), None);
        assert_eq!(t.poll_expired(base + 10), Some((3, base + 5, "c")));
        assert_eq!(t.poll_expired(base + 10), Some((1, base + 10, "a")));
        t.insert(2, base + 30, "b2", base + 10);
        assert_eq!(t.poll_expired(base + 10), None);
        let max = Duration::from_secs(1);
        assert!(t.next_wait(max) <= Duration::from_millis(30));
        assert!(
            !t.insert(5, base + 40, "e", base + 10),
            "after the planned wake"
        );
        assert!(
            t.insert(6, base + 11, "f", base + 10),
            "before the planned wake"
        );
    }

    #[test]
    fn backward_jump_never_fires_early() {
        let base = 10_000_000;
        let mut t = Timers::default();
        t.insert(1, base + 5, "a", base);
        // Forward 10 ms: due.
        assert_eq!(t.poll_expired(base + 10), Some((1, base + 5, "a")));
        // Armed, then the wall clock goes back an hour: the wheel fires it
        // by its own time soon, but it must not come out.
        t.insert(2, base + 20, "b", base + 10);
        let back = base + 10 - 3_600_000;
        assert_eq!(t.poll_expired(back), None);
        assert_eq!(t.poll_expired(back + 100), None);
        assert_eq!(t.len(), 1);
        // New timers are placed by the jumped clock.
        t.insert(3, back + 200, "c", back + 100);
        assert_eq!(t.poll_expired(back + 199), None);
        assert_eq!(t.poll_expired(back + 200), Some((3, back + 200, "c")));
        // The clock comes back: "b" is due at once.
        assert_eq!(t.poll_expired(base + 20), Some((2, base + 20, "b")));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn forward_jump_fires_in_wall_order() {
        let base = 10_000_000;
        let mut t = Timers::default();
        for seq in 0..100u64 {
            t.insert(seq, base + 3_600_000 - seq * 10, seq, base);
        }
        assert_eq!(t.poll_expired(base), None);
        assert_eq!(t.poll_expired(base + 3_600_000 - 500), {
            // seqs 50..99 are due (deadlines base+3_599_010 ..= base+3_599_500).
            Some((99, base + 3_600_000 - 990, 99))
        });
        let rest: Vec<_> = std::iter::from_fn(|| t.poll_expired(base + 3_600_000))
            .map(|(seq, _, _)| seq)
            .collect();
        assert_eq!(rest, (0..99).rev().collect::<Vec<_>>());
        let max = Duration::from_secs(1);
        assert_eq!(t.next_wait(max), max);
    }

    #[test]
    fn cancel_staged_entry() {
        let base = 5_000_000;
        let mut t = Timers::default();
        t.insert(1, base + 1, "a", base);
        t.insert(2, base + 1, "b", base);
        assert_eq!(t.poll_expired(base + 1), Some((1, base + 1, "a")));
        assert_eq!(t.cancel(2), Some("b"));
        assert_eq!(t.poll_expired(base + 1), None);
        assert_eq!(t.len(), 0);
    }
}
