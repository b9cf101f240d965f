//! The history indexed for the checks: each message instance (one seq)
//! with its enqueue, its deliveries in order and the calls on each
//! delivery's lease; per queue, the events that may explain what a
//! message went through (crashes, lost lease answers, redrives, config
//! changes), sorted by time so a check asks about a window in O(log n).

use std::collections::HashMap;

use crate::op::{
    Crash, Enqueue, Extend, Lease, LeaseCall, MessageCall, Nack, Observe, Observed, Op, Outcome,
    QueueConfig, Reschedule, Span, Stop,
};
use crate::report::{Property, Report};

/// One message: an id's life from its enqueue (one seq) to its end.
pub(crate) struct Inst<'h> {
    pub queue: &'h str,
    pub id: &'h str,
    pub seq: u64,
    /// Its acknowledged enqueue (`created`), when the client made it.
    pub enqueue: Option<&'h Enqueue>,
    pub key: Option<&'h str>,
    /// Indexes into `Index::deliveries`, by grant time.
    pub deliveries: Vec<usize>,
    /// Cancels that may have hit it, with whether it was surely this one
    /// (the id had no other instance the call could have met).
    pub cancels: Vec<(&'h MessageCall, bool)>,
    pub reschedules: Vec<&'h Reschedule>,
    /// Enqueues of its id that found it live (200 `created: false`, a
    /// replace) or whose answer was lost: they may have changed it.
    pub touches: Vec<Span>,
    /// Reads that may have met it, with whether surely it.
    pub observes: Vec<(&'h Observe, bool)>,
    /// The earliest moment it may have existed.
    pub start: u64,
}

/// One message handed out, and the calls made on its lease.
pub(crate) struct Dlv<'h> {
    pub lease: &'h Lease,
    pub inst: usize,
    pub calls: Vec<Call<'h>>,
}

#[derive(Clone, Copy)]
pub(crate) enum Call<'h> {
    Ack(&'h LeaseCall),
    Bury(&'h LeaseCall),
    Nack(&'h Nack),
    Extend(&'h Extend),
}

impl Call<'_> {
    pub fn at(&self) -> Span {
        match self {
            Call::Ack(c) | Call::Bury(c) => c.at(),
            Call::Nack(c) => c.at(),
            Call::Extend(c) => c.at(),
        }
    }

    pub fn outcome(&self) -> Outcome {
        match self {
            Call::Ack(c) | Call::Bury(c) => c.outcome,
            Call::Nack(c) => c.outcome,
            Call::Extend(c) => c.outcome,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Call::Ack(_) => "ack",
            Call::Bury(_) => "bury",
            Call::Nack(n) if n.defer => "nack (defer)",
            Call::Nack(_) => "nack",
            Call::Extend(_) => "extend",
        }
    }

    /// Whether this call, if it took effect, ended the lease.
    pub fn ends(&self) -> bool {
        !matches!(self, Call::Extend(_))
    }
}

/// Spans sorted by `invoke`, with the longest span, so "which of them
/// overlap (a, b)" is a binary search and a short scan.
#[derive(Default)]
pub(crate) struct Spans {
    spans: Vec<Span>,
    longest: u64,
}

impl Spans {
    fn push(&mut self, s: Span) {
        self.longest = self.longest.max(s.complete.saturating_sub(s.invoke));
        self.spans.push(s);
    }

    fn sort(&mut self) {
        self.spans.sort_unstable_by_key(|s| (s.invoke, s.complete));
    }

    /// How many spans may overlap the window [a, b]: invoked by `b`,
    /// completed from `a` on (a tie within a millisecond may go either
    /// way, and these spans only excuse).
    pub fn overlapping(&self, a: u64, b: u64) -> usize {
        let end = self.spans.partition_point(|s| s.invoke <= b);
        let from = self
            .spans
            .partition_point(|s| s.invoke < a.saturating_sub(self.longest));
        self.spans[from..end.max(from)]
            .iter()
            .filter(|s| s.complete >= a)
            .count()
    }

    /// The least `invoke` of the spans that complete at or after `t`.
    pub fn first_from(&self, t: u64) -> Option<u64> {
        let from = self
            .spans
            .partition_point(|s| s.invoke < t.saturating_sub(self.longest));
        self.spans[from..]
            .iter()
            .find(|s| s.complete >= t)
            .map(|s| s.invoke)
    }

    pub fn any_overlapping(&self, a: u64, b: u64) -> bool {
        self.overlapping(a, b) > 0
    }
}

/// What happened to a queue as a whole.
#[derive(Default)]
pub(crate) struct QueueEvents<'h> {
    /// By `invoke`.
    pub configs: Vec<&'h QueueConfig>,
    pub lease_failed: Spans,
    /// Redrives and deletes that may have taken effect.
    pub redrives: Spans,
    pub deletes: Spans,
    /// Every delivery of the queue.
    pub deliveries: Vec<usize>,
}

pub(crate) struct Index<'h> {
    pub instances: Vec<Inst<'h>>,
    pub deliveries: Vec<Dlv<'h>>,
    pub queues: HashMap<&'h str, QueueEvents<'h>>,
    /// Crashes that end leases, by `invoke`.
    pub crashes: Vec<&'h Crash>,
    pub crash_spans: Spans,
    /// When the server was ready again, by `invoke`.
    pub restarts: Vec<Span>,
    pub stop: Option<&'h Stop>,
}

impl<'h> Index<'h> {
    pub fn build(ops: &'h [Op], report: &mut Report) -> Self {
        let mut b = Builder::default();
        for op in ops {
            b.first_pass(op, report);
        }
        b.link_ids();
        for op in ops {
            b.second_pass(op, report);
        }
        b.finish()
    }

    pub fn queue(&self, name: &str) -> Option<&QueueEvents<'h>> {
        self.queues.get(name)
    }

    /// The earliest moment a crash (ending leases, maybe or not) may have
    /// happened at or after `t`.
    pub fn first_crash_from(&self, t: u64) -> Option<u64> {
        self.crash_spans.first_from(t)
    }

    /// A crash that ends leases may have happened in the window [a, b]
    /// (`certain`: only crashes that surely happened).
    pub fn crash_within(&self, a: u64, b: u64, certain: bool) -> bool {
        if !certain {
            return self.crash_spans.any_overlapping(a, b);
        }
        self.crashes
            .iter()
            .any(|c| !c.maybe && c.invoke >= a && c.complete <= b)
    }
}

#[derive(Default)]
struct Builder<'h> {
    instances: Vec<Inst<'h>>,
    by_seq: HashMap<u64, usize>,
    by_id: HashMap<(&'h str, &'h str), Vec<usize>>,
    deliveries: Vec<Dlv<'h>>,
    by_lease: HashMap<&'h str, usize>,
    queues: HashMap<&'h str, QueueEvents<'h>>,
    crashes: Vec<&'h Crash>,
    crash_spans: Spans,
    restarts: Vec<Span>,
    stop: Option<&'h Stop>,
    /// Enqueues that created nothing certain, for `touches`.
    uncertain_enqueues: Vec<&'h Enqueue>,
    message_calls: Vec<MessageOp<'h>>,
}

#[derive(Clone, Copy)]
enum MessageOp<'h> {
    Cancel(&'h MessageCall),
    Reschedule(&'h Reschedule),
    Observe(&'h Observe),
}

impl<'h> Builder<'h> {
    /// The instance of `seq`, made on first sight; a seq seen with two
    /// ids is a violation.
    fn instance(&mut self, queue: &'h str, id: &'h str, seq: u64, report: &mut Report) -> usize {
        if let Some(&i) = self.by_seq.get(&seq) {
            let inst = &self.instances[i];
            if (inst.queue, inst.id) != (queue, id) {
                report.flag(
                    Property::SeqReused,
                    format!("{queue}/{id}"),
                    format!("seq {seq} also names {}/{}", inst.queue, inst.id),
                );
            }
            return i;
        }
        let i = self.instances.len();
        self.instances.push(Inst {
            queue,
            id,
            seq,
            enqueue: None,
            key: None,
            deliveries: Vec::new(),
            cancels: Vec::new(),
            reschedules: Vec::new(),
            touches: Vec::new(),
            observes: Vec::new(),
            start: u64::MAX,
        });
        self.by_seq.insert(seq, i);
        self.by_id.entry((queue, id)).or_default().push(i);
        i
    }

    fn queue(&mut self, name: &'h str) -> &mut QueueEvents<'h> {
        self.queues.entry(name).or_default()
    }

    fn first_pass(&mut self, op: &'h Op, report: &mut Report) {
        match op {
            Op::Enqueue(e) if e.outcome.took_effect() && !e.exists => {
                let Some(seq) = e.seq else {
                    report.flag(
                        Property::Malformed,
                        format!("{}/{}", e.queue, e.id),
                        format!("created at {} without its seq", e.complete),
                    );
                    return;
                };
                let i = self.instance(&e.queue, &e.id, seq, report);
                let inst = &mut self.instances[i];
                inst.enqueue = Some(e);
                inst.key = inst.key.or(e.key.as_deref());
                inst.start = inst.start.min(e.invoke);
            }
            Op::Enqueue(e) if e.outcome.may_have() => self.uncertain_enqueues.push(e),
            Op::Lease(l) => {
                let i = self.instance(&l.queue, &l.id, l.seq, report);
                let d = self.deliveries.len();
                let inst = &mut self.instances[i];
                inst.key = inst.key.or(l.key.as_deref());
                inst.start = inst.start.min(l.invoke);
                inst.deliveries.push(d);
                self.deliveries.push(Dlv {
                    lease: l,
                    inst: i,
                    calls: Vec::new(),
                });
                if self.by_lease.insert(&l.lease_id, d).is_some() {
                    report.flag(
                        Property::Malformed,
                        format!("{}/{}", l.queue, l.id),
                        format!("lease_id {} handed out twice", l.lease_id),
                    );
                }
                self.queue(&l.queue).deliveries.push(d);
            }
            Op::LeaseFailed(f) => self.queue(&f.queue).lease_failed.push(f.at()),
            Op::QueueConfig(c) => self.queue(&c.queue).configs.push(c),
            Op::Redrive(c) if c.outcome.may_have() => self.queue(&c.queue).redrives.push(c.at()),
            Op::DeleteQueue(c) if c.outcome.may_have() => self.queue(&c.queue).deletes.push(c.at()),
            Op::Crash(c) if c.ends_leases => {
                self.crashes.push(c);
                self.crash_spans.push(c.at());
            }
            Op::Restart(s) => self.restarts.push(*s),
            Op::Stop(s) => self.stop = Some(s),
            Op::Cancel(c) => self.message_calls.push(MessageOp::Cancel(c)),
            Op::Reschedule(r) => self.message_calls.push(MessageOp::Reschedule(r)),
            Op::Observe(o) => self.message_calls.push(MessageOp::Observe(o)),
            _ => {}
        }
    }

    fn link_ids(&mut self) {
        let instances = &self.instances;
        for list in self.by_id.values_mut() {
            list.sort_unstable_by_key(|&i| instances[i].seq);
        }
        for e in std::mem::take(&mut self.uncertain_enqueues) {
            for i in self.candidates(&e.queue, &e.id, e.at()) {
                self.instances[i].touches.push(e.at());
            }
        }
        for call in std::mem::take(&mut self.message_calls) {
            match call {
                MessageOp::Cancel(c) => {
                    let found = self.candidates(&c.queue, &c.id, c.at());
                    let sure = found.len() == 1;
                    for i in found {
                        self.instances[i].cancels.push((c, sure));
                    }
                }
                MessageOp::Reschedule(r) => {
                    for i in self.candidates(&r.queue, &r.id, r.at()) {
                        self.instances[i].reschedules.push(r);
                    }
                }
                MessageOp::Observe(o) => {
                    let found = self.candidates(&o.queue, &o.id, o.at());
                    let sure = found.len() == 1;
                    for i in found {
                        let it = o.seq.map_or(sure, |s| s == self.instances[i].seq);
                        if o.seq.is_none_or(|s| s == self.instances[i].seq)
                            || o.state == Observed::Absent
                        {
                            self.instances[i].observes.push((o, it));
                        }
                    }
                }
            }
        }
    }

    /// The instances of an id a call at `at` may have met: one existed by
    /// its completion, and the next one of the id (ids are reused only
    /// after the previous message ended) did not surely exist before it
    /// was invoked.
    fn candidates(&self, queue: &str, id: &str, at: Span) -> Vec<usize> {
        let Some(list) = self.by_id.get(&(queue, id)) else {
            return Vec::new();
        };
        let created = |i: usize| {
            let inst = &self.instances[i];
            inst.enqueue.map_or(inst.start, |e| e.complete)
        };
        list.iter()
            .enumerate()
            .filter(|&(n, &i)| {
                self.instances[i].start <= at.complete
                    && list
                        .get(n + 1)
                        .is_none_or(|&next| created(next) > at.invoke)
            })
            .map(|(_, &i)| i)
            .collect()
    }

    fn second_pass(&mut self, op: &'h Op, report: &mut Report) {
        let (lease_id, call) = match op {
            Op::Ack(c) => (&c.lease_id, Call::Ack(c)),
            Op::Bury(c) => (&c.lease_id, Call::Bury(c)),
            Op::Nack(c) => (&c.lease_id, Call::Nack(c)),
            Op::Extend(c) => (&c.lease_id, Call::Extend(c)),
            _ => return,
        };
        match self.by_lease.get(lease_id.as_str()) {
            Some(&d) => self.deliveries[d].calls.push(call),
            None => report.flag(
                Property::Malformed,
                lease_id.clone(),
                format!(
                    "{} at {} names a lease no line handed out",
                    call.name(),
                    call.at().invoke
                ),
            ),
        }
    }

    fn finish(mut self) -> Index<'h> {
        let deliveries = &mut self.deliveries;
        for d in deliveries.iter_mut() {
            d.calls.sort_by_key(|c| (c.at().invoke, c.at().complete));
        }
        let order = |d: &Dlv| (d.lease.invoke, d.lease.complete, d.lease.attempt);
        for inst in &mut self.instances {
            inst.deliveries.sort_by_key(|&d| order(&deliveries[d]));
        }
        for q in self.queues.values_mut() {
            q.configs.sort_by_key(|c| (c.invoke, c.complete));
            q.lease_failed.sort();
            q.redrives.sort();
            q.deletes.sort();
        }
        self.crashes.sort_by_key(|c| (c.invoke, c.complete));
        self.crash_spans.sort();
        self.restarts
            .sort_unstable_by_key(|s| (s.invoke, s.complete));
        Index {
            instances: self.instances,
            deliveries: self.deliveries,
            queues: self.queues,
            crashes: self.crashes,
            crash_spans: self.crash_spans,
            restarts: self.restarts,
            stop: self.stop,
        }
    }
}
