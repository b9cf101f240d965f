//! Acknowledged enqueues: none lost, no acknowledged end undone (crate
//! docs, "Properties": lost, resurrected).

use crate::index::{Call, Index, Inst};
use crate::op::{Observed, Outcome};
use crate::report::{CheckConfig, Property, Report};

/// The attempts a queue allows when its config is not in the history.
const DEFAULT_MAX_ATTEMPTS: u32 = 10;

pub(crate) fn check(ix: &Index, cfg: &CheckConfig, report: &mut Report) {
    for inst in ix.instances.iter().filter(|i| i.enqueue.is_some()) {
        report.acknowledged += 1;
        resurrected(ix, inst, report);
        absent(ix, inst, report);
        if let Some(stop) = ix.stop {
            at_stop(ix, inst, stop.at, stop.drained, cfg, report);
        }
    }
}

fn subject(inst: &Inst) -> String {
    format!("{}/{} (seq {})", inst.queue, inst.id, inst.seq)
}

/// When the message surely ended (an accepted ack, a cancel surely of it).
fn surely_ended(ix: &Index, inst: &Inst) -> Option<(u64, &'static str)> {
    let acked = inst
        .deliveries
        .iter()
        .flat_map(|&d| ix.deliveries[d].calls.iter())
        .filter_map(|c| match c {
            Call::Ack(a) if a.outcome.took_effect() => Some((a.complete, "acked")),
            _ => None,
        });
    let cancelled = inst
        .cancels
        .iter()
        .filter(|(c, sure)| *sure && c.outcome.took_effect())
        .map(|(c, _)| (c.complete, "cancelled"));
    acked.chain(cancelled).min()
}

/// The earliest moment a call may have ended it (ack, cancel, delete of
/// its queue, whatever their answer).
fn may_have_ended(ix: &Index, inst: &Inst) -> Option<u64> {
    let acks = inst
        .deliveries
        .iter()
        .flat_map(|&d| ix.deliveries[d].calls.iter())
        .filter(|c| matches!(c, Call::Ack(_)) && c.outcome().may_have())
        .map(|c| c.at().invoke);
    let cancels = inst
        .cancels
        .iter()
        .filter(|(c, _)| c.outcome.may_have())
        .map(|(c, _)| c.invoke);
    let deletes = ix
        .queue(inst.queue)
        .filter(|q| q.deletes.any_overlapping(inst.start, u64::MAX))
        .map(|_| inst.start);
    acks.chain(cancels).chain(deletes).min()
}

/// A read finds the message (same seq, or the only one the id can name)
/// after its ack or cancel was acknowledged, with no enqueue of the id in
/// between that could have made it anew.
fn resurrected(ix: &Index, inst: &Inst, report: &mut Report) {
    let Some((ended, how)) = surely_ended(ix, inst) else {
        return;
    };
    for (o, sure) in &inst.observes {
        let seen = o.state != Observed::Absent && *sure && o.invoke > ended;
        let remade = o.seq.is_none() && inst.touches.iter().any(|t| t.invoke < o.complete);
        if seen && !remade {
            report.flag(
                Property::Resurrected,
                subject(inst),
                format!(
                    "{how} at {ended}, read as {:?} at {}..{}",
                    o.state, o.invoke, o.complete
                ),
            );
        }
    }
}

/// A read answers 404 for an acknowledged message nothing may have ended.
fn absent(ix: &Index, inst: &Inst, report: &mut Report) {
    let Some(enqueued) = inst.enqueue.map(|e| e.complete) else {
        return;
    };
    let ended = may_have_ended(ix, inst).unwrap_or(u64::MAX);
    for (o, sure) in &inst.observes {
        if o.state == Observed::Absent && *sure && o.invoke > enqueued && o.complete < ended {
            report.flag(
                Property::Lost,
                subject(inst),
                format!(
                    "enqueued (acknowledged) by {enqueued}, read as absent at {}..{}",
                    o.invoke, o.complete
                ),
            );
        }
    }
}

/// At the stop: ended (or maybe ended), dead (or maybe dead), or, in a
/// drained run, not due yet; in a run stopped early, read live after it
/// was enqueued.
fn at_stop(
    ix: &Index,
    inst: &Inst,
    stop: u64,
    drained: bool,
    cfg: &CheckConfig,
    report: &mut Report,
) {
    if may_have_ended(ix, inst).is_some_and(|t| t <= stop) || maybe_dead(ix, inst) {
        return;
    }
    let enqueued = inst.enqueue.map_or(inst.start, |e| e.complete);
    let seen_live = inst
        .observes
        .iter()
        .any(|(o, sure)| *sure && o.state != Observed::Absent && o.invoke >= enqueued);
    if drained {
        if let Some(due) = due_at_stop(ix, inst) {
            if due + cfg.slack_ms <= stop {
                report.flag(
                    Property::Lost,
                    subject(inst),
                    format!(
                        "acknowledged by {enqueued}, due at {due}, not consumed when the drained run stopped at {stop} ({} deliveries)",
                        inst.deliveries.len()
                    ),
                );
            }
        }
        return;
    }
    if seen_live {
        report.pending_at_stop += 1;
        return;
    }
    report.flag(
        Property::Lost,
        subject(inst),
        format!("acknowledged by {enqueued}; at the stop ({stop}) neither ended nor read live"),
    );
}

/// Whether it may be dead: read dead, buried, or failed at an attempt the
/// queue's smallest `max_attempts` allows no more of.
fn maybe_dead(ix: &Index, inst: &Inst) -> bool {
    if inst.observes.iter().any(|(o, _)| o.state == Observed::Dead) {
        return true;
    }
    let max = ix
        .queue(inst.queue)
        .and_then(|q| q.configs.iter().filter_map(|c| c.max_attempts).min())
        .unwrap_or(DEFAULT_MAX_ATTEMPTS);
    inst.deliveries.iter().any(|&d| {
        let dlv = &ix.deliveries[d];
        dlv.lease.attempt >= max
            || dlv
                .calls
                .iter()
                .any(|c| matches!(c, Call::Bury(b) if b.outcome != Outcome::Error))
    })
}

/// When the message was due again as the history last says: its
/// `deliver_at` if never delivered, else its last lease's end (a nack's
/// delay counted); `None` when something moved it that the history cannot
/// time (a reschedule).
fn due_at_stop(ix: &Index, inst: &Inst) -> Option<u64> {
    if !inst.reschedules.is_empty() {
        return None;
    }
    let Some(&last) = inst.deliveries.last() else {
        return inst.enqueue.and_then(|e| e.deliver_at);
    };
    let dlv = &ix.deliveries[last];
    let nack = dlv.calls.iter().find_map(|c| match c {
        Call::Nack(n) if n.outcome.took_effect() => Some(n),
        _ => None,
    });
    match nack {
        Some(n) => Some(n.invoke + n.delay_ms.unwrap_or(0)),
        None => Some(
            dlv.calls
                .iter()
                .filter_map(|c| match c {
                    Call::Extend(e) if e.outcome.took_effect() => e.lease_until,
                    _ => None,
                })
                .fold(dlv.lease.lease_until, u64::max),
        ),
    }
}
