//! Node-local wake-ups: waiting lease calls per queue, and the timers for the
//! earliest due time this node knows of per queue shard. Pub/sub events
//! from other nodes and this node's own writes feed both; nothing here
//! talks to Redis.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use delayd_core::QueueName;
use tokio::sync::Notify;

/// Above this many newly ready messages, every waiter is woken.
const MAX_TARGETED_WAKES: usize = 64;

/// Lease calls waiting on one queue.
#[derive(Default)]
pub(crate) struct QueueWaiters {
    /// Woken (all at once) when the queue may have ready messages.
    pub(crate) notify: Notify,
    /// Bumped when the queue is deleted, so waiting calls return empty.
    pub(crate) deletions: AtomicU64,
}

#[derive(Default)]
struct TimerSet {
    by_due: BTreeSet<(u64, QueueName, u32)>,
    /// The one armed due time per shard: only the earliest matters, since
    /// each promotion reports the shard's next due time.
    earliest: HashMap<(QueueName, u32), u64>,
}

#[derive(Default)]
pub(crate) struct Wake {
    waiters: Mutex<HashMap<QueueName, Arc<QueueWaiters>>>,
    timers: Mutex<TimerSet>,
    /// Tells the timer task that an earlier timer was armed.
    pub(crate) timer_changed: Notify,
}

// The maps stay consistent under every operation, so a panic elsewhere
// that poisoned the lock leaves them usable.
use delayd_core::poison::lock;

impl Wake {
    pub(crate) fn waiter(&self, queue: &QueueName) -> Arc<QueueWaiters> {
        lock(&self.waiters)
            .entry(queue.clone())
            .or_default()
            .clone()
    }

    /// Forgets a queue's waiter entry once no lease call holds it, so lease
    /// calls on many (possibly unknown) queue names do not grow the map.
    pub(crate) fn release(&self, queue: &QueueName, waiter: Arc<QueueWaiters>) {
        let mut waiters = lock(&self.waiters);
        // Two references left: the map's and `waiter`.
        if Arc::strong_count(&waiter) == 2 {
            waiters.remove(queue);
        }
    }

    /// The queue may have ready messages: wake its waiting lease calls.
    pub(crate) fn ready(&self, queue: &QueueName) {
        if let Some(w) = lock(&self.waiters).get(queue) {
            w.notify.notify_waiters();
        }
    }

    /// `n` messages of the queue became ready: wake at most `n` of its
    /// waiting lease calls (one each, in arrival order) instead of all of
    /// them, so one due message does not send every waiter to Redis. A
    /// woken call that finds nothing loops and waits again; a dropped one
    /// passes its wake-up on (tokio's `Notify`).
    pub(crate) fn ready_n(&self, queue: &QueueName, n: usize) {
        if let Some(w) = lock(&self.waiters).get(queue) {
            if n >= MAX_TARGETED_WAKES {
                w.notify.notify_waiters();
            } else {
                for _ in 0..n {
                    w.notify.notify_one();
                }
            }
        }
    }

    pub(crate) fn ready_all(&self) {
        for w in lock(&self.waiters).values() {
            w.notify.notify_waiters();
        }
    }

    pub(crate) fn deleted(&self, queue: &QueueName) {
        if let Some(w) = lock(&self.waiters).get(queue) {
            w.deletions.fetch_add(1, Ordering::SeqCst);
            w.notify.notify_waiters();
        }
        let mut timers = lock(&self.timers);
        let stale: Vec<_> = timers
            .earliest
            .keys()
            .filter(|(q, _)| q == queue)
            .cloned()
            .collect();
        for key in stale {
            if let Some(due) = timers.earliest.remove(&key) {
                timers.by_due.remove(&(due, key.0, key.1));
            }
        }
    }

    /// Arms a wake-up for a shard at `due` (epoch ms). Returns true when it
    /// is earlier than what this node knew for the shard (then other nodes
    /// may not know it either, and the caller publishes it).
    pub(crate) fn arm(&self, queue: &QueueName, shard: u32, due: u64) -> bool {
        let mut timers = lock(&self.timers);
        let key = (queue.clone(), shard);
        if let Some(&known) = timers.earliest.get(&key) {
            if known <= due {
                return false;
            }
            timers.by_due.remove(&(known, queue.clone(), shard));
        }
        let first = timers.by_due.first().is_none_or(|(d, _, _)| due < *d);
        timers.earliest.insert(key, due);
        timers.by_due.insert((due, queue.clone(), shard));
        drop(timers);
        if first {
            self.timer_changed.notify_one();
        }
        true
    }

    /// Whether the shard may have something due at `now`: false only when
    /// its armed timer is later (then the timer promotes in time, and a
    /// lease call can skip promotion).
    pub(crate) fn may_be_due(&self, queue: &QueueName, shard: u32, now: u64) -> bool {
        lock(&self.timers)
            .earliest
            .get(&(queue.clone(), shard))
            .is_none_or(|due| *due <= now)
    }

    /// The earliest armed due time.
    pub(crate) fn next_due(&self) -> Option<u64> {
        lock(&self.timers).by_due.first().map(|(d, _, _)| *d)
    }

    /// Disarms and returns every shard due at `now`.
    pub(crate) fn take_due(&self, now: u64) -> Vec<(QueueName, u32)> {
        let mut timers = lock(&self.timers);
        let mut out = Vec::new();
        while let Some((due, _, _)) = timers.by_due.first() {
            if *due > now {
                break;
            }
            let Some((_, queue, shard)) = timers.by_due.pop_first() else {
                break;
            };
            timers.earliest.remove(&(queue.clone(), shard));
            out.push((queue, shard));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiter_entries_are_released_by_the_last_holder() {
        let wake = Wake::default();
        let q = QueueName::new("q").unwrap();
        let (a, b) = (wake.waiter(&q), wake.waiter(&q));
        assert!(Arc::ptr_eq(&a, &b));
        wake.release(&q, a);
        assert_eq!(lock(&wake.waiters).len(), 1, "b still holds it");
        wake.release(&q, b);
        assert!(lock(&wake.waiters).is_empty());
    }

    #[test]
    fn arm_keeps_the_earliest_per_shard() {
        let wake = Wake::default();
        let q = QueueName::new("q").unwrap();
        assert!(wake.may_be_due(&q, 0, 0), "no timer: unknown, so maybe");
        assert!(wake.arm(&q, 0, 100));
        assert!(!wake.may_be_due(&q, 0, 99));
        assert!(wake.may_be_due(&q, 0, 100));
        assert!(!wake.arm(&q, 0, 150));
        assert!(wake.arm(&q, 0, 50));
        assert!(wake.arm(&q, 1, 70));
        assert_eq!(wake.next_due(), Some(50));
        assert_eq!(wake.take_due(60), vec![(q.clone(), 0)]);
        assert_eq!(wake.next_due(), Some(70));
        assert!(wake.arm(&q, 0, 120), "a fired shard can be armed again");
        assert_eq!(wake.take_due(1_000).len(), 2);
        assert_eq!(wake.next_due(), None);
    }
}
