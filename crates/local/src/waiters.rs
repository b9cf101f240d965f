//! Lease calls waiting for a ready message: the waiter hand-off.
//!
//! A lease call that finds nothing ready registers here (under the state
//! lock, in the same hold that found nothing, so no wake-up can be missed)
//! and sleeps on its own oneshot channel. When a transition makes messages
//! ready in a queue, the transition itself (still under the lock) leases
//! them to that queue's waiters in arrival order and sends each waiter its
//! deliveries: one message wakes exactly one waiter, and a woken waiter
//! does not take the lock again. There is no broadcast.
//!
//! Waiter ids grow with arrival, so a queue's `BTreeSet` of ids is its
//! arrival order, and removing a waiter that timed out is `O(log n)`.

use std::collections::{BTreeSet, HashMap};

use delayd_core::{BrokerResult, QueueName, Via};
use tokio::sync::oneshot;

/// What a waiter is handed: its deliveries (their payloads read by the
/// waiter itself, outside the state lock), and the commit group that must
/// be durable before they are returned to the client.
pub(crate) struct Handed {
    pub deliveries: Vec<crate::consume::Leased>,
    /// The group whose fsync the deliveries wait for, if they must.
    pub ticket: Option<u64>,
}

pub(crate) type HandOff = oneshot::Sender<BrokerResult<Handed>>;

pub(crate) struct Waiter {
    pub queues: Vec<QueueName>,
    pub max: u32,
    pub lease_ms: Option<u64>,
    /// The frontend of the call (its deliveries' `leased` events).
    pub via: Via,
    pub sender: HandOff,
}

#[derive(Default)]
pub(crate) struct Waiters {
    next_id: u64,
    by_id: HashMap<u64, Waiter>,
    by_queue: HashMap<QueueName, BTreeSet<u64>>,
}

impl Waiters {
    /// Registers a waiting lease call; returns its id (for
    /// [`remove`](Self::remove)) and the channel its deliveries arrive on.
    pub fn register(
        &mut self,
        queues: &[QueueName],
        max: u32,
        lease_ms: Option<u64>,
        via: Via,
    ) -> (u64, oneshot::Receiver<BrokerResult<Handed>>) {
        let (sender, receiver) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        for queue in queues {
            self.by_queue.entry(queue.clone()).or_default().insert(id);
        }
        let waiter = Waiter {
            queues: queues.to_vec(),
            max,
            lease_ms,
            via,
            sender,
        };
        self.by_id.insert(id, waiter);
        (id, receiver)
    }

    /// Forgets a waiter (timed out or gone). False when it was not
    /// registered any more: it has been handed something (or its queue was
    /// deleted) and its channel holds the answer.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(waiter) = self.by_id.remove(&id) else {
            return false;
        };
        self.unindex(id, &waiter.queues);
        true
    }

    /// Whether any call waits on `queue`.
    pub fn waiting_on(&self, queue: &QueueName) -> bool {
        self.by_queue.contains_key(queue)
    }

    /// Queues some call waits on.
    pub fn queues(&self) -> impl Iterator<Item = &QueueName> {
        self.by_queue.keys()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Takes the longest-waiting call on `queue` whose caller is still
    /// there (calls whose future was dropped are forgotten on the way).
    pub fn pop(&mut self, queue: &QueueName) -> Option<(u64, Waiter)> {
        loop {
            let id = *self.by_queue.get(queue)?.first()?;
            let Some(waiter) = self.by_id.remove(&id) else {
                debug_assert!(false, "waiter {id} indexed on {queue} but not registered");
                self.unindex(id, std::slice::from_ref(queue));
                continue;
            };
            self.unindex(id, &waiter.queues);
            if !waiter.sender.is_closed() {
                return Some((id, waiter));
            }
        }
    }

    /// Puts back a waiter [`pop`](Self::pop) took but could not serve, at
    /// its old place in line.
    pub fn restore(&mut self, id: u64, waiter: Waiter) {
        for queue in &waiter.queues {
            self.by_queue.entry(queue.clone()).or_default().insert(id);
        }
        self.by_id.insert(id, waiter);
    }

    /// The queue was deleted: every call waiting on it returns empty (its
    /// sender is dropped, which the waiting call reads as "nothing").
    pub fn drop_queue(&mut self, queue: &QueueName) {
        let Some(ids) = self.by_queue.remove(queue) else {
            return;
        };
        for id in ids {
            if let Some(waiter) = self.by_id.remove(&id) {
                self.unindex(id, &waiter.queues);
            }
        }
    }

    fn unindex(&mut self, id: u64, queues: &[QueueName]) {
        for queue in queues {
            if let Some(ids) = self.by_queue.get_mut(queue) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.by_queue.remove(queue);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> QueueName {
        QueueName::new(name).expect("valid name")
    }

    #[test]
    fn arrival_order_and_removal() {
        let mut w = Waiters::default();
        let (a, _ra) = w.register(&[q("x")], 1, None, Via::Http);
        let (b, _rb) = w.register(&[q("x"), q("y")], 1, None, Via::Http);
        let (c, _rc) = w.register(&[q("y")], 1, None, Via::Http);
        assert!(w.remove(a));
        assert!(!w.remove(a), "removed twice");
        let (first, waiter) = w.pop(&q("y")).expect("b waits on y");
        assert_eq!(first, b);
        assert!(!w.waiting_on(&q("x")), "b left x's line too");
        w.restore(first, waiter);
        assert_eq!(w.pop(&q("y")).map(|(id, _)| id), Some(b), "restored first");
        assert_eq!(w.pop(&q("y")).map(|(id, _)| id), Some(c));
        assert!(w.pop(&q("y")).is_none());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn dropped_callers_are_skipped() {
        let mut w = Waiters::default();
        let (_, gone) = w.register(&[q("x")], 1, None, Via::Http);
        drop(gone);
        let (live, _keep) = w.register(&[q("x")], 1, None, Via::Http);
        assert_eq!(w.pop(&q("x")).map(|(id, _)| id), Some(live));
    }

    #[test]
    fn deleted_queue_releases_its_waiters() {
        let mut w = Waiters::default();
        let (_, mut rx) = w.register(&[q("x"), q("y")], 1, None, Via::Http);
        w.drop_queue(&q("x"));
        assert!(!w.waiting_on(&q("y")));
        assert!(rx.try_recv().is_err(), "sender dropped: nothing handed");
        assert_eq!(w.len(), 0);
    }
}
