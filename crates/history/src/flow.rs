//! Flow control (crate docs, "Properties"): concurrency and
//! key_concurrency as leases open at once, rate and key_rate as
//! deliveries in a span, and an ordered key's order and holder.

use std::collections::HashMap;

use crate::index::{Call, Dlv, Index, QueueEvents};
use crate::op::{Flow, Outcome, QueueConfig, Rate};
use crate::report::{CheckConfig, Property, Report};

pub(crate) fn check(ix: &Index, cfg: &CheckConfig, report: &mut Report) {
    let mut names: Vec<&&str> = ix.queues.keys().collect();
    names.sort();
    for name in names {
        let q = &ix.queues[*name];
        if q.configs.iter().all(|c| c.flow.is_none()) {
            continue;
        }
        let configs: Vec<&QueueConfig> = q
            .configs
            .iter()
            .copied()
            .filter(|c| c.outcome != Outcome::Error)
            .collect();
        let queue = Queue {
            ix,
            q,
            name,
            configs,
            cfg,
        };
        queue.concurrency(report);
        queue.rates(report);
        queue.ordered(report);
    }
}

struct Queue<'a, 'h> {
    ix: &'a Index<'h>,
    q: &'a QueueEvents<'h>,
    name: &'a str,
    /// The configs that may have taken effect, by `invoke`.
    configs: Vec<&'h QueueConfig>,
    cfg: &'a CheckConfig,
}

impl<'h> Queue<'_, 'h> {
    /// The config surely in effect through [a, b], with its index: the
    /// last one completed by `a`, none invoked before `b` after it.
    fn config_during(&self, a: u64, b: u64) -> Option<(usize, &'h QueueConfig)> {
        let n = self.configs.partition_point(|c| c.invoke <= a);
        let c = *self.configs.get(n.checked_sub(1)?)?;
        let changed = self.configs.get(n).is_some_and(|next| next.invoke <= b);
        (c.complete <= a && !changed && c.outcome == Outcome::Ok).then_some((n - 1, c))
    }

    fn flow_during(&self, a: u64, b: u64) -> Option<&'h Flow> {
        self.config_during(a, b)?.1.flow.as_ref()
    }

    fn key(&self, d: &Dlv<'h>) -> Option<&'h str> {
        self.ix.instances[d.inst].key
    }

    /// When the lease surely was still open from: its grant's answer; and
    /// the earliest it may have ended: a call on it, its expiry, a crash, a
    /// cancel or delete, the message's next delivery.
    fn open(&self, di: usize) -> (u64, u64) {
        let d = &self.ix.deliveries[di];
        let l = d.lease;
        let inst = &self.ix.instances[d.inst];
        let calls = d.calls.iter().filter(|c| c.ends()).map(|c| c.at().invoke);
        let extended = d
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Extend(e) if e.outcome.took_effect() => e.lease_until,
                _ => None,
            })
            .fold(l.lease_until, u64::max);
        let expiry = extended.saturating_sub(self.cfg.slack_ms);
        let crash = self.ix.first_crash_from(l.invoke);
        let cancels = inst
            .cancels
            .iter()
            .map(|(c, _)| c.invoke)
            .filter(|&t| t >= l.invoke);
        let next = inst
            .deliveries
            .iter()
            .map(|&o| self.ix.deliveries[o].lease)
            .filter(|o| o.lease_id != l.lease_id && o.invoke >= l.invoke)
            .map(|o| o.invoke);
        let delete = (self.q.deletes.any_overlapping(l.invoke, u64::MAX)).then_some(l.invoke);
        let end = calls
            .chain(crash)
            .chain(cancels)
            .chain(next)
            .chain(delete)
            .fold(expiry, u64::min);
        (l.complete, end)
    }

    /// Leases open at once, per queue and per key, at each grant.
    fn concurrency(&self, report: &mut Report) {
        // (time, 0 = end / 1 = start, delivery): ends first at a tie.
        let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(self.q.deliveries.len() * 2);
        for &d in &self.q.deliveries {
            let (start, end) = self.open(d);
            if end > start {
                events.push((start, 1, d));
                events.push((end, 0, d));
            }
        }
        events.sort_unstable();
        let mut open = 0u32;
        let mut by_key: HashMap<&str, u32> = HashMap::new();
        for (t, kind, di) in events {
            let d = &self.ix.deliveries[di];
            let key = self.key(d);
            if kind == 0 {
                open -= 1;
                if let Some(k) = key {
                    *by_key.entry(k).or_default() -= 1;
                }
                continue;
            }
            open += 1;
            let key_open = key.map(|k| {
                let n = by_key.entry(k).or_default();
                *n += 1;
                *n
            });
            let Some(flow) = self.flow_during(d.lease.invoke, d.lease.complete) else {
                continue;
            };
            if let Some(limit) = flow.concurrency.filter(|&c| open > c) {
                report.flag(
                    Property::Concurrency,
                    self.name,
                    format!(
                        "{open} leases open at {t} (concurrency {limit}), the last lease {}",
                        d.lease.lease_id
                    ),
                );
            }
            if let (Some(limit), Some(n), Some(k)) = (flow.key_slots(), key_open, key) {
                if n > limit {
                    report.flag(
                        Property::KeyConcurrency,
                        format!("{}/key {k}", self.name),
                        format!("{n} leases of the key open at {t} (key slots {limit}), the last lease {}", d.lease.lease_id),
                    );
                }
            }
        }
    }

    /// Deliveries per config (a change starts a new bucket), per queue and
    /// per key.
    fn rates(&self, report: &mut Report) {
        let mut queue_sets: HashMap<usize, Spans> = HashMap::new();
        let mut key_sets: HashMap<(usize, &str), Spans> = HashMap::new();
        for &di in &self.q.deliveries {
            let l = self.ix.deliveries[di].lease;
            let Some((n, config)) = self.config_during(l.invoke, l.complete) else {
                continue;
            };
            let Some(flow) = &config.flow else { continue };
            if let Some(rate) = flow.rate {
                queue_sets
                    .entry(n)
                    .or_insert((rate, Vec::new()))
                    .1
                    .push((l.invoke, l.complete));
            }
            if let (Some(rate), Some(k)) = (flow.key_rate, self.key(&self.ix.deliveries[di])) {
                key_sets
                    .entry((n, k))
                    .or_insert((rate, Vec::new()))
                    .1
                    .push((l.invoke, l.complete));
            }
        }
        for (_, (rate, times)) in queue_sets {
            if let Some(detail) = over_rate(rate, times, self.cfg.slack_ms) {
                report.flag(Property::Rate, self.name, detail);
            }
        }
        for ((_, k), (rate, times)) in key_sets {
            if let Some(detail) = over_rate(rate, times, self.cfg.slack_ms) {
                report.flag(Property::KeyRate, format!("{}/key {k}", self.name), detail);
            }
        }
    }
}

/// A rate and the (invoke, complete) times of the deliveries under it.
type Spans = (Rate, Vec<(u64, u64)>);

/// Whether some set of deliveries breaks `burst + floor(d * limit /
/// period_ms)`: sorted by answer time `c`, deliveries `i..=j` surely
/// started within `c_j - m_i + slack`, where `m_i` is the least invoke
/// time among deliveries `i..` (a span at least as long as the true one).
/// The level of a bucket of `burst` tokens that gains `limit` per
/// `period_ms`, scaled by `period_ms` to stay in integers, is
/// `L_j = min(burst*P + (c_j - m_j + slack)*limit - P, L_{j-1} + (c_j - c_{j-1})*limit - P)`;
/// it is negative exactly when `j - i + 1 > burst + (c_j - m_i + slack) * limit / P`
/// for some `i`.
fn over_rate(rate: Rate, mut times: Vec<(u64, u64)>, slack: u64) -> Option<String> {
    times.sort_unstable_by_key(|&(inv, c)| (c, inv));
    let mut suffix_min = vec![0u64; times.len()];
    let mut least = u64::MAX;
    for (n, &(inv, _)) in times.iter().enumerate().rev() {
        least = least.min(inv);
        suffix_min[n] = least;
    }
    let (burst, limit, period) = (
        i128::from(rate.burst()),
        i128::from(rate.limit),
        i128::from(rate.period_ms.max(1)),
    );
    let mut level: i128 = 0;
    let mut from = 0usize;
    let mut last_c = 0u64;
    for (j, &(_, c)) in times.iter().enumerate() {
        let fresh = burst * period + i128::from(c - suffix_min[j] + slack) * limit - period;
        let carried = level + i128::from(c - last_c) * limit - period;
        if j == 0 || fresh <= carried {
            level = fresh;
            from = j;
        } else {
            level = carried;
        }
        last_c = c;
        if level < 0 {
            let span = c - suffix_min[from];
            return Some(format!(
                "{} deliveries within {span} ms ({}..{}), at most {} allowed (limit {} per {} ms, burst {})",
                j - from + 1,
                suffix_min[from],
                c,
                rate.burst() + (u64::try_from(i128::from(span + slack) * limit / period).unwrap_or(u64::MAX)),
                rate.limit,
                rate.period_ms,
                rate.burst()
            ));
        }
    }
    None
}

mod ordered;
