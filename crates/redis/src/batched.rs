//! Acks and leases batched per queue shard on this node (`batch::Lanes`):
//! the acks that arrive while an ack call for their shard is in flight go
//! to Redis together in the next one, and the lease calls of a queue shard
//! (with the same `lease_ms`) share one lease call for as many messages as
//! they ask for in all, handed out in arrival order. Enqueues of a shard
//! likewise share a call: their items go in seq order, so calls whose
//! seqs were taken in one order are applied in that order (the shard
//! refuses seqs below its last, lua/enqueue.lua). `ack_many` sends one
//! call per shard directly.

use std::collections::BTreeMap;
use std::future::Future;

use delayd_core::{
    BrokerError, BrokerResult, Delivery, EnqueueOptions, EnqueueOutcome, LeaseId, MessageId,
    QueueName, Via,
};
use futures_util::future::join_all;
use tokio::sync::oneshot;

use crate::batch::{Lanes, Waiting};
use crate::broker::Inner;
use crate::messages::Prepared;
use redis::Value;

use crate::keys::ShardKeys;
use crate::record::{int, status, text};
use crate::scripts;

/// Acks per ack call (three arguments each).
const ACKS_PER_CALL: usize = 500;
/// Ack calls for the acks whose successors' seqs the shard refused, before
/// those acks fail `Unavailable` (as enqueue's rounds).
const SEQ_ROUNDS: usize = 100;
/// Messages per batched enqueue call (a call's own chunks are at most
/// `messages::ENQUEUE_CHUNK`).
const ENQUEUES_PER_CALL: usize = 256;
/// Messages per batched lease call: a lease call asks for at most
/// `MAX_BATCH`, so one call always fits.
const LEASES_PER_CALL: usize = delayd_core::MAX_BATCH;

/// An ack's message and lease.
type AckPair = (MessageId, LeaseId);
/// One enqueue chunk's answer: per item its outcome (or its own error).
type EnqueueAnswers = BrokerResult<Vec<BrokerResult<EnqueueOutcome>>>;
pub(crate) type EnqueueLanes =
    Lanes<(QueueName, u32, EnqueueOptions), Vec<Prepared>, EnqueueAnswers>;
pub(crate) type AckLanes = Lanes<(QueueName, u32), AckPair, BrokerResult<()>>;
pub(crate) type LeaseLanes =
    Lanes<(QueueName, u32, Option<u64>, Via), u32, BrokerResult<Vec<Delivery>>>;

fn shut_down<R>(_: oneshot::error::RecvError) -> BrokerResult<R> {
    Err(BrokerError::unavailable("broker is shut down"))
}

/// Sends each waiting call its answer: `answers` in order, or the round's
/// error to all of them.
fn answer<T, X>(
    round: Vec<Waiting<T, BrokerResult<X>>>,
    answers: BrokerResult<Vec<BrokerResult<X>>>,
) {
    match answers {
        Ok(answers) => {
            for ((_, tx), a) in round.into_iter().zip(answers) {
                let _ = tx.send(a);
            }
        }
        Err(err) => {
            for (_, tx) in round {
                let _ = tx.send(Err(err.clone()));
            }
        }
    }
}

/// Hands a shared lease call's deliveries (in lease order) to the calls of
/// the round in arrival order, each up to its `max`.
fn share<R>(
    round: &[Waiting<u32, R>],
    deliveries: Vec<Delivery>,
) -> Vec<BrokerResult<Vec<Delivery>>> {
    let mut rest = deliveries.into_iter();
    round
        .iter()
        .map(|(max, _)| Ok(rest.by_ref().take(*max as usize).collect()))
        .collect()
}

impl crate::RedisBroker {
    /// Test hook: the next ack call to find its shard's lane idle waits
    /// until `calls` acks of that shard have joined it before the first
    /// round goes to Redis, so a test counting shared calls does not depend
    /// on how the scheduler interleaves the callers. Not for production:
    /// the acks wait until that many arrive.
    #[doc(hidden)]
    pub fn hold_next_ack_round(&self, calls: usize) {
        self.inner.ack_lanes.hold(calls);
    }
}

impl Inner {
    /// Runs a lane's runner on its own task, so a caller that goes away
    /// (its future dropped) never strands the calls queued behind it.
    fn spawn_runner<F, Fut>(&self, runner: F)
    where
        F: FnOnce(std::sync::Arc<Inner>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if let Some(inner) = self.me.upgrade() {
            tokio::spawn(runner(inner));
        }
    }

    pub(crate) async fn ack(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
    ) -> BrokerResult<()> {
        self.check_open()?;
        let key = (queue.clone(), self.keys.shard_of(id));
        let (rx, idle) = self
            .ack_lanes
            .submit(key.clone(), (id.clone(), lease.clone()));
        if idle {
            self.spawn_runner(move |inner| async move {
                inner.ack_lanes.held(&key).await;
                while let Some(round) = inner.ack_lanes.take(&key, ACKS_PER_CALL, |_| 1) {
                    let pairs: Vec<_> = round.iter().map(|(pair, _)| pair.clone()).collect();
                    let answers = inner.ack_pairs(&key.0, key.1, &pairs).await;
                    answer(round, answers);
                }
            });
        }
        rx.await.unwrap_or_else(shut_down)
    }

    pub(crate) async fn ack_many(
        &self,
        queue: &QueueName,
        acks: Vec<(MessageId, LeaseId)>,
    ) -> BrokerResult<Vec<BrokerResult<()>>> {
        self.check_open()?;
        delayd_core::check_ack_batch(&acks)?;
        let mut by_shard: BTreeMap<u32, (Vec<usize>, Vec<AckPair>)> = BTreeMap::new();
        for (index, pair) in acks.into_iter().enumerate() {
            let lane = by_shard.entry(self.keys.shard_of(&pair.0)).or_default();
            lane.0.push(index);
            lane.1.push(pair);
        }
        let count = by_shard.values().map(|(i, _)| i.len()).sum();
        let calls = by_shard
            .into_iter()
            .map(|(shard, (indices, pairs))| async move {
                (indices, self.ack_pairs(queue, shard, &pairs).await)
            });
        let mut results: Vec<BrokerResult<()>> = vec![Ok(()); count];
        for (indices, answers) in join_all(calls).await {
            let answers = answers?;
            for (index, a) in indices.into_iter().zip(answers) {
                results[index] = a;
            }
        }
        Ok(results)
    }

    /// Ack calls on one shard for `pairs`, answered pair by pair. An ack
    /// of a message with a successor needs a fresh seq for the successor's
    /// new message (lua/ack.lua answers `SQ` and does nothing for it): the
    /// seqs are taken from the deployment's counter and those pairs acked
    /// again, in as few rounds as the shard takes (each refused seq means
    /// another call issued a newer one there, as for enqueue).
    async fn ack_pairs(
        &self,
        queue: &QueueName,
        shard: u32,
        pairs: &[(MessageId, LeaseId)],
    ) -> BrokerResult<Vec<BrokerResult<()>>> {
        let keys = self.keys.shard(queue, shard);
        let mut out: Vec<Option<BrokerResult<()>>> = vec![None; pairs.len()];
        // The pairs still to ack, each with the seq for its successor.
        let mut todo: Vec<(usize, Option<u64>)> = (0..pairs.len()).map(|i| (i, None)).collect();
        for round in 0..SEQ_ROUNDS {
            let args = todo
                .iter()
                .flat_map(|(index, seq)| {
                    let (id, lease) = &pairs[*index];
                    let seq = seq.map(|s| s.to_string()).unwrap_or_default();
                    [id.as_str().into(), lease.as_str().into(), seq.into_bytes()]
                })
                .collect();
            let answers = match self.ack_call(queue, &keys, args, todo.len()).await {
                Ok(answers) => answers,
                // The first call's failure is the whole call's; a later
                // one's only that of the acks it carried.
                Err(err) if round == 0 => return Err(err),
                Err(err) => {
                    for (index, _) in todo.drain(..) {
                        out[index] = Some(Err(err.clone()));
                    }
                    break;
                }
            };
            let mut again = Vec::new();
            for ((index, _), a) in todo.iter().zip(&answers) {
                let (id, lease) = &pairs[*index];
                out[*index] = Some(match a {
                    Value::Int(seq) => {
                        self.unindex_seq(u64::try_from(*seq).unwrap_or(0));
                        Ok(())
                    }
                    Value::Array(successor) => {
                        self.successor_enqueued(queue, shard, id, successor).await
                    }
                    other if text(other)? == "SQ" => {
                        again.push(*index);
                        continue;
                    }
                    other if text(other)? == "LM" => Err(BrokerError::LeaseMismatch {
                        id: id.clone(),
                        lease: lease.to_string(),
                    }),
                    _ => Err(self.not_found(queue, id).await),
                });
            }
            if again.is_empty() {
                break;
            }
            match self.alloc_seqs(again.len() as u64).await {
                Ok(first) => {
                    todo = again
                        .into_iter()
                        .zip(first..)
                        .map(|(i, s)| (i, Some(s)))
                        .collect()
                }
                Err(err) => {
                    for index in again {
                        out[index] = Some(Err(err.clone()));
                    }
                    break;
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(BrokerError::unavailable(
                        "ack: the successor's seq kept being refused",
                    ))
                })
            })
            .collect())
    }

    /// One ack function call for `n` (id, lease, seq) triples: their
    /// answers, after waking the lease calls it let through.
    async fn ack_call(
        &self,
        queue: &QueueName,
        keys: &ShardKeys,
        args: Vec<Vec<u8>>,
        n: usize,
    ) -> BrokerResult<Vec<Value>> {
        let reply = self
            .run(scripts::ACK, keys, self.clock.now_ms(), args)
            .await?;
        let (_, answers) = status(&reply)?;
        let [answers @ .., wakes] = answers else {
            return Err(BrokerError::unavailable("ack: empty reply"));
        };
        if answers.len() != n {
            return Err(BrokerError::unavailable("ack: reply does not match"));
        }
        self.woke(queue, Some(wakes)).await;
        Ok(answers.to_vec())
    }

    /// After an ack enqueued the message's successor as a new message
    /// (`answer`: the old seq, the new seq, its state and deliver_at): the
    /// seq index follows, and the nodes hear of a message ready or due.
    async fn successor_enqueued(
        &self,
        queue: &QueueName,
        shard: u32,
        id: &MessageId,
        answer: &[Value],
    ) -> BrokerResult<()> {
        let [old, seq, state, deliver_at] = answer else {
            return Err(BrokerError::unavailable("ack: short successor answer"));
        };
        self.unindex_seq(int(old)?);
        let (seq, deliver_at) = (int(seq)?, int(deliver_at)?);
        match text(state)? {
            "R" => self.announce_ready(queue, 1).await,
            _ => self.announce_due(queue, shard, deliver_at).await,
        }
        let created = EnqueueOutcome::created(id.clone(), seq, deliver_at);
        self.index_seqs(queue, &[Some(Ok(created))]).await;
        Ok(())
    }

    /// Leases up to `max` ready messages of one shard, sharing the call with
    /// the other lease calls of this node on the shard (those with the same
    /// `lease_ms` and frontend).
    pub(crate) async fn lease_shard(
        &self,
        queue: &QueueName,
        shard: u32,
        max: u32,
        lease_ms: Option<u64>,
        via: Via,
    ) -> BrokerResult<Vec<Delivery>> {
        let key = (queue.clone(), shard, lease_ms, via);
        let (rx, idle) = self.lease_lanes.submit(key.clone(), max);
        if idle {
            self.spawn_runner(move |inner| async move {
                while let Some(round) = inner
                    .lease_lanes
                    .take(&key, LEASES_PER_CALL, |max| *max as usize)
                {
                    let total = round.iter().map(|(max, _)| *max).sum();
                    let leased = inner.lease_call(&key.0, key.1, total, key.2, key.3).await;
                    let shares = leased.map(|deliveries| share(&round, deliveries));
                    answer(round, shares);
                }
            });
        }
        rx.await.unwrap_or_else(shut_down)
    }

    /// Enqueues a chunk of one call's items (seqs assigned, increasing) on
    /// its shard, sharing the function call with this node's other
    /// enqueues there.
    pub(crate) async fn enqueue_lane(
        &self,
        queue: &QueueName,
        shard: u32,
        chunk: Vec<Prepared>,
        options: EnqueueOptions,
    ) -> EnqueueAnswers {
        let key = (queue.clone(), shard, options);
        let (rx, idle) = self.enqueue_lanes.submit(key.clone(), chunk);
        if idle {
            self.spawn_runner(move |inner| async move {
                while let Some(mut round) =
                    inner.enqueue_lanes.take(&key, ENQUEUES_PER_CALL, Vec::len)
                {
                    round.sort_by_key(|(chunk, _)| chunk.first().map_or(0, |p| p.seq));
                    let sizes: Vec<usize> = round.iter().map(|(c, _)| c.len()).collect();
                    let items = round.iter().flat_map(|(c, _)| c.iter().cloned()).collect();
                    let now = inner.clock.now_ms();
                    let outcomes = inner.enqueue_chunk(&key.0, key.1, items, now, key.2).await;
                    let answers = outcomes.map(|all| {
                        let mut all = all.into_iter();
                        sizes
                            .iter()
                            .map(|n| Ok(all.by_ref().take(*n).collect()))
                            .collect()
                    });
                    answer(round, answers);
                }
            });
        }
        rx.await.unwrap_or_else(shut_down)
    }
}
