//! The explorer's history (crates/history's format): every call it makes,
//! with the injected clock's time before and after (the broker reads no
//! other clock, so no slack is needed), checked at the end of each seed by
//! the one history checker beside the explorer's own record.
//!
//! A call answered `Unavailable` may or may not have taken effect
//! (outcome `unknown`), and the broker then reopens its engine in
//! process: memory is rebuilt from disk as at a restart, so the leases
//! held may end. That reopen is recorded as a `maybe` crash from the
//! first failed call to the next call answered without an error.

use delayd_core::{
    BrokerError, BrokerResult, Delivery, EnqueueOutcome, LeaseId, MessageId, QueueName,
};
use delayd_history::{
    Crash, Enqueue, Extend, Fire, LeaseCall, LeaseFailed, MessageCall, Nack, Op, Outcome,
    QueueCall, Reschedule, Span,
};

use super::Explorer;

/// What an answer says the call did.
pub(super) fn outcome<T>(r: &BrokerResult<T>) -> Outcome {
    match r {
        Ok(_) => Outcome::Ok,
        Err(BrokerError::Unavailable { .. }) => Outcome::Unknown,
        Err(BrokerError::LeaseMismatch { .. }) => Outcome::LeaseMismatch,
        Err(BrokerError::MessageNotFound { .. } | BrokerError::QueueNotFound(_)) => {
            Outcome::NotFound
        }
        Err(_) => Outcome::Error,
    }
}

impl Explorer {
    /// The span of a call that started at `invoke` and has its answer now.
    pub(super) fn span(&self, invoke: u64) -> Span {
        Span {
            invoke,
            complete: self.now(),
        }
    }

    /// Notes an answer: an `Unavailable` opens a possible reopen; a call
    /// that wrote (answered `ok` and changed something) closes it, since
    /// until the reopen every write is refused. A refusal (`lease_mismatch`)
    /// or an empty lease may write nothing, so it proves nothing.
    pub(super) fn answered(&mut self, at: Span, outcome: Outcome) {
        match (outcome, self.reopen_from) {
            (Outcome::Unknown, None) => self.reopen_from = Some(at.invoke),
            (Outcome::Ok, Some(from)) => {
                self.history.push(Op::Crash(Crash {
                    invoke: from,
                    complete: at.complete,
                    ends_leases: true,
                    maybe: true,
                }));
                self.reopen_from = None;
            }
            _ => {}
        }
    }

    pub(super) fn rec_enqueue(
        &mut self,
        queue: &QueueName,
        at: Span,
        items: &[(MessageId, u64, Option<String>)],
        r: &BrokerResult<Vec<BrokerResult<EnqueueOutcome>>>,
    ) {
        let created =
            matches!(r, Ok(each) if each.iter().any(|o| o.as_ref().is_ok_and(|o| o.created)));
        match r {
            Ok(_) if !created => {}
            _ => self.answered(at, outcome(r)),
        }
        for (n, (id, deliver_at, key)) in items.iter().enumerate() {
            let one = match r {
                Ok(each) => each.get(n).map(|o| o.as_ref().map_err(Clone::clone)),
                Err(e) => Some(Err(e.clone())),
            };
            let Some(one) = one else { continue };
            let (seq, exists, deliver_at) = match &one {
                Ok(o) => (Some(o.seq), !o.created, Some(o.deliver_at)),
                Err(_) => (None, false, Some(*deliver_at)),
            };
            self.history.push(Op::Enqueue(Enqueue {
                invoke: at.invoke,
                complete: at.complete,
                queue: queue.as_str().into(),
                id: id.as_str().into(),
                outcome: outcome(&one),
                exists,
                seq,
                deliver_at,
                key: key.clone(),
                priority: None,
            }));
        }
    }

    /// Each message handed out, and the fire time of a schedule's message.
    pub(super) fn rec_leased(
        &mut self,
        queue: &QueueName,
        at: Span,
        r: &BrokerResult<Vec<Delivery>>,
    ) {
        if !matches!(r, Ok(got) if got.is_empty()) {
            self.answered(at, outcome(r));
        }
        let Ok(got) = r else {
            self.history.push(Op::LeaseFailed(LeaseFailed {
                invoke: at.invoke,
                complete: at.complete,
                queue: queue.as_str().into(),
            }));
            return;
        };
        for d in got {
            self.history.push(Op::Lease(delayd_history::Lease {
                invoke: at.invoke,
                complete: at.complete,
                queue: d.queue.as_str().into(),
                id: d.id.as_str().into(),
                seq: d.seq,
                attempt: d.attempt,
                lease_id: d.lease_id.0.clone(),
                lease_until: d.lease_until,
                deliver_at: d.deliver_at,
                key: d.key.as_ref().map(|k| k.as_str().to_string()),
                granted_at: None,
            }));
            // `<schedule>:<fire time>`; a trigger's `<schedule>:manual:<now>`
            // is no fire.
            if let Some((schedule, t)) = d.id.as_str().split_once(':') {
                if let Ok(fire_at) = t.parse() {
                    self.history.push(Op::Fire(Fire {
                        invoke: at.invoke,
                        complete: at.complete,
                        queue: d.queue.as_str().into(),
                        schedule: schedule.into(),
                        fire_at,
                        seq: d.seq,
                    }));
                }
            }
        }
    }

    /// An ack, bury or extend (`until`: the extend's answer) or nack of
    /// one lease.
    pub(super) fn rec_lease_call<T>(
        &mut self,
        kind: LeaseCallKind,
        queue: &QueueName,
        (id, lease): (&MessageId, &LeaseId),
        at: Span,
        r: &BrokerResult<T>,
    ) {
        let o = outcome(r);
        self.answered(at, o);
        let call = LeaseCall {
            invoke: at.invoke,
            complete: at.complete,
            queue: queue.as_str().into(),
            id: id.as_str().into(),
            lease_id: lease.0.clone(),
            outcome: o,
        };
        let op = match kind {
            LeaseCallKind::Ack => Op::Ack(call),
            LeaseCallKind::Bury => Op::Bury(call),
            LeaseCallKind::Nack { defer, delay_ms } => Op::Nack(Nack {
                invoke: call.invoke,
                complete: call.complete,
                queue: call.queue,
                id: call.id,
                lease_id: call.lease_id,
                outcome: o,
                defer,
                delay_ms,
            }),
            LeaseCallKind::Extend { lease_until } => Op::Extend(Extend {
                invoke: call.invoke,
                complete: call.complete,
                queue: call.queue,
                id: call.id,
                lease_id: call.lease_id,
                outcome: o,
                lease_until,
            }),
        };
        self.history.push(op);
    }

    pub(super) fn rec_cancel<T>(
        &mut self,
        queue: &QueueName,
        id: &MessageId,
        at: Span,
        r: &BrokerResult<T>,
    ) {
        self.answered(at, outcome(r));
        self.history.push(Op::Cancel(MessageCall {
            invoke: at.invoke,
            complete: at.complete,
            queue: queue.as_str().into(),
            id: id.as_str().into(),
            outcome: outcome(r),
        }));
    }

    pub(super) fn rec_reschedule<T>(
        &mut self,
        queue: &QueueName,
        id: &MessageId,
        deliver_at: u64,
        at: Span,
        r: &BrokerResult<T>,
    ) {
        self.answered(at, outcome(r));
        self.history.push(Op::Reschedule(Reschedule {
            invoke: at.invoke,
            complete: at.complete,
            queue: queue.as_str().into(),
            id: id.as_str().into(),
            outcome: outcome(r),
            deliver_at: Some(deliver_at),
        }));
    }

    /// A redrive (`delete: false`) or delete of a whole queue.
    pub(super) fn rec_queue_call<T>(
        &mut self,
        queue: &QueueName,
        delete: bool,
        at: Span,
        r: &BrokerResult<T>,
    ) {
        self.answered(at, outcome(r));
        let call = QueueCall {
            invoke: at.invoke,
            complete: at.complete,
            queue: queue.as_str().into(),
            outcome: outcome(r),
        };
        self.history.push(match delete {
            true => Op::DeleteQueue(call),
            false => Op::Redrive(call),
        });
    }
}

/// Which call on a lease [`Explorer::rec_lease_call`] records.
pub(super) enum LeaseCallKind {
    Ack,
    Bury,
    Nack { defer: bool, delay_ms: Option<u64> },
    Extend { lease_until: Option<u64> },
}
