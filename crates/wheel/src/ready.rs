//! The ready queue: entries that are due, in (deadline, insertion) order.
//!
//! Each item carries a `stamp` taken from a global counter when the entry
//! became ready. For equal deadlines the stamp order equals insertion order:
//! two entries with the same deadline have the same tick, so they are either
//! in the same slot list (kept in insertion order, moved together) or the
//! newer one was inserted after the tick had already passed.
//!
//! Items are pushed in order almost always (slots fire in tick order), so the
//! main store is a `VecDeque` with O(1) push/pop. Out-of-order pushes (tick >
//! 1 slots whose deadlines differ, or overdue inserts) go to a small binary
//! heap; `pop` takes the smaller of the two fronts. Cancelled entries are not
//! removed (that would be O(n)); the wheel drops stale items lazily by
//! checking the stamp stored in the entry.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ReadyItem {
    pub(crate) deadline: u64,
    pub(crate) stamp: u64,
    pub(crate) index: u32,
}

#[derive(Default)]
pub(crate) struct ReadyQueue {
    in_order: VecDeque<ReadyItem>,
    late: BinaryHeap<Reverse<ReadyItem>>,
}

impl ReadyQueue {
    pub(crate) fn push(&mut self, item: ReadyItem) {
        match self.in_order.back() {
            Some(back) if *back > item => self.late.push(Reverse(item)),
            _ => self.in_order.push_back(item),
        }
    }

    pub(crate) fn extend(&mut self, items: impl IntoIterator<Item = ReadyItem>) {
        for item in items {
            self.push(item);
        }
    }

    /// The smallest item, stale or not.
    pub(crate) fn peek(&self) -> Option<ReadyItem> {
        let a = self.in_order.front().copied();
        let b = self.late.peek().map(|r| r.0);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn pop(&mut self) -> Option<ReadyItem> {
        let from_late = match (self.in_order.front(), self.late.peek()) {
            (Some(a), Some(b)) => b.0 < *a,
            (None, Some(_)) => true,
            _ => false,
        };
        if from_late {
            self.late.pop().map(|r| r.0)
        } else {
            self.in_order.pop_front()
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.in_order.is_empty() && self.late.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(deadline: u64, stamp: u64) -> ReadyItem {
        ReadyItem {
            deadline,
            stamp,
            index: 0,
        }
    }

    #[test]
    fn merges_out_of_order_pushes() {
        let mut q = ReadyQueue::default();
        for (d, s) in [(5, 1), (7, 2), (3, 3), (7, 4), (6, 5), (9, 6)] {
            q.push(item(d, s));
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|i| (i.deadline, i.stamp))
            .collect();
        assert_eq!(order, [(3, 3), (5, 1), (6, 5), (7, 2), (7, 4), (9, 6)]);
        assert!(q.is_empty());
    }
}
