//! An ordered key (crate docs, "Properties", order): a message delivered
//! once holds its key until it is acked, cancelled or dead, and a key's
//! first deliveries follow (priority, deliver_at, seq) among the due
//! messages.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use super::Queue;
use crate::index::{Call, Inst};
use crate::op::Outcome;
use crate::report::{Property, Report};

/// api.md's defaults, used when no config of the queue states a smaller one.
const DEFAULT_MAX_ATTEMPTS: u32 = 10;
const DEFAULT_MAX_DEFERRALS: u32 = 100;

/// Priority when the enqueue did not give one.
const DEFAULT_PRIORITY: u32 = 1024;

impl Queue<'_, '_> {
    pub(super) fn ordered(&self, report: &mut Report) {
        if !self
            .configs
            .iter()
            .any(|c| c.flow.as_ref().is_some_and(|f| f.ordered))
        {
            return;
        }
        let mut keys: HashMap<&str, Vec<usize>> = HashMap::new();
        for (n, inst) in self.ix.instances.iter().enumerate() {
            if let (true, Some(k)) = (inst.queue == self.name, inst.key) {
                keys.entry(k).or_default().push(n);
            }
        }
        let mut names: Vec<_> = keys.keys().copied().collect();
        names.sort_unstable();
        for k in names {
            self.holders(k, &keys[k], report);
            self.first_in_order(k, &keys[k], report);
        }
    }

    fn ordered_during(&self, a: u64, b: u64) -> bool {
        self.flow_during(a, b).is_some_and(|f| f.ordered)
    }

    /// The smallest of a limit over the queue's configs (a message may be
    /// dead at the smallest).
    fn least(&self, limit: impl Fn(&crate::op::Flow) -> Option<u32>, max_attempts: bool) -> u32 {
        self.configs
            .iter()
            .filter_map(|c| match max_attempts {
                true => c.max_attempts,
                false => c.flow.as_ref().and_then(&limit),
            })
            .min()
            .unwrap_or(if max_attempts {
                DEFAULT_MAX_ATTEMPTS
            } else {
                DEFAULT_MAX_DEFERRALS
            })
    }

    /// From its first delivery's answer until the earliest moment it may
    /// have stopped holding the key (done, dead, reset, or a crash that
    /// may have undone its only delivery).
    fn holds(&self, inst: &Inst) -> Option<(u64, u64)> {
        let ds: Vec<_> = inst
            .deliveries
            .iter()
            .map(|&d| &self.ix.deliveries[d])
            .collect();
        let first = ds.first()?.lease;
        let max_attempts = self.least(|_| None, true);
        let max_deferrals = self.least(|f| f.max_deferrals, false);
        let mut release = u64::MAX;
        let mut deferrals = 0;
        for d in &ds {
            if d.lease.attempt >= max_attempts {
                release = release.min(d.lease.invoke);
            }
            for c in &d.calls {
                let t = c.at().invoke;
                match c {
                    Call::Ack(_) | Call::Bury(_) => release = release.min(t),
                    Call::Nack(n) if n.defer && n.outcome.may_have() => {
                        deferrals += 1;
                        if deferrals >= max_deferrals {
                            release = release.min(t);
                        }
                    }
                    Call::Nack(n) if n.outcome.may_have() => deferrals = 0,
                    _ => {}
                }
            }
        }
        for (c, _) in &inst.cancels {
            release = release.min(c.invoke);
        }
        for t in &inst.touches {
            release = release.min(t.invoke);
        }
        // Until its failure is surely durable (a nack answered, or the
        // message handed out again), a crash may bring it back unleased
        // with its attempt uncounted: no longer a holder.
        let durable = ds
            .iter()
            .flat_map(|d| d.calls.iter())
            .filter(|c| matches!(c, Call::Nack(_)) && c.outcome().took_effect())
            .map(|c| c.at().complete)
            .chain(ds.get(1).map(|d| d.lease.complete))
            .min()
            .unwrap_or(u64::MAX);
        if let Some(crash) = self
            .ix
            .first_crash_from(first.invoke)
            .filter(|&c| c < durable)
        {
            release = release.min(crash);
        }
        if self.q.redrives.any_overlapping(first.invoke, u64::MAX)
            || self.q.deletes.any_overlapping(first.invoke, u64::MAX)
        {
            let from = self
                .q
                .redrives
                .first_from(first.invoke)
                .into_iter()
                .chain(self.q.deletes.first_from(first.invoke));
            release = from.fold(release, u64::min);
        }
        (release > first.complete).then_some((first.complete, release))
    }

    /// No message of the key is delivered while another holds it.
    fn holders(&self, key: &str, members: &[usize], report: &mut Report) {
        let mut holds: Vec<(u64, u64, usize)> = members
            .iter()
            .filter_map(|&i| self.holds(&self.ix.instances[i]).map(|(a, b)| (a, b, i)))
            .collect();
        holds.sort_unstable();
        let mut deliveries: Vec<(u64, u64, usize, usize)> = members
            .iter()
            .flat_map(|&i| self.ix.instances[i].deliveries.iter().map(move |&d| (i, d)))
            .map(|(i, d)| {
                let l = self.ix.deliveries[d].lease;
                (l.invoke, l.complete, i, d)
            })
            .collect();
        deliveries.sort_unstable();
        let mut active: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::new();
        let mut next = 0;
        for (invoke, complete, i, d) in deliveries {
            while next < holds.len() && holds[next].0 < invoke {
                let (a, b, h) = holds[next];
                active.push(Reverse((b, a, h)));
                next += 1;
            }
            while active
                .peek()
                .is_some_and(|Reverse((end, _, _))| *end <= invoke)
            {
                active.pop();
            }
            let holder = active.iter().map(|Reverse(x)| *x).find(|&(end, start, h)| {
                h != i && end > complete && self.ordered_during(start, complete)
            });
            if let Some((_, start, h)) = holder {
                let (held, got) = (&self.ix.instances[h], &self.ix.instances[i]);
                report.flag(
                    Property::Order,
                    format!("{}/key {key}", self.name),
                    format!(
                        "{} (seq {}) delivered by lease {} at {invoke}..{complete} while {} (seq {}), delivered at {start}, held the key",
                        got.id, got.seq, self.ix.deliveries[d].lease.lease_id, held.id, held.seq
                    ),
                );
            }
        }
    }

    /// A message's (priority, deliver_at, seq) as enqueued, when nothing
    /// changed it before `until`.
    fn order_of(&self, inst: &Inst, until: u64) -> Option<(u32, u64, u64)> {
        let e = inst.enqueue?;
        let moved = inst.reschedules.iter().any(|r| r.invoke < until)
            || inst.touches.iter().any(|t| t.invoke < until);
        (!moved).then_some((
            e.priority.unwrap_or(DEFAULT_PRIORITY),
            e.deliver_at?,
            inst.seq,
        ))
    }

    /// A key's first deliveries: none while a message before it in
    /// (priority, deliver_at, seq) was enqueued, due and not yet handed out.
    fn first_in_order(&self, key: &str, members: &[usize], report: &mut Report) {
        // (time, kind, instance): 0 = leaves the waiting set, 1 = joins, 2 = check.
        let mut events: Vec<(u64, u8, usize)> = Vec::new();
        for &i in members {
            let inst = &self.ix.instances[i];
            let first = inst
                .deliveries
                .first()
                .map(|&d| self.ix.deliveries[d].lease);
            if let (Some(e), Some(_)) = (inst.enqueue, self.order_of(inst, u64::MAX)) {
                let leaves = [first.map(|l| l.invoke)]
                    .into_iter()
                    .flatten()
                    .chain(inst.cancels.iter().map(|(c, _)| c.invoke))
                    .chain(self.q.deletes.first_from(e.invoke))
                    .min()
                    .unwrap_or(u64::MAX);
                // Handed out (or gone) before its enqueue's answer: never
                // seen waiting.
                if leaves > e.complete {
                    events.push((e.complete, 1, i));
                    events.push((leaves, 0, i));
                }
            }
            if let Some(l) = first {
                events.push((l.complete, 2, i));
            }
        }
        events.sort_unstable();
        let mut waiting: BTreeSet<((u32, u64, u64), usize)> = BTreeSet::new();
        for (_, kind, i) in events {
            let inst = &self.ix.instances[i];
            let order = self.order_of(inst, u64::MAX);
            match (kind, order) {
                (0, Some(o)) => {
                    waiting.remove(&(o, i));
                }
                (1, Some(o)) => {
                    waiting.insert((o, i));
                }
                (2, _) => self.check_first(key, i, &waiting, report),
                _ => {}
            }
        }
    }

    fn check_first(
        &self,
        key: &str,
        i: usize,
        waiting: &BTreeSet<((u32, u64, u64), usize)>,
        report: &mut Report,
    ) {
        let inst = &self.ix.instances[i];
        let l = self.ix.deliveries[inst.deliveries[0]].lease;
        let Some(mine) = self.order_of(inst, l.complete) else {
            return;
        };
        let slack = self.cfg.slack_ms;
        let before = waiting.range(..(mine, i)).find(|&&((_, due, _), j)| {
            let other = &self.ix.instances[j];
            let enqueued = other.enqueue.map_or(u64::MAX, |e| e.complete);
            let start = other.enqueue.map_or(u64::MAX, |e| e.invoke);
            j != i
                && enqueued < l.invoke
                && due + slack <= l.invoke
                && other.enqueue.is_some_and(|e| e.outcome == Outcome::Ok)
                && self.ordered_during(start, l.complete)
        });
        if let Some(&((p, due, seq), j)) = before {
            let other = &self.ix.instances[j];
            report.flag(
                Property::Order,
                format!("{}/key {key}", self.name),
                format!(
                    "{} (priority {}, deliver_at {}, seq {}) delivered first by lease {} at {}..{}, while {} (priority {p}, deliver_at {due}, seq {seq}) was due and waiting",
                    inst.id, mine.0, mine.1, mine.2, l.lease_id, l.invoke, l.complete, other.id
                ),
            );
        }
    }
}
