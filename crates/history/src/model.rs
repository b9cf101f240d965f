//! A small reference broker that keeps api.md's rules the simplest way
//! (scans, no indexes) and records what a client would see of it as a
//! [`History`]: the property tests' source of valid histories (which the
//! checker must pass, and which, broken one way, it must flag) and the
//! benchmark's source of large ones.
//!
//! Three queues: `plain` (no flow), `flow` (concurrency, key_concurrency,
//! rate, key_rate) and `ordered` (ordered keys, a rate); one `every_ms`
//! schedule into `plain` with `catchup: all`. A client calls one operation
//! at a time on a virtual clock; the broker acts at the call's `invoke`.
//! Crashes end every lease: most come back expired (the attempt counted),
//! some as not durable (ready, the attempt uncounted).

use crate::op::{
    Crash, Enqueue, Every, Extend, Fire, FiresObserved, Flow, History, Lease, LeaseCall, Nack,
    Observe, Observed, Op, Outcome, QueueConfig, Rate, ScheduleAction, ScheduleChange, Span, Stop,
};

/// A seeded generator (SplitMix64): the model needs no dependency for it.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const QUEUES: [&str; 3] = ["plain", "flow", "ordered"];
const LEASE_MS: u64 = 300;
const MAX_ATTEMPTS: u32 = 5;
const SCHEDULE: &str = "tick";
const EVERY_MS: u64 = 1_000;
/// Live messages beyond which the client stops enqueueing for a while.
const BACKLOG: usize = 300;

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Waiting (scheduled or ready: ready once `due <= now`).
    Waiting,
    Leased {
        until: u64,
        lease: u64,
        at: u64,
    },
    Dead,
    Gone,
}

struct Msg {
    queue: usize,
    id: String,
    seq: u64,
    key: Option<String>,
    priority: u32,
    due: u64,
    attempts: u32,
    deferrals: u32,
    state: State,
}

/// GCRA in µs: the next conforming time, the emission interval rounded
/// up (so the model is never faster than the rate) and the burst.
#[derive(Clone, Copy, Default)]
struct Bucket {
    tat: u64,
}

impl Bucket {
    fn interval(rate: &Rate) -> u64 {
        (rate.period_ms * 1_000).div_ceil(rate.limit.max(1))
    }

    fn admits(&self, rate: &Rate, now: u64) -> bool {
        let tau = (rate.burst() - 1) * Self::interval(rate);
        self.tat.saturating_sub(tau) <= now * 1_000
    }

    fn take(&mut self, rate: &Rate, now: u64) {
        self.tat = self.tat.max(now * 1_000) + Self::interval(rate);
    }
}

/// The model broker and its recorded history.
pub struct Model {
    rng: Rng,
    now: u64,
    seq: u64,
    lease_ids: u64,
    msgs: Vec<Msg>,
    /// Live message indexes per queue (dead ones move to `dead`).
    live: [Vec<usize>; 3],
    dead: Vec<usize>,
    /// Leased message indexes (a superset: checked at each use).
    leased: Vec<usize>,
    flows: [Option<Flow>; 3],
    buckets: [Bucket; 3],
    key_buckets: std::collections::HashMap<(usize, String), Bucket>,
    /// Leased, not yet answered by this client (message index, lease id).
    held: Vec<(usize, u64)>,
    next_fire: u64,
    down: bool,
    history: History,
}

impl Model {
    pub fn new(seed: u64) -> Self {
        let flows = [
            None,
            Some(Flow {
                concurrency: Some(6),
                key_concurrency: Some(2),
                rate: Some(Rate {
                    limit: 40,
                    period_ms: 1_000,
                    burst: None,
                }),
                key_rate: Some(Rate {
                    limit: 10,
                    period_ms: 1_000,
                    burst: Some(3),
                }),
                ordered: false,
                max_deferrals: Some(100),
            }),
            Some(Flow {
                ordered: true,
                rate: Some(Rate {
                    limit: 100,
                    period_ms: 1_000,
                    burst: None,
                }),
                ..Flow::default()
            }),
        ];
        let start = 1_700_000_000_000;
        let mut model = Self {
            rng: Rng::new(seed),
            now: start,
            seq: 0,
            lease_ids: 0,
            msgs: Vec::new(),
            live: Default::default(),
            dead: Vec::new(),
            leased: Vec::new(),
            flows: flows.clone(),
            buckets: Default::default(),
            key_buckets: Default::default(),
            held: Vec::new(),
            next_fire: start + EVERY_MS,
            down: false,
            history: History::new(),
        };
        for (q, flow) in flows.into_iter().enumerate() {
            let at = model.call();
            model.history.push(Op::QueueConfig(QueueConfig {
                invoke: at.invoke,
                complete: at.complete,
                queue: QUEUES[q].into(),
                outcome: Outcome::Ok,
                max_attempts: Some(MAX_ATTEMPTS),
                retry: None,
                flow,
            }));
        }
        let at = model.call();
        model.history.push(Op::Schedule(ScheduleChange {
            invoke: at.invoke,
            complete: at.complete,
            queue: QUEUES[0].into(),
            schedule: SCHEDULE.into(),
            action: ScheduleAction::Put,
            outcome: Outcome::Ok,
            every: Some(Every {
                every_ms: EVERY_MS,
                start_at: start,
                end_at: None,
                catchup_all: true,
                catchup_window_ms: 3_600_000,
                paused: false,
            }),
        }));
        model
    }

    /// Records `ops` client operations (about; a lease of several
    /// messages is several lines), then reads every message and stops.
    pub fn run(mut self, ops: usize) -> History {
        while self.history.ops.len() < ops {
            self.step();
        }
        self.finish()
    }

    /// A call's span: the broker acts at `invoke`; the answer takes 0-2 ms.
    fn call(&mut self) -> Span {
        let invoke = self.now;
        self.now += self.rng.below(3);
        Span {
            invoke,
            complete: self.now,
        }
    }

    fn step(&mut self) {
        if self.down {
            self.restart();
            return;
        }
        self.settle();
        match self.rng.below(100) {
            // A bounded backlog: the model's scans stay short.
            0..=24 if self.live.iter().map(Vec::len).sum::<usize>() < BACKLOG => self.enqueue(),
            0..=24 => self.lease(),
            25..=54 => self.lease(),
            55..=74 => self.ack(),
            75..=82 => self.nack(),
            83..=85 => self.extend(),
            86..=87 => self.cancel(),
            88 if self.rng.chance(10) => self.crash(),
            _ => self.now += self.rng.below(60),
        }
    }

    /// Time at the call: expired leases fail, due fire times fire.
    fn settle(&mut self) {
        let now = self.now;
        for n in 0..self.leased.len() {
            let i = self.leased[n];
            if let State::Leased { until, .. } = self.msgs[i].state {
                if until <= now {
                    self.fail(i, until, false);
                }
            }
        }
        let msgs = &self.msgs;
        self.leased
            .retain(|&i| matches!(msgs[i].state, State::Leased { .. }));
        while self.next_fire <= now {
            let t = self.next_fire;
            self.next_fire += EVERY_MS;
            let i = self.insert(0, format!("{SCHEDULE}:{t}"), None, 1024, t);
            let seq = self.msgs[i].seq;
            self.history.push(Op::Fire(Fire {
                invoke: now,
                complete: now,
                queue: QUEUES[0].into(),
                schedule: SCHEDULE.into(),
                fire_at: t,
                seq,
            }));
        }
    }

    fn insert(
        &mut self,
        queue: usize,
        id: String,
        key: Option<String>,
        priority: u32,
        due: u64,
    ) -> usize {
        self.seq += 1;
        self.msgs.push(Msg {
            queue,
            id,
            seq: self.seq,
            key,
            priority,
            due,
            attempts: 0,
            deferrals: 0,
            state: State::Waiting,
        });
        self.live[queue].push(self.msgs.len() - 1);
        self.msgs.len() - 1
    }

    /// A failed delivery (nack, expiry): dead at `MAX_ATTEMPTS`, else due at `at`.
    fn fail(&mut self, i: usize, at: u64, defer: bool) {
        let m = &mut self.msgs[i];
        if defer {
            m.attempts -= 1;
            m.deferrals += 1;
        } else {
            m.deferrals = 0;
        }
        m.due = at;
        m.state = if !defer && m.attempts >= MAX_ATTEMPTS {
            State::Dead
        } else {
            State::Waiting
        };
        if m.state == State::Dead {
            let q = m.queue;
            self.live[q].retain(|&j| j != i);
            self.dead.push(i);
        }
    }

    fn remove(&mut self, i: usize) {
        let q = self.msgs[i].queue;
        self.msgs[i].state = State::Gone;
        self.live[q].retain(|&j| j != i);
        self.held.retain(|&(j, _)| j != i);
    }

    fn enqueue(&mut self) {
        let q = self.rng.below(3) as usize;
        let id = format!("m{}", self.rng.below(1 << 40));
        let delay = match self.rng.below(3) {
            0 => 0,
            1 => self.rng.below(50),
            _ => self.rng.below(1_000),
        };
        let key = (q > 0).then(|| format!("k{}", self.rng.below(4)));
        let priority = if self.rng.chance(20) { 10 } else { 1024 };
        let at = self.call();
        let due = at.invoke + delay;
        let i = self.insert(q, id.clone(), key.clone(), priority, due);
        let seq = self.msgs[i].seq;
        self.history.push(Op::Enqueue(Enqueue {
            invoke: at.invoke,
            complete: at.complete,
            queue: QUEUES[q].into(),
            id,
            outcome: Outcome::Ok,
            exists: false,
            seq: Some(seq),
            deliver_at: Some(due),
            key,
            priority: Some(priority),
        }));
    }

    /// Whether message `i` may be delivered now (api.md, Flow control).
    fn deliverable(&self, i: usize, now: u64) -> bool {
        let m = &self.msgs[i];
        if m.state != State::Waiting || m.due > now {
            return false;
        }
        let Some(flow) = &self.flows[m.queue] else {
            return true;
        };
        let live = &self.live[m.queue];
        let leased = |same_key: bool| {
            self.leased
                .iter()
                .filter(|&&j| self.msgs[j].queue == m.queue)
                .filter(|&&j| matches!(self.msgs[j].state, State::Leased { .. }))
                .filter(|&&j| !same_key || self.msgs[j].key == m.key)
                .count() as u32
        };
        if flow.concurrency.is_some_and(|c| leased(false) >= c) {
            return false;
        }
        if m.key.is_some() && flow.key_slots().is_some_and(|c| leased(true) >= c) {
            return false;
        }
        if flow
            .rate
            .is_some_and(|r| !self.buckets[m.queue].admits(&r, now))
        {
            return false;
        }
        if let (Some(r), Some(k)) = (flow.key_rate, &m.key) {
            let b = self
                .key_buckets
                .get(&(m.queue, k.clone()))
                .copied()
                .unwrap_or_default();
            if !b.admits(&r, now) {
                return false;
            }
        }
        if flow.ordered {
            let order = |j: usize| (self.msgs[j].priority, self.msgs[j].due, self.msgs[j].seq);
            let same: Vec<usize> = live
                .iter()
                .copied()
                .filter(|&j| self.msgs[j].key == m.key && self.msgs[j].state != State::Dead)
                .collect();
            if let Some(&h) = same
                .iter()
                .find(|&&j| self.msgs[j].attempts > 0 || self.msgs[j].deferrals > 0)
            {
                return h == i;
            }
            let first = same
                .iter()
                .copied()
                .filter(|&j| self.msgs[j].state == State::Waiting && self.msgs[j].due <= now)
                .min_by_key(|&j| order(j));
            return first == Some(i);
        }
        true
    }

    fn lease(&mut self) {
        let q = self.rng.below(3) as usize;
        let max = 1 + self.rng.below(3) as usize;
        let at = self.call();
        let now = at.invoke;
        let mut got = Vec::new();
        while got.len() < max {
            let mut ready: Vec<usize> = self.live[q]
                .iter()
                .copied()
                .filter(|&i| self.deliverable(i, now))
                .collect();
            ready.sort_by_key(|&i| (self.msgs[i].priority, self.msgs[i].due, self.msgs[i].seq));
            let Some(&i) = ready.first() else { break };
            self.lease_one(i, now);
            got.push(i);
        }
        for i in got {
            let m = &self.msgs[i];
            let State::Leased { until, lease, .. } = m.state else {
                continue;
            };
            self.history.push(Op::Lease(Lease {
                invoke: at.invoke,
                complete: at.complete,
                queue: QUEUES[q].into(),
                id: m.id.clone(),
                seq: m.seq,
                attempt: m.attempts,
                lease_id: format!("l{lease}"),
                lease_until: until,
                deliver_at: m.due,
                key: m.key.clone(),
                granted_at: Some(now),
            }));
            self.held.push((i, lease));
        }
    }

    fn lease_one(&mut self, i: usize, now: u64) {
        self.lease_ids += 1;
        let q = self.msgs[i].queue;
        if let Some(flow) = self.flows[q].clone() {
            if let Some(r) = flow.rate {
                self.buckets[q].take(&r, now);
            }
            if let (Some(r), Some(k)) = (flow.key_rate, self.msgs[i].key.clone()) {
                self.key_buckets.entry((q, k)).or_default().take(&r, now);
            }
        }
        self.leased.push(i);
        let m = &mut self.msgs[i];
        m.attempts += 1;
        m.state = State::Leased {
            until: now + LEASE_MS,
            lease: self.lease_ids,
            at: now,
        };
    }

    /// A held lease, picked at random and forgotten by the client.
    fn pick(&mut self) -> Option<(usize, u64)> {
        if self.held.is_empty() {
            return None;
        }
        let n = self.rng.below(self.held.len() as u64) as usize;
        Some(self.held.swap_remove(n))
    }

    /// Whether `lease` is message `i`'s current, unexpired lease at `now`.
    fn current(&self, i: usize, lease: u64, now: u64) -> bool {
        matches!(self.msgs[i].state, State::Leased { lease: l, until, .. } if l == lease && until > now)
    }

    fn lease_call(&mut self, i: usize, lease: u64, at: Span, outcome: Outcome) -> LeaseCall {
        let m = &self.msgs[i];
        LeaseCall {
            invoke: at.invoke,
            complete: at.complete,
            queue: QUEUES[m.queue].into(),
            id: m.id.clone(),
            lease_id: format!("l{lease}"),
            outcome,
        }
    }

    fn answer(&self, i: usize, lease: u64, now: u64) -> Outcome {
        match (self.current(i, lease, now), self.msgs[i].state) {
            (true, _) => Outcome::Ok,
            (false, State::Gone) => Outcome::NotFound,
            _ => Outcome::LeaseMismatch,
        }
    }

    fn ack(&mut self) {
        let Some((i, lease)) = self.pick() else {
            return;
        };
        let at = self.call();
        let outcome = self.answer(i, lease, at.invoke);
        if outcome == Outcome::Ok {
            self.remove(i);
        }
        let call = self.lease_call(i, lease, at, outcome);
        self.history.push(Op::Ack(call));
    }

    fn nack(&mut self) {
        let Some((i, lease)) = self.pick() else {
            return;
        };
        let defer = self.flows[self.msgs[i].queue].is_some() && self.rng.chance(40);
        let delay = self.rng.chance(50).then(|| self.rng.below(200));
        let at = self.call();
        let outcome = self.answer(i, lease, at.invoke);
        if outcome == Outcome::Ok {
            self.fail(i, at.invoke + delay.unwrap_or(0), defer);
        }
        let c = self.lease_call(i, lease, at, outcome);
        self.history.push(Op::Nack(Nack {
            invoke: c.invoke,
            complete: c.complete,
            queue: c.queue,
            id: c.id,
            lease_id: c.lease_id,
            outcome,
            defer,
            delay_ms: delay,
        }));
    }

    fn extend(&mut self) {
        let Some(&(i, lease)) = self.held.last() else {
            return;
        };
        let at = self.call();
        let outcome = self.answer(i, lease, at.invoke);
        let until = at.invoke + LEASE_MS;
        if outcome == Outcome::Ok {
            if let State::Leased {
                lease, at: granted, ..
            } = self.msgs[i].state
            {
                self.msgs[i].state = State::Leased {
                    until,
                    lease,
                    at: granted,
                };
            }
        }
        let c = self.lease_call(i, lease, at, outcome);
        self.history.push(Op::Extend(Extend {
            invoke: c.invoke,
            complete: c.complete,
            queue: c.queue,
            id: c.id,
            lease_id: c.lease_id,
            outcome,
            lease_until: (outcome == Outcome::Ok).then_some(until),
        }));
    }

    fn cancel(&mut self) {
        let q = self.rng.below(3) as usize;
        let Some(&i) = self.live[q].get(self.rng.below(self.live[q].len() as u64 + 1) as usize)
        else {
            return;
        };
        let at = self.call();
        self.remove(i);
        self.history.push(Op::Cancel(crate::op::MessageCall {
            invoke: at.invoke,
            complete: at.complete,
            queue: QUEUES[q].into(),
            id: self.msgs[i].id.clone(),
            outcome: Outcome::Ok,
        }));
    }

    /// Every lease ends: most come back expired (counted), leases granted
    /// in the last 5 ms as not durable (ready, uncounted).
    fn crash(&mut self) {
        let at = self.call();
        let t = at.invoke;
        for n in 0..self.leased.len() {
            let i = self.leased[n];
            {
                if let State::Leased { at: granted, .. } = self.msgs[i].state {
                    if granted + 5 > t {
                        self.msgs[i].attempts -= 1;
                        self.msgs[i].state = State::Waiting;
                    } else {
                        self.fail(i, t, false);
                    }
                }
            }
        }
        self.held.clear();
        self.leased.clear();
        self.history.push(Op::Crash(Crash {
            invoke: at.invoke,
            complete: at.complete,
            ends_leases: true,
            maybe: false,
        }));
        self.down = true;
    }

    fn restart(&mut self) {
        let invoke = self.now;
        self.now += 20 + self.rng.below(500);
        self.down = false;
        self.history.push(Op::Restart(Span {
            invoke,
            complete: self.now,
        }));
    }

    /// Reads every message still live, then stops (not drained).
    fn finish(mut self) -> History {
        if self.down {
            self.restart();
        }
        self.settle();
        let now = self.now;
        for (q, live) in self.live.iter().enumerate() {
            let dead = self.dead.iter().filter(|&&i| self.msgs[i].queue == q);
            for &i in live.iter().chain(dead) {
                let m = &self.msgs[i];
                self.history.push(Op::Observe(Observe {
                    invoke: now,
                    complete: now,
                    queue: QUEUES[q].into(),
                    id: m.id.clone(),
                    state: if m.state == State::Dead {
                        Observed::Dead
                    } else {
                        Observed::Live
                    },
                    seq: Some(m.seq),
                }));
            }
        }
        self.history.push(Op::FiresObserved(FiresObserved {
            invoke: now,
            complete: now,
            queue: QUEUES[0].into(),
            schedule: SCHEDULE.into(),
            through: now,
        }));
        self.history.push(Op::Stop(Stop {
            at: now,
            drained: false,
        }));
        self.history
    }
}
