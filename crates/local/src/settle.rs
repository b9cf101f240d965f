//! Where callers wait for their commit group: "durable up to group `g`",
//! and the callers waiting on each group.
//!
//! Each waiting call is woken exactly once, when its own group settles
//! (durable, lost, or the store failed). The sync thread publishes a group
//! by taking the waiters of every group up to it out of the table under a
//! short lock and waking them after it: callers of the groups still open
//! are not woken, and nobody re-polls to find it was not their turn (with
//! one broadcast channel every caller would wake at every group, only to
//! wait again).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use delayd_core::BrokerError;

use crate::sync::unavailable;

/// What is known about the groups so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct Durable {
    pub upto: u64,
    pub failed: Option<String>,
    /// Ranges of tickets whose groups a reopen discarded: they were not
    /// durable when a write failed, and memory was rebuilt from the disk.
    pub lost: Vec<(u64, u64)>,
}

impl Durable {
    fn lost(&self, ticket: u64) -> bool {
        self.lost
            .iter()
            .any(|&(from, to)| (from..=to).contains(&ticket))
    }

    /// Whether a waiter on `ticket` has its answer.
    fn settled(&self, ticket: u64) -> bool {
        self.upto >= ticket || self.failed.is_some() || self.lost(ticket)
    }

    /// The answer for a waiter on `ticket` once `settled`.
    fn answer(&self, ticket: u64) -> Result<(), BrokerError> {
        if self.lost(ticket) {
            return Err(unavailable("lost with a failed write".to_string()));
        }
        if self.upto >= ticket {
            return Ok(());
        }
        Err(unavailable(self.failed.clone().unwrap_or_default()))
    }
}

#[derive(Default)]
struct Table {
    durable: Durable,
    /// Waiting calls by (ticket, waiter number).
    waiters: BTreeMap<(u64, u64), Waker>,
    next_waiter: u64,
}

/// The groups' outcome and the calls waiting for it.
#[derive(Default)]
pub(crate) struct Settled {
    table: Mutex<Table>,
    /// `durable.upto`, readable without the lock (`State::write_pending`).
    upto: Arc<AtomicU64>,
}

impl Settled {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every change under this lock is a single assignment or a map
        // operation: a panic cannot leave it half done.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last durable group, shared: a reader sees at least every group
    /// published before its load.
    pub fn upto_handle(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.upto)
    }

    pub fn durable(&self) -> Durable {
        self.lock().durable.clone()
    }

    /// Why writes are refused, if they are (read per call in the
    /// `Interval` and `Never` modes: clones only the reason).
    pub fn failed(&self) -> Option<String> {
        self.lock().durable.failed.clone()
    }

    /// Changes what is known and wakes every call whose group it settles,
    /// each once, after the lock is released.
    pub fn update(&self, change: impl FnOnce(&mut Durable)) {
        let woken: Vec<Waker> = {
            let mut table = self.lock();
            let lost_before = table.durable.lost.len();
            change(&mut table.durable);
            self.upto.store(table.durable.upto, Ordering::Release);
            let table = &mut *table;
            if table.durable.failed.is_some() || table.durable.lost.len() != lost_before {
                // Rare (a failed write, a reopen): everyone looks again.
                std::mem::take(&mut table.waiters).into_values().collect()
            } else {
                let later = table.waiters.split_off(&(table.durable.upto + 1, 0));
                std::mem::replace(&mut table.waiters, later)
                    .into_values()
                    .collect()
            }
        };
        for waker in woken {
            waker.wake();
        }
    }

    /// Resolves once group `ticket` settled, with its answer.
    pub fn wait(&self, ticket: u64) -> Wait<'_> {
        Wait {
            settled: self,
            ticket,
            waiter: None,
        }
    }
}

/// The future of [`Settled::wait`]. Dropped before it resolves (a caller
/// that went away), it leaves no waker behind.
pub(crate) struct Wait<'a> {
    settled: &'a Settled,
    ticket: u64,
    waiter: Option<u64>,
}

impl Future for Wait<'_> {
    type Output = Result<(), BrokerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut table = self.settled.lock();
        if table.durable.settled(self.ticket) {
            let answer = table.durable.answer(self.ticket);
            if let Some(waiter) = self.waiter.take() {
                table.waiters.remove(&(self.ticket, waiter));
            }
            return Poll::Ready(answer);
        }
        let waiter = match self.waiter {
            Some(waiter) => waiter,
            None => {
                let waiter = table.next_waiter;
                table.next_waiter += 1;
                waiter
            }
        };
        table
            .waiters
            .insert((self.ticket, waiter), cx.waker().clone());
        drop(table);
        self.waiter = Some(waiter);
        Poll::Pending
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter {
            self.settled.lock().waiters.remove(&(self.ticket, waiter));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(wait: &mut Wait<'_>, waker: &Waker) -> Poll<Result<(), BrokerError>> {
        Pin::new(wait).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_group_wakes_its_own_waiters_once_and_no_later_ones() {
        let settled = Settled::default();
        let (first, second) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (w1, w2) = (Waker::from(first.clone()), Waker::from(second.clone()));
        let mut a = settled.wait(1);
        let mut b = settled.wait(2);
        assert!(poll(&mut a, &w1).is_pending());
        assert!(poll(&mut b, &w2).is_pending());
        settled.update(|d| d.upto = 1);
        assert_eq!(first.0.load(Ordering::SeqCst), 1);
        assert_eq!(second.0.load(Ordering::SeqCst), 0, "group 2 is still open");
        assert!(matches!(poll(&mut a, &w1), Poll::Ready(Ok(()))));
        assert!(poll(&mut b, &w2).is_pending());
        settled.update(|d| d.upto = 2);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(matches!(poll(&mut b, &w2), Poll::Ready(Ok(()))));
        assert!(settled.lock().waiters.is_empty());
    }

    #[test]
    fn a_failure_or_a_lost_range_answers_every_waiter() {
        let settled = Settled::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut lost = settled.wait(3);
        let mut kept = settled.wait(9);
        assert!(poll(&mut lost, &waker).is_pending());
        assert!(poll(&mut kept, &waker).is_pending());
        settled.update(|d| {
            d.lost.push((2, 4));
            d.upto = 5;
        });
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert!(matches!(poll(&mut lost, &waker), Poll::Ready(Err(_))));
        assert!(poll(&mut kept, &waker).is_pending());
        settled.update(|d| d.failed = Some("disk".into()));
        assert!(matches!(poll(&mut kept, &waker), Poll::Ready(Err(_))));
    }

    #[test]
    fn a_dropped_wait_leaves_no_waker() {
        let settled = Settled::default();
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut wait = settled.wait(1);
        assert!(poll(&mut wait, &waker).is_pending());
        assert!(
            poll(&mut wait, &waker).is_pending(),
            "a second poll replaces its waker"
        );
        assert_eq!(settled.lock().waiters.len(), 1);
        drop(wait);
        assert!(settled.lock().waiters.is_empty());
    }
}
