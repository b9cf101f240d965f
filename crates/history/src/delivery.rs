//! Each message's deliveries in order: early, duplicate, ack after
//! expiry, attempts and deferrals (crate docs, "Properties").

use crate::index::{Call, Dlv, Index, Inst};
use crate::op::{Outcome, Retry};
use crate::report::{CheckConfig, Property, Report};

pub(crate) fn check(ix: &Index, cfg: &CheckConfig, report: &mut Report) {
    for inst in &ix.instances {
        report.deliveries += inst.deliveries.len();
        report.redeliveries += inst.deliveries.len().saturating_sub(1);
        let mut prev: Option<&Dlv> = None;
        let mut deferrals = 0u32;
        for &d in &inst.deliveries {
            let next = &ix.deliveries[d];
            early_by_server(inst, next, report);
            match prev {
                None => first(ix, inst, next, cfg, report),
                Some(p) => {
                    let pair = Pair {
                        ix,
                        inst,
                        prev: p,
                        next,
                        cfg,
                    };
                    pair.duplicate(report);
                    pair.attempts(report);
                    pair.early_after_retry(deferrals, report);
                }
            }
            deferrals = match accepted_end(next) {
                Some(Call::Nack(n)) if n.defer => deferrals + 1,
                _ => 0,
            };
            lease_calls(ix, inst, d, cfg, report);
            prev = Some(next);
        }
    }
}

fn subject(inst: &Inst) -> String {
    format!("{}/{} (seq {})", inst.queue, inst.id, inst.seq)
}

/// The delivery's own times: the server handed it out by `complete`, so a
/// `deliver_at` it states later than that (or than its own grant time)
/// was not due yet.
fn early_by_server(inst: &Inst, d: &Dlv, report: &mut Report) {
    let l = d.lease;
    if let Some(granted) = l.granted_at.filter(|&g| g < l.deliver_at) {
        report.flag(
            Property::Early,
            subject(inst),
            format!("granted at {granted}, deliver_at {}", l.deliver_at),
        );
    }
}

/// The first delivery: attempt 1 (more only if lease answers were lost),
/// not before the enqueue's `deliver_at` unless something moved it.
fn first(ix: &Index, inst: &Inst, d: &Dlv, cfg: &CheckConfig, report: &mut Report) {
    let l = d.lease;
    let lost_answers = ix
        .queue(inst.queue)
        .map_or(0, |q| q.lease_failed.overlapping(inst.start, l.complete));
    let reset = touched(ix, inst, inst.start, l.complete);
    let crashed = ix.crash_within(inst.start, l.complete, false);
    let hi = 1 + lost_answers as u32 + u32::from(crashed);
    if l.attempt < 1 || (l.attempt > hi && !reset) {
        report.flag(
            Property::Attempts,
            subject(inst),
            format!(
                "first delivery seen (lease {} at {}) has attempt {}, expected 1..={hi}",
                l.lease_id, l.complete, l.attempt
            ),
        );
    }
    let Some(due) = inst.enqueue.and_then(|e| e.deliver_at) else {
        return;
    };
    let moved =
        !inst.reschedules.is_empty() && inst.reschedules.iter().any(|r| r.invoke <= l.complete);
    if !moved && !reset && due > l.complete + cfg.slack_ms {
        report.flag(
            Property::Early,
            subject(inst),
            format!(
                "delivered by {} (lease {}), enqueued with deliver_at {due}",
                l.complete, l.lease_id
            ),
        );
    }
}

/// Something other than a lease may have reset or moved the message in
/// (a, b): an enqueue of its id that did not create it (replace, lost
/// answer), a redrive of its queue.
fn touched(ix: &Index, inst: &Inst, a: u64, b: u64) -> bool {
    inst.touches
        .iter()
        .any(|t| t.invoke <= b && t.complete >= a)
        || ix
            .queue(inst.queue)
            .is_some_and(|q| q.redrives.any_overlapping(a, b))
}

/// The first call that surely ended the lease (ack, nack, bury).
fn accepted_end<'h>(d: &Dlv<'h>) -> Option<Call<'h>> {
    d.calls
        .iter()
        .find(|c| c.ends() && c.outcome().took_effect())
        .copied()
}

/// The earliest the lease can have expired: its `lease_until`, moved by
/// every extend that surely took effect.
fn expiry(d: &Dlv, before: u64) -> u64 {
    d.calls
        .iter()
        .filter_map(|c| match c {
            Call::Extend(e) if e.outcome.took_effect() && e.invoke < before => e.lease_until,
            _ => None,
        })
        .fold(d.lease.lease_until, u64::max)
}

struct Pair<'a, 'h> {
    ix: &'a Index<'h>,
    inst: &'a Inst<'h>,
    prev: &'a Dlv<'h>,
    next: &'a Dlv<'h>,
    cfg: &'a CheckConfig,
}

impl Pair<'_, '_> {
    /// The open window from the previous grant to this one.
    fn window(&self) -> (u64, u64) {
        (self.prev.lease.invoke, self.next.lease.complete)
    }

    fn crashed(&self) -> bool {
        let (a, b) = self.window();
        self.ix.crash_within(a, b, false)
    }

    fn describe(&self) -> String {
        let (p, n) = (self.prev.lease, self.next.lease);
        format!(
            "lease {} (attempt {}, {}..{}, lease_until {}) then lease {} (attempt {}, {}..{})",
            p.lease_id,
            p.attempt,
            p.invoke,
            p.complete,
            p.lease_until,
            n.lease_id,
            n.attempt,
            n.invoke,
            n.complete
        )
    }

    /// A redelivery needs a reason: the previous lease was nacked or
    /// buried (maybe), expired, or a crash may have ended it. Never after
    /// an accepted ack, never after a bury without a redrive.
    fn duplicate(&self, report: &mut Report) {
        let n = self.next.lease;
        if let Some(ack) = self.prev.calls.iter().find_map(|c| match c {
            Call::Ack(a) if a.outcome.took_effect() && a.complete < n.invoke => Some(a),
            _ => None,
        }) {
            report.flag(
                Property::Duplicate,
                subject(self.inst),
                format!(
                    "delivered again after an accepted ack at {}: {}",
                    ack.complete,
                    self.describe()
                ),
            );
            return;
        }
        let (a, b) = self.window();
        if let Some(Call::Bury(bury)) = accepted_end(self.prev) {
            if bury.complete < n.invoke && !touched(self.ix, self.inst, a, b) && !self.crashed() {
                report.flag(
                    Property::Duplicate,
                    subject(self.inst),
                    format!(
                        "delivered while dead (buried at {}, no redrive): {}",
                        bury.complete,
                        self.describe()
                    ),
                );
            }
            return;
        }
        let failed = self.prev.calls.iter().any(|c| {
            matches!(c, Call::Nack(_) | Call::Bury(_))
                && c.outcome().may_have()
                && c.at().invoke <= n.complete
        });
        let expired = expiry(self.prev, n.complete) <= n.complete + self.cfg.slack_ms;
        if !(failed || expired || self.crashed()) {
            report.flag(
                Property::Duplicate,
                subject(self.inst),
                format!(
                    "delivered again while its lease was open (no nack, no expiry, no crash): {}",
                    self.describe()
                ),
            );
        }
    }

    /// The attempt counts deliveries: +1 after a failure (nack, expiry), +0
    /// after a deferral; a crash may leave it uncounted (+0 or +1); a lost
    /// lease answer may hide a delivery (+1 more); a redrive or replace
    /// starts again at 1.
    fn attempts(&self, report: &mut Report) {
        let (p, n) = (self.prev.lease, self.next.lease);
        if accepted_end(self.prev).is_some_and(|c| matches!(c, Call::Ack(_))) {
            return; // a duplicate, flagged as such
        }
        let (a, b) = self.window();
        let crashed = self.crashed();
        let (mut lo, mut hi) = match accepted_end(self.prev) {
            Some(Call::Nack(x)) if x.defer => (p.attempt, p.attempt),
            Some(Call::Bury(_)) => (p.attempt, p.attempt),
            Some(_) => (p.attempt + 1, p.attempt + 1),
            None => {
                let maybe_defer = self.prev.calls.iter().any(
                    |c| matches!(c, Call::Nack(x) if x.defer && x.outcome == Outcome::Unknown),
                );
                (p.attempt + u32::from(!maybe_defer), p.attempt + 1)
            }
        };
        if crashed {
            lo = lo.min(p.attempt);
            hi = hi.max(p.attempt + 1);
        }
        hi += self
            .ix
            .queue(self.inst.queue)
            .map_or(0, |q| q.lease_failed.overlapping(a, b)) as u32;
        let reset = touched(self.ix, self.inst, a, b);
        let fits = (lo..=hi).contains(&n.attempt) || (reset && (1..=hi).contains(&n.attempt));
        if fits {
            return;
        }
        let deferred = matches!(accepted_end(self.prev), Some(Call::Nack(x)) if x.defer);
        let property = if deferred {
            Property::Deferral
        } else {
            Property::Attempts
        };
        report.flag(
            property,
            subject(self.inst),
            format!(
                "attempt {} expected {lo}..={hi}: {}",
                n.attempt,
                self.describe()
            ),
        );
    }

    /// After a nack with `delay_ms` (or the queue's backoff, when the
    /// history states the retry policy), not before the failure plus the
    /// delay.
    fn early_after_retry(&self, deferrals: u32, report: &mut Report) {
        let n = self.next.lease;
        let (a, b) = self.window();
        if self.crashed() || touched(self.ix, self.inst, a, b) {
            return;
        }
        if self
            .inst
            .reschedules
            .iter()
            .any(|r| r.invoke <= b && r.complete >= a)
        {
            return;
        }
        let retry = self.retry();
        let due = match accepted_end(self.prev) {
            Some(Call::Nack(x)) => {
                let delay = match (x.delay_ms, retry) {
                    (Some(d), _) => d,
                    (None, Some(r)) if x.defer => backoff(&r, deferrals),
                    (None, Some(r)) => backoff(&r, self.prev.lease.attempt),
                    (None, None) => 0,
                };
                x.invoke + delay
            }
            None if !self
                .prev
                .calls
                .iter()
                .any(|c| c.ends() && c.outcome().may_have()) =>
            {
                // Before `lease_until` it is a duplicate (flagged as
                // such); after it, the backoff, when the history states it.
                let (Some(r), expired) = (retry, expiry(self.prev, b)) else {
                    return;
                };
                if expired > n.complete + self.cfg.slack_ms {
                    return;
                }
                expired + backoff(&r, self.prev.lease.attempt)
            }
            _ => return,
        };
        if due > n.complete + self.cfg.slack_ms {
            report.flag(
                Property::Early,
                subject(self.inst),
                format!(
                    "retry due at {due} or later, delivered by {}: {}",
                    n.complete,
                    self.describe()
                ),
            );
        }
    }

    /// The smallest backoff any of the queue's configs allows.
    fn retry(&self) -> Option<Retry> {
        let configs = &self.ix.queue(self.inst.queue)?.configs;
        if configs.is_empty() || configs.iter().any(|c| c.retry.is_none()) {
            return None;
        }
        configs
            .iter()
            .filter_map(|c| c.retry)
            .min_by_key(|r| (r.initial_ms, r.max_ms))
    }
}

/// `min(max_ms, initial_ms * multiplier^(n-1))`, rounded down and less
/// 1 ms for the float's rounding (the jitter only adds).
fn backoff(r: &Retry, n: u32) -> u64 {
    let exp = n.saturating_sub(1).min(64) as i32;
    let raw = r.initial_ms as f64 * r.multiplier.powi(exp);
    let capped = raw.min(r.max_ms as f64);
    // The floor of a non-negative float below u64::MAX.
    (capped.max(0.0).floor() as u64).saturating_sub(1)
}

/// The calls on one lease: none accepted once the lease surely ended (its
/// expiry, a later delivery of the message, a crash).
fn lease_calls(ix: &Index, inst: &Inst, d: usize, cfg: &CheckConfig, report: &mut Report) {
    let dlv = &ix.deliveries[d];
    let l = dlv.lease;
    let later = inst
        .deliveries
        .iter()
        .map(|&o| ix.deliveries[o].lease)
        .find(|o| o.invoke > l.complete && o.lease_id != l.lease_id);
    for call in dlv.calls.iter().filter(|c| c.outcome().took_effect()) {
        let at = call.at();
        let until = expiry(dlv, at.complete);
        let why = if at.invoke > until + cfg.slack_ms {
            Some(format!("lease_until {until}"))
        } else if let Some(o) = later.filter(|o| o.complete < at.invoke) {
            Some(format!(
                "the message was delivered again (lease {}) by {}",
                o.lease_id, o.complete
            ))
        } else {
            ix.crashes
                .iter()
                .find(|c| !c.maybe && c.invoke > l.complete && c.complete < at.invoke)
                .map(|c| format!("a crash at {}..{} ended it", c.invoke, c.complete))
        };
        if let Some(why) = why {
            report.flag(
                Property::AckAfterExpiry,
                subject(inst),
                format!(
                    "{} of lease {} accepted at {}..{}, but {why}",
                    call.name(),
                    l.lease_id,
                    at.invoke,
                    at.complete
                ),
            );
        }
    }
}
