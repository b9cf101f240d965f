//! Consuming: lease (with waiting and the merge across shards), lease of
//! one message, ack, nack, bury, extend, redrive.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use delayd_core::{
    metric, BrokerError, BrokerResult, Delivery, LeaseId, LeaseRequest, ListQuery, MessageId,
    MessageState, Nack, QueueName, Redrive, Via,
};
use futures_util::future::{join_all, select_all};
use redis::Value;
use tokio::time::Instant;

use crate::broker::Inner;
use crate::history::via_code;
use crate::record::{self, int, opt_int, status, text};
use crate::scripts::{self, Function};
use crate::tasks::{record_lateness, SWEEP_INTERVAL};
use crate::wake::{QueueWaiters, Wake};

/// Messages moved per redrive script call.
const REDRIVE_CHUNK: u64 = 1_000;

fn opt_arg<T: ToString>(v: Option<T>) -> Vec<u8> {
    v.map(|v| v.to_string()).unwrap_or_default().into_bytes()
}

/// Releases a lease call's waiter entries however the call ends (also when
/// its future is dropped, e.g. the HTTP client went away).
struct WaiterGuard<'a> {
    wake: &'a Wake,
    waiters: Vec<(QueueName, Arc<QueueWaiters>)>,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        for (queue, waiter) in self.waiters.drain(..) {
            self.wake.release(&queue, waiter);
        }
    }
}

/// Counts the lease function's held-back messages (`reason count ...`) in
/// `delayd_flow_held_total`.
fn record_holds(queue: &QueueName, held: &str) {
    let mut words = held.split_whitespace();
    while let (Some(reason), Some(count)) = (words.next(), words.next()) {
        let reason = match reason {
            "rate" => "rate",
            "concurrency" => "concurrency",
            "ordered" => "ordered",
            _ => "cooldown",
        };
        let count = count.parse().unwrap_or(0);
        metrics::counter!(metric::FLOW_HELD_TOTAL, "queue" => queue.to_string(), "reason" => reason)
            .increment(count);
    }
}

impl Inner {
    pub(crate) async fn lease(
        &self,
        queues: &[QueueName],
        request: LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        self.check_open()?;
        request.validate()?;
        let mut queues = queues.to_vec();
        queues.sort();
        queues.dedup();
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let guard = WaiterGuard {
            wake: &self.wake,
            waiters: queues
                .iter()
                .map(|q| (q.clone(), self.wake.waiter(q)))
                .collect(),
        };
        let waiters: Vec<_> = guard.waiters.iter().map(|(_, w)| w.clone()).collect();
        let deletions: Vec<u64> = waiters
            .iter()
            .map(|w| w.deletions.load(Ordering::SeqCst))
            .collect();
        let result = self
            .wait_and_lease(&queues, &request, via, &waiters, &deletions)
            .await;
        drop(waiters);
        drop(guard);
        result
    }

    async fn wait_and_lease(
        &self,
        queues: &[QueueName],
        request: &LeaseRequest,
        via: Via,
        waiters: &[Arc<QueueWaiters>],
        deletions: &[u64],
    ) -> BrokerResult<Vec<Delivery>> {
        let deadline = Instant::now() + Duration::from_millis(request.wait_ms);
        let mut stop = self.stop.subscribe();
        loop {
            // Registered before looking, so a wake-up between the look and
            // the sleep is not lost.
            let mut notified: Vec<_> = waiters
                .iter()
                .map(|w| Box::pin(w.notify.notified()))
                .collect();
            for n in &mut notified {
                n.as_mut().enable();
            }
            let found = self.lease_once(queues, request, via).await?;
            let deleted = waiters
                .iter()
                .zip(deletions)
                .any(|(w, d)| w.deletions.load(Ordering::SeqCst) != *d);
            if !found.is_empty() || deleted || self.is_closed() || Instant::now() >= deadline {
                return Ok(found);
            }
            // Look again at least every sweep interval: a wake-up another
            // node lost (pub/sub down) must not stall a waiting consumer.
            let recheck = deadline.min(Instant::now() + SWEEP_INTERVAL);
            tokio::select! {
                _ = select_all(notified) => {}
                () = tokio::time::sleep_until(recheck) => {}
                _ = stop.changed() => return Ok(Vec::new()),
            }
        }
    }

    /// One attempt: a single shard leases directly; several shards (or
    /// queues) are peeked first and merged, so the messages taken are the
    /// first `max` in (priority, deliver_at, seq) order over all of them.
    async fn lease_once(
        &self,
        queues: &[QueueName],
        request: &LeaseRequest,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        let shards: Vec<(QueueName, u32)> = queues
            .iter()
            .flat_map(|q| (0..self.keys.shards).map(move |s| (q.clone(), s)))
            .collect();
        let now = self.clock.now_ms();
        if let [(queue, shard)] = shards.as_slice() {
            return self
                .lease_shard(queue, *shard, request.max, request.lease_ms, via)
                .await;
        }
        let peeks = join_all(shards.iter().map(|(q, s)| {
            let keys = self.keys.shard(q, *s);
            let args = vec![request.max.to_string().into_bytes()];
            async move { self.run(scripts::PEEK, &keys, now, args).await }
        }))
        .await;
        let mut candidates: Vec<(u64, Vec<u8>, usize)> = Vec::new();
        for (index, peek) in peeks.into_iter().enumerate() {
            let values = peek?;
            for pair in values.chunks(2) {
                if let [member, score] = pair {
                    let member = record::bytes(member)
                        .ok_or_else(|| BrokerError::unavailable("peek: member"))?;
                    candidates.push((int(score)?, member.to_vec(), index));
                }
            }
        }
        candidates.sort();
        candidates.truncate(request.max as usize);
        let mut counts = vec![0u32; shards.len()];
        for (_, _, index) in &candidates {
            counts[*index] += 1;
        }
        let mut out = Vec::new();
        for ((queue, shard), count) in shards.iter().zip(counts) {
            if count > 0 {
                out.extend(
                    self.lease_shard(queue, *shard, count, request.lease_ms, via)
                        .await?,
                );
            }
        }
        out.sort_by_key(|d| (d.priority, d.deliver_at, d.seq));
        Ok(out)
    }

    /// One lease call on one shard (`lease_shard` shares it between this
    /// node's waiting calls), its deliveries' `leased` events naming `via`.
    pub(crate) async fn lease_call(
        &self,
        queue: &QueueName,
        shard: u32,
        max: u32,
        lease_ms: Option<u64>,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        let now = self.clock.now_ms();
        let keys = self.keys.shard(queue, shard);
        let token = LeaseId::generate().0;
        // Promotion (and the next due time) only when something may be due:
        // the shard's armed timer says when; without one, always.
        let promote = self.wake.may_be_due(queue, shard, now);
        let args = vec![
            max.to_string().into_bytes(),
            opt_arg(lease_ms),
            token.into_bytes(),
            if promote { b"1".to_vec() } else { Vec::new() },
            via_code(via).into(),
        ];
        let reply = self.run(scripts::LEASE, &keys, now, args).await?;
        let (_, rest) = status(&reply)?;
        let [next_due, fired, rest @ ..] = rest else {
            return Ok(Vec::new());
        };
        if let Some(due) = opt_int(next_due)? {
            self.wake.arm(queue, shard, due);
        }
        let fired = usize::try_from(int(fired)?)
            .unwrap_or(usize::MAX)
            .min(rest.len());
        let (fired, rest) = rest.split_at(fired);
        let [held, records @ ..] = rest else {
            return Err(BrokerError::unavailable("lease: short reply"));
        };
        record_lateness(queue, now, fired);
        record_holds(queue, text(held)?);
        let deliveries = record::deliveries(queue, records)?;
        let leased = metric::Lateness::of(metric::Stage::Leased);
        for delivery in &deliveries {
            leased.record(now, delivery.deliver_at);
        }
        if let Some(expiry) = deliveries.iter().map(|d| d.lease_until).min() {
            self.wake.arm(queue, shard, expiry);
        }
        if fired.len() > deliveries.len() {
            // This call promoted more than it took: wake the other waiters.
            self.wake.ready_n(queue, fired.len() - deliveries.len());
        }
        Ok(deliveries)
    }

    pub(crate) async fn lease_message(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<Delivery> {
        self.check_open()?;
        delayd_core::check_lease_ms(lease_ms)?;
        let (shard, keys) = self.shard_of(queue, id);
        let args = vec![
            id.as_str().into(),
            opt_arg(lease_ms),
            LeaseId::generate().0.into_bytes(),
            via_code(Via::Beanstalk).into(),
        ];
        let reply = self
            .run(scripts::LEASE_ONE, &keys, self.clock.now_ms(), args)
            .await?;
        match status(&reply)? {
            ("OK", rest) => {
                let delivery = record::delivery(queue, rest)?;
                self.wake.arm(queue, shard, delivery.lease_until);
                Ok(delivery)
            }
            ("IS", _) => Err(BrokerError::InvalidState {
                id: id.clone(),
                state: MessageState::Leased,
                reason: "the message is already leased",
            }),
            _ => Err(self.not_found(queue, id).await),
        }
    }

    /// Runs a script that acts on a current lease and maps the shared
    /// `NF`/`LM` answers to errors.
    pub(crate) async fn on_lease(
        &self,
        function: Function,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        extra: Vec<Vec<u8>>,
    ) -> BrokerResult<(u32, Vec<Value>)> {
        self.check_open()?;
        let (shard, keys) = self.shard_of(queue, id);
        let mut args = vec![id.as_str().into(), lease.as_str().into()];
        args.extend(extra);
        let reply = self.run(function, &keys, self.clock.now_ms(), args).await?;
        match status(&reply)? {
            ("OK", rest) => Ok((shard, rest.to_vec())),
            ("LM", _) => Err(BrokerError::LeaseMismatch {
                id: id.clone(),
                lease: lease.to_string(),
            }),
            _ => Err(self.not_found(queue, id).await),
        }
    }

    pub(crate) async fn nack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()> {
        nack.validate()?;
        let mut extra = vec![
            opt_arg(nack.delay_ms),
            opt_arg(nack.priority),
            if nack.may_die {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            },
            nack.error_text().unwrap_or_default().as_bytes().to_vec(),
        ];
        // The event: `push_failed` for the push dispatcher's nack (its
        // status, -1 for none, and duration), else `nacked`.
        match nack.push {
            Some(push) => {
                let status = push.status.map_or(-1, i64::from);
                extra.push(status.to_string().into_bytes());
                extra.push(push.duration_ms.to_string().into_bytes());
            }
            None => extra.extend([Vec::new(), Vec::new()]),
        }
        if nack.defer {
            return self.defer(queue, id, lease, nack).await;
        }
        let (shard, rest) = self
            .on_lease(scripts::NACK, queue, id, lease, extra)
            .await?;
        self.woke(queue, rest.get(2)).await;
        self.after_nack(queue, shard, &rest).await
    }

    /// Wakes and announcements after a nack or a deferral answered
    /// `{new state, next_due, ...}`.
    pub(crate) async fn after_nack(
        &self,
        queue: &QueueName,
        shard: u32,
        rest: &[Value],
    ) -> BrokerResult<()> {
        match rest.first().map(text).transpose()? {
            Some("R") => self.announce_ready(queue, 1).await,
            Some("D") => {
                metrics::counter!(metric::DEAD_LETTERED_TOTAL, "queue" => queue.to_string())
                    .increment(1);
            }
            _ => {
                if let Some(due) = rest.get(1).map(opt_int).transpose()?.flatten() {
                    self.announce_due(queue, shard, due).await;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn bury(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        priority: Option<u32>,
    ) -> BrokerResult<()> {
        let (shard, rest) = self
            .on_lease(scripts::BURY, queue, id, lease, vec![opt_arg(priority)])
            .await?;
        self.woke(queue, rest.first()).await;
        // Dead, or (a successor took its place) pending again.
        match rest.get(1).map(text).transpose()? {
            Some("R") => self.announce_ready(queue, 1).await,
            Some("S") => {
                if let Some(due) = rest.get(2).map(int).transpose()? {
                    self.announce_due(queue, shard, due).await;
                }
            }
            _ => {
                metrics::counter!(metric::DEAD_LETTERED_TOTAL, "queue" => queue.to_string())
                    .increment(1);
            }
        }
        Ok(())
    }

    pub(crate) async fn extend(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        lease_ms: Option<u64>,
    ) -> BrokerResult<u64> {
        delayd_core::check_lease_ms(lease_ms)?;
        let (_, rest) = self
            .on_lease(scripts::EXTEND, queue, id, lease, vec![opt_arg(lease_ms)])
            .await?;
        rest.first()
            .map(int)
            .transpose()?
            .ok_or_else(|| BrokerError::unavailable("extend: empty reply"))
    }

    pub(crate) async fn redrive(&self, queue: &QueueName, which: Redrive) -> BrokerResult<u64> {
        self.check_open()?;
        if !self.queue_exists(queue).await? {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        let moved = match which {
            Redrive::All => self.redrive_all(queue).await?,
            Redrive::Ids(ids) => self.redrive_ids(queue, &ids).await?,
            Redrive::Oldest(n) => self.redrive_oldest(queue, n).await?,
        };
        if moved > 0 {
            let moved = usize::try_from(moved).unwrap_or(usize::MAX);
            self.announce_ready(queue, moved).await;
        }
        Ok(moved)
    }

    async fn redrive_all(&self, queue: &QueueName) -> BrokerResult<u64> {
        let mut total = 0;
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            loop {
                let reply = self
                    .run(
                        scripts::REDRIVE,
                        &keys,
                        self.clock.now_ms(),
                        vec![b"all".to_vec()],
                    )
                    .await?;
                let moved = status(&reply)?.1.first().map(int).transpose()?.unwrap_or(0);
                total += moved;
                if moved < REDRIVE_CHUNK {
                    break;
                }
            }
        }
        Ok(total)
    }

    async fn redrive_ids(&self, queue: &QueueName, ids: &[MessageId]) -> BrokerResult<u64> {
        let mut by_shard: std::collections::BTreeMap<u32, Vec<Vec<u8>>> = Default::default();
        for id in ids {
            by_shard
                .entry(self.keys.shard_of(id))
                .or_default()
                .push(id.as_str().into());
        }
        let mut total = 0;
        for (shard, ids) in by_shard {
            let keys = self.keys.shard(queue, shard);
            let mut args = vec![b"ids".to_vec()];
            args.extend(ids);
            let reply = self
                .run(scripts::REDRIVE, &keys, self.clock.now_ms(), args)
                .await?;
            total += status(&reply)?.1.first().map(int).transpose()?.unwrap_or(0);
        }
        Ok(total)
    }

    /// The `n` oldest deaths over all shards: list them in order, then
    /// redrive those ids, a page at a time.
    async fn redrive_oldest(&self, queue: &QueueName, n: u64) -> BrokerResult<u64> {
        let mut total = 0;
        while total < n {
            let page = (n - total).min(REDRIVE_CHUNK) as u32;
            let query = ListQuery {
                state: MessageState::Dead,
                after: None,
                limit: page,
            };
            let oldest: Vec<MessageId> = self
                .list(queue, query)
                .await?
                .into_iter()
                .map(|m| m.id)
                .collect();
            if oldest.is_empty() {
                break;
            }
            let moved = self.redrive_ids(queue, &oldest).await?;
            total += moved;
            if moved == 0 {
                break;
            }
        }
        Ok(total)
    }
}
