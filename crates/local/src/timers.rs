//! The broker's timers: one per in-memory message that waits for a time
//! (scheduled: its `deliver_at`; leased: its `lease_until`), keyed by seq.
//!
//! A small ordered map rather than `delayd-wheel`'s `KeyedWheel`: deadlines
//! here are wall-clock ms, and the wall clock may go backwards, which the
//! wheel's monotonic `advance` ignores (see docs/storage.md, "Deviations").
//! The interface mirrors the wheel's (`insert`/`cancel`/`next_deadline`/
//! `poll_expired`). With only the horizon's messages in memory the map stays
//! small, and its O(log n) is not the bottleneck (the fsync is).

use std::collections::{BTreeMap, HashMap};

pub(crate) struct Timers<V> {
    by_deadline: BTreeMap<(u64, u64), V>,
    deadline_of: HashMap<u64, u64>,
}

impl<V> Default for Timers<V> {
    fn default() -> Self {
        Self {
            by_deadline: BTreeMap::new(),
            deadline_of: HashMap::new(),
        }
    }
}

impl<V> Timers<V> {
    /// Arms (or re-arms) the timer of `seq`.
    pub fn insert(&mut self, seq: u64, deadline: u64, value: V) {
        self.cancel(seq);
        self.by_deadline.insert((deadline, seq), value);
        self.deadline_of.insert(seq, deadline);
    }

    pub fn cancel(&mut self, seq: u64) -> Option<V> {
        let deadline = self.deadline_of.remove(&seq)?;
        self.by_deadline.remove(&(deadline, seq))
    }

    pub fn next_deadline(&self) -> Option<u64> {
        self.by_deadline.keys().next().map(|(d, _)| *d)
    }

    /// The earliest timer with `deadline <= now`, in (deadline, seq) order.
    pub fn poll_expired(&mut self, now: u64) -> Option<(u64, u64, V)> {
        let (&(deadline, seq), _) = self.by_deadline.first_key_value()?;
        if deadline > now {
            return None;
        }
        let value = self.by_deadline.remove(&(deadline, seq))?;
        self.deadline_of.remove(&seq);
        Some((seq, deadline, value))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.deadline_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_deadline_then_seq_order_and_never_early() {
        let mut t = Timers::default();
        t.insert(2, 10, "b");
        t.insert(1, 10, "a");
        t.insert(3, 5, "c");
        t.insert(4, 20, "d");
        assert_eq!(t.cancel(4), Some("d"));
        assert_eq!(t.poll_expired(4), None);
        assert_eq!(t.poll_expired(10), Some((3, 5, "c")));
        assert_eq!(t.poll_expired(10), Some((1, 10, "a")));
        t.insert(2, 30, "b2");
        assert_eq!(t.poll_expired(10), None);
        assert_eq!(t.next_deadline(), Some(30));
        assert_eq!(t.len(), 1);
    }
}
