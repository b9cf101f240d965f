//! The lease call: take what is ready, else wait in line for the hand-off
//! (see `waiters`).
//!
//! A lease does not wait for the fsync of its own write (the lease id, the
//! deadline and the attempt count join the open group and become durable
//! with it, or with any later call's fsync). A crash before then loses
//! that lease: after the restart the message is as it was before it (due,
//! its attempt not counted) and is delivered again, which at-least-once
//! delivery allows; beanstalkd never logs a reserve at all. What a lease
//! does wait for is the durability of what it hands out: when a leased
//! message was itself written by a group not yet durable (an enqueue,
//! nack or reschedule still in the open or the in-flight group,
//! `State::write_pending`), the lease waits for its group's fsync, so no
//! consumer ever sees a message a crash could still take back. An ack
//! waits for its fsync, and groups are durable in order, so an ack that
//! returned also made the lease before it durable.

use std::time::Duration;

use delayd_core::{BrokerResult, Delivery, LeaseRequest, QueueName, Via};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::broker::Inner;
use crate::consume::{fill, Leased};
use crate::lock::Site;
use crate::state::Tx;
use crate::waiters::Handed;

/// Takes a waiting call out of line if its future is dropped (the client
/// went away) before it was served or timed out.
struct InLine<'a> {
    inner: &'a Inner,
    id: Option<u64>,
}

impl InLine<'_> {
    /// Leaves the line; false when the call was served (or its queue
    /// deleted) first, so that its channel holds the answer.
    fn leave(&mut self) -> bool {
        match self.id.take() {
            Some(id) => self.inner.lock_state(Site::Lease).waiters.remove(id),
            None => false,
        }
    }

    fn served(&mut self) {
        self.id = None;
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// What one look under the state lock found: the deliveries (or the
/// error), the commit to wait for when they read writes not yet durable,
/// and the call's place in line when it registered as a waiter.
type Look = (
    BrokerResult<Vec<Leased>>,
    Option<u64>,
    Option<(u64, oneshot::Receiver<BrokerResult<Handed>>)>,
);

impl Inner {
    /// One look under the state lock: time settled at `now`, then what is
    /// ready leased. With `wait`, a call that found nothing registers as a
    /// waiter in the same lock hold, so no message that becomes ready later
    /// can pass it by.
    fn lease_look(
        &self,
        queues: &[QueueName],
        request: &LeaseRequest,
        via: Via,
        wait: bool,
    ) -> BrokerResult<Look> {
        let mut state = self.lock_state(Site::Lease);
        let now = self.clock.now_ms();
        self.catch_up(&mut state, now)?;
        let mut tx = Tx::default();
        let taken = state.lease_now(queues, request.max, request.lease_ms, via, now, &mut tx);
        let waiting = match &taken {
            Ok(got) if got.is_empty() && wait => Some(state.waiters.register(
                queues,
                request.max,
                request.lease_ms,
                via,
            )),
            _ => None,
        };
        let undurable = tx.reads_undurable;
        let ticket = self.absorb_locked(&mut state, tx, now);
        Ok((taken, undurable.then_some(ticket), waiting))
    }

    /// The deliveries of a look that did not wait in line, once the writes
    /// they read are durable.
    async fn answer(
        &self,
        taken: BrokerResult<Vec<Leased>>,
        ticket: Option<u64>,
    ) -> BrokerResult<Vec<Delivery>> {
        let got = fill(&self.store, taken?)?;
        if let Some(ticket) = ticket {
            self.syncer.wait(ticket).await?;
        }
        Ok(got)
    }

    /// A waiting lease call's deadline passed with nothing handed to it:
    /// time is settled at the deadline before it answers empty, so a
    /// message due by then (which the driver may not have made ready yet)
    /// is taken now. It does not wait in line again.
    async fn lease_at_deadline(
        &self,
        queues: &[QueueName],
        request: &LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        let (taken, ticket, _) = self.lease_look(queues, request, via, false)?;
        self.answer(taken, ticket).await
    }

    /// `Broker::lease` after its argument checks.
    pub async fn lease(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        self.check_writable()?;
        let deadline = Instant::now() + Duration::from_millis(request.wait_ms);
        let (taken, ticket, waiting) =
            self.lease_look(queues, &request, via, request.wait_ms > 0)?;
        let Some((id, mut receiver)) = waiting else {
            return self.answer(taken, ticket).await;
        };
        let mut line = InLine {
            inner: self,
            id: Some(id),
        };
        let answer = tokio::select! {
            answer = &mut receiver => answer.ok(),
            () = tokio::time::sleep_until(deadline) => {
                if line.leave() {
                    return self.lease_at_deadline(queues, &request, via).await;
                }
                // Served (or the queue deleted) just before the deadline.
                receiver.try_recv().ok()
            }
            // A shutdown ends the wait with an empty list.
            () = self.stopped() => return Ok(Vec::new()),
        };
        line.served();
        match answer {
            Some(Ok(Handed { deliveries, ticket })) => {
                let deliveries = fill(&self.store, deliveries)?;
                if let Some(ticket) = ticket {
                    self.syncer.wait(ticket).await?;
                }
                Ok(deliveries)
            }
            Some(Err(e)) => Err(e),
            // Its queue was deleted.
            None => Ok(Vec::new()),
        }
    }
}
