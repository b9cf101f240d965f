//! Recurring schedules (crate docs, "Properties"): each fire time enqueued
//! at most once, and, for an `every_ms` schedule the client declared
//! fully observed, none missed outside the catch-up rules.

use std::collections::{BTreeMap, HashMap};

use crate::index::Index;
use crate::op::{Every, Fire, FiresObserved, Op, Outcome, ScheduleAction, ScheduleChange};
use crate::report::{CheckConfig, Property, Report};

/// Fire times enumerated per schedule at most (a history claiming more
/// is checked up to there).
const MAX_FIRE_TIMES: u64 = 10_000_000;

type Name<'h> = (&'h str, &'h str);

#[derive(Default)]
struct Schedule<'h> {
    changes: Vec<&'h ScheduleChange>,
    /// fire time -> the seqs of its messages.
    fires: BTreeMap<u64, Vec<u64>>,
    observed: Option<&'h FiresObserved>,
}

pub(crate) fn check(ops: &[Op], ix: &Index, cfg: &CheckConfig, report: &mut Report) {
    let mut all: HashMap<Name, Schedule> = HashMap::new();
    for op in ops {
        match op {
            Op::Schedule(c) => all
                .entry((&c.queue, &c.schedule))
                .or_default()
                .changes
                .push(c),
            Op::Fire(f) => fire(&mut all, f),
            Op::FiresObserved(o) => {
                let s = all.entry((&o.queue, &o.schedule)).or_default();
                if s.observed.is_none_or(|prev| prev.through < o.through) {
                    s.observed = Some(o);
                }
            }
            _ => {}
        }
    }
    let mut names: Vec<_> = all.keys().copied().collect();
    names.sort_unstable();
    let down = downtime(ix);
    for name in names {
        let s = all.get_mut(&name).expect("a name of the map");
        s.changes.sort_by_key(|c| (c.invoke, c.complete));
        let subject = format!("{}/schedule {}", name.0, name.1);
        for (t, seqs) in &s.fires {
            if seqs.len() > 1 {
                report.flag(
                    Property::FireTwice,
                    &subject,
                    format!("fire time {t} enqueued as seqs {seqs:?}"),
                );
            }
        }
        if let Some(observed) = s.observed {
            // What is observed at `invoke` may not have fired yet within
            // the grace before it.
            let grace = cfg.fire_grace_ms + cfg.slack_ms;
            let through = observed.through.min(observed.invoke.saturating_sub(grace));
            missed(s, through, &down, cfg, &subject, report);
        }
    }
}

fn fire<'h>(all: &mut HashMap<Name<'h>, Schedule<'h>>, f: &'h Fire) {
    let seqs = all
        .entry((&f.queue, &f.schedule))
        .or_default()
        .fires
        .entry(f.fire_at)
        .or_default();
    if !seqs.contains(&f.seq) {
        seqs.push(f.seq);
    }
}

/// When the store was down: from each crash to the next restart's
/// answer (to the end of the history without one); a crash that may not
/// have happened (an in-process reopen) for its own span.
fn downtime(ix: &Index) -> Vec<(u64, u64)> {
    ix.crashes
        .iter()
        .map(|c| {
            if c.maybe {
                return (c.invoke, c.complete);
            }
            let n = ix.restarts.partition_point(|r| r.invoke < c.invoke);
            (
                c.invoke,
                ix.restarts.get(n).map_or(u64::MAX, |r| r.complete),
            )
        })
        .collect()
}

/// Every fire time of each active stretch (from a `put` or `resume` to the
/// next change) up to `through` must have its message, unless downtime or
/// the next change excuses it (crate docs, "fire_missed").
fn missed(
    s: &Schedule,
    through: u64,
    down: &[(u64, u64)],
    cfg: &CheckConfig,
    subject: &str,
    report: &mut Report,
) {
    let grace = cfg.fire_grace_ms + cfg.slack_ms;
    let mut def: Option<Every> = None;
    for (n, c) in s.changes.iter().enumerate() {
        if c.outcome != Outcome::Ok {
            def = None; // a change that may or may not have happened
            continue;
        }
        match c.action {
            ScheduleAction::Put => def = c.every,
            ScheduleAction::Resume => def = def.map(|d| Every { paused: false, ..d }),
            ScheduleAction::Pause => def = def.map(|d| Every { paused: true, ..d }),
            ScheduleAction::Delete => def = None,
        }
        let Some(every) = def.filter(|d| !d.paused && d.every_ms > 0) else {
            continue;
        };
        let next_change = s.changes.get(n + 1).map_or(u64::MAX, |c| c.invoke);
        let from = every.start_at.max(c.complete + cfg.slack_ms + 1);
        let until = next_change
            .saturating_sub(grace)
            .min(every.end_at.unwrap_or(u64::MAX))
            .min(through.saturating_add(1));
        let first = from.saturating_sub(every.start_at).div_ceil(every.every_ms);
        for k in first..first.saturating_add(MAX_FIRE_TIMES) {
            let t = every.start_at + k * every.every_ms;
            if t >= until {
                break;
            }
            if s.fires.contains_key(&t) || !required(t, &every, down, grace) {
                continue;
            }
            report.flag(
                Property::FireMissed,
                subject,
                format!("fire time {t} (every {} ms from {}) has no message; observed through {through}", every.every_ms, every.start_at),
            );
            if report.violations.len() >= cfg.max_violations {
                return;
            }
        }
    }
}

/// Whether fire time `t` must have fired: the store was up from `t` to
/// `t + grace`; or it was down at `t` and the restart's catch-up must
/// enqueue it (`all`: within the window; `latest`: the newest fire time at
/// the restart), with the store up for `grace` after.
fn required(t: u64, every: &Every, down: &[(u64, u64)], grace: u64) -> bool {
    let hit = down
        .iter()
        .find(|&&(a, b)| a <= t.saturating_add(grace) && b >= t);
    let Some(&(crashed, back)) = hit else {
        return true;
    };
    if back == u64::MAX || crashed > t {
        return false; // never back, or died within the grace: excused
    }
    let decided = back.saturating_add(grace);
    let stays_up = !down.iter().any(|&(a, b)| a <= decided && b > back);
    if !stays_up || decided.saturating_sub(t) >= every.catchup_window_ms {
        return false;
    }
    every.catchup_all || t.saturating_add(every.every_ms) > decided
}
