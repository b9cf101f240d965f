//! Per-shard batching of one node's concurrent calls: while one function
//! call for a lane (a queue shard, for acks or leases) is on its way to
//! Redis, the calls that arrive for the same lane wait in it, and the next
//! round trip carries all of them. An idle lane costs nothing: the first
//! call starts a runner at once, so a lone call is not delayed; under load
//! one `FCALL` serves many calls (group commit, as a database log does).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};

/// A call waiting in a lane: its input and where its answer goes.
pub(crate) type Waiting<T, R> = (T, oneshot::Sender<R>);

pub(crate) struct Lanes<K, T, R> {
    lanes: Mutex<HashMap<K, Vec<Waiting<T, R>>>>,
    hold: Hold,
}

/// A test hook ([`Lanes::hold`]): how many calls the next runner waits for
/// before its first round (0: none), and the signal of each new call.
#[derive(Default)]
struct Hold {
    calls: AtomicUsize,
    joined: Notify,
}

impl<K, T, R> Default for Lanes<K, T, R> {
    fn default() -> Self {
        Self {
            lanes: Mutex::new(HashMap::new()),
            hold: Hold::default(),
        }
    }
}

impl<K: Eq + Hash + Clone, T, R> Lanes<K, T, R> {
    /// The lanes stay consistent under every operation, so a panic
    /// elsewhere that poisoned the lock leaves them usable.
    fn lock(&self) -> MutexGuard<'_, HashMap<K, Vec<Waiting<T, R>>>> {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `item` on `key`'s lane. Returns where its answer will come,
    /// and true when the lane was idle: then the caller must start a runner
    /// that calls [`Lanes::take`] until it returns `None`.
    pub(crate) fn submit(&self, key: K, item: T) -> (oneshot::Receiver<R>, bool) {
        let (tx, rx) = oneshot::channel();
        let mut lanes = self.lock();
        let idle = !lanes.contains_key(&key);
        lanes.entry(key).or_default().push((item, tx));
        drop(lanes);
        if self.hold.calls.load(Ordering::SeqCst) > 0 {
            self.hold.joined.notify_waiters();
        }
        (rx, idle)
    }

    /// Test hook: the next runner to call [`Lanes::held`] waits until its
    /// lane holds `calls` calls, so a test of batching gets the overlap it
    /// counts on instead of hoping the scheduler provides it.
    pub(crate) fn hold(&self, calls: usize) {
        self.hold.calls.store(calls, Ordering::SeqCst);
    }

    /// Called by a runner before its first round: returns at once unless a
    /// [`hold`](Lanes::hold) is set; then waits until `key`'s lane holds
    /// that many calls, and spends the hold.
    pub(crate) async fn held(&self, key: &K) {
        loop {
            let calls = self.hold.calls.load(Ordering::SeqCst);
            if calls == 0 {
                return;
            }
            // Registered before the count is read, so no call is missed.
            let joined = self.hold.joined.notified();
            tokio::pin!(joined);
            joined.as_mut().enable();
            if self.lock().get(key).map_or(0, Vec::len) >= calls {
                self.hold.calls.store(0, Ordering::SeqCst);
                return;
            }
            joined.await;
        }
    }

    /// The next round for the lane's runner: the waiting calls in arrival
    /// order, as many as fit in `budget` by `weight` (at least one). `None`
    /// when nothing waits: the lane is then idle again (and the runner
    /// ends), atomically with the check, so no call is left behind.
    pub(crate) fn take(
        &self,
        key: &K,
        budget: usize,
        weight: impl Fn(&T) -> usize,
    ) -> Option<Vec<Waiting<T, R>>> {
        let mut lanes = self.lock();
        let waiting = lanes.get_mut(key)?;
        if waiting.is_empty() {
            lanes.remove(key);
            return None;
        }
        let mut used = 0;
        let mut n = 0;
        for (item, _) in waiting.iter() {
            let w = weight(item);
            if n > 0 && used + w > budget {
                break;
            }
            used += w;
            n += 1;
        }
        Some(waiting.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_batches_what_arrives_while_busy_and_goes_idle_atomically() {
        let lanes: Lanes<u32, usize, usize> = Lanes::default();
        let (_a, first) = lanes.submit(1, 600);
        assert!(first, "an idle lane asks for a runner");
        let (_b, second) = lanes.submit(1, 300);
        let (_c, third) = lanes.submit(1, 300);
        assert!(!second && !third, "a busy lane does not");
        let (_d, other) = lanes.submit(2, 1);
        assert!(other, "lanes are independent");

        let round = lanes.take(&1, 1000, |w| *w).unwrap();
        assert_eq!(
            round.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            [600, 300]
        );
        let round = lanes.take(&1, 1000, |w| *w).unwrap();
        assert_eq!(round.len(), 1);
        assert!(lanes.take(&1, 1000, |w| *w).is_none());
        let (_e, again) = lanes.submit(1, 5);
        assert!(again, "after the runner saw it empty, the lane is idle");
    }

    #[tokio::test]
    async fn a_hold_keeps_the_runner_until_the_calls_have_joined() {
        let lanes: std::sync::Arc<Lanes<u32, usize, usize>> = Default::default();
        lanes.held(&1).await; // no hold: at once
        lanes.hold(3);
        let _a = lanes.submit(1, 1);
        let runner = tokio::spawn({
            let lanes = lanes.clone();
            async move {
                lanes.held(&1).await;
                lanes.take(&1, 1000, |w| *w).map(|round| round.len())
            }
        });
        let _b = lanes.submit(1, 1);
        tokio::task::yield_now().await;
        assert!(!runner.is_finished(), "two of three calls: still held");
        let _c = lanes.submit(1, 1);
        assert_eq!(runner.await.unwrap(), Some(3), "one round for all three");
        lanes.held(&1).await; // the hold is spent
    }

    #[test]
    fn an_item_heavier_than_the_budget_still_goes_alone() {
        let lanes: Lanes<u32, usize, usize> = Lanes::default();
        let _ = lanes.submit(1, 5_000);
        let _ = lanes.submit(1, 1);
        assert_eq!(lanes.take(&1, 1000, |w| *w).unwrap().len(), 1);
        assert_eq!(lanes.take(&1, 1000, |w| *w).unwrap().len(), 1);
    }
}
