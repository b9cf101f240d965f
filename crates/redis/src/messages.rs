//! Message operations: enqueue (batched per shard), get, get_by_seq,
//! cancel, reschedule, list.

use std::collections::BTreeMap;

use delayd_core::check_deliver_at;
use delayd_core::{
    BrokerError, BrokerResult, EnqueueOptions, EnqueueOutcome, EnqueueRequest, History, ListQuery,
    Message, MessageId, MessageState, OnConflict, QueueName, Reschedule, DEFAULT_PRIORITY,
};

use crate::broker::Inner;
use crate::record::{self, int, status, text};
use crate::scripts;

/// Rounds of one enqueue chunk (queue creation, refused seqs) before the
/// call fails `Unavailable`.
const MAX_ROUNDS: usize = 100;
/// Messages per enqueue script call, so a 1000-message batch of large
/// payloads does not become one huge Redis request.
const ENQUEUE_CHUNK: usize = 100;

/// One validated enqueue item.
#[derive(Clone)]
pub(crate) struct Prepared {
    index: usize,
    /// The seq, also in `args[1]`.
    pub(crate) seq: u64,
    pub(crate) id: MessageId,
    deliver_at: u64,
    pub(crate) args: Vec<Vec<u8>>,
}

/// A sorted-set member prefix: the numbers as 8-byte big-endian each
/// (`struct.pack('>I8')` in lua/common.lua), so bytes order as numbers.
pub(crate) fn member_key(numbers: &[u64], id: &str) -> Vec<u8> {
    let mut m: Vec<u8> = numbers.iter().flat_map(|n| n.to_be_bytes()).collect();
    m.extend_from_slice(id.as_bytes());
    m
}

/// `on_conflict` as `enqueue_items` (lua/common.lua) takes it.
fn conflict_code(on_conflict: OnConflict) -> &'static str {
    match on_conflict {
        OnConflict::Keep => "",
        OnConflict::Replace => "r",
        OnConflict::Debounce => "d",
    }
}

/// One enqueue item's arguments (`enqueue_items` in lua/common.lua; the
/// seq is inserted at index 1 once allocated): id, deliver_at, priority,
/// max_attempts, lease_ms, headers, payload, flow key, on_conflict,
/// debounce_max_ms.
pub(crate) fn prepare(index: usize, req: EnqueueRequest, now: u64) -> BrokerResult<Prepared> {
    // Uncapped: the script caps a debounce at its own time (the record's
    // enqueued_at), which may be later than `now`.
    let deliver_at = check_deliver_at(req.schedule.deliver_at(now))?;
    req.validate()?;
    let id = req.id.unwrap_or_else(MessageId::generate);
    let opt = |v: Option<String>| v.unwrap_or_default().into_bytes();
    let args = vec![
        id.as_str().as_bytes().to_vec(),
        deliver_at.to_string().into_bytes(),
        req.priority
            .unwrap_or(DEFAULT_PRIORITY)
            .to_string()
            .into_bytes(),
        opt(req.max_attempts.map(|m| m.to_string())),
        opt(req.lease_ms.map(|m| m.to_string())),
        record::encode_headers(&req.headers)?.into_bytes(),
        req.payload,
        opt(req.key.map(String::from)),
        conflict_code(req.on_conflict).into(),
        opt(req.debounce_max_ms.map(|m| m.to_string())),
    ];
    Ok(Prepared {
        index,
        seq: 0,
        id,
        deliver_at,
        args,
    })
}

impl Inner {
    pub(crate) async fn enqueue(
        &self,
        queue: &QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        self.check_open()?;
        let now = self.clock.now_ms();
        let mut results: Vec<Option<BrokerResult<EnqueueOutcome>>> = vec![None; messages.len()];
        let mut prepared = Vec::with_capacity(messages.len());
        for (index, req) in messages.into_iter().enumerate() {
            match prepare(index, req, now) {
                Ok(p) => prepared.push(p),
                Err(e) => results[index] = Some(Err(e)),
            }
        }
        if prepared.is_empty() && !self.queue_exists(queue).await? {
            // Nothing valid to write, but the queue rules still hold.
            self.ensure_queue(queue, options.auto_create).await?;
        }
        // Seqs follow input order (the batch's order), whatever the shards.
        let mut seq = self.alloc_seqs(prepared.len() as u64).await?;
        let mut by_shard: BTreeMap<u32, Vec<Prepared>> = BTreeMap::new();
        for mut p in prepared {
            p.args.insert(1, seq.to_string().into_bytes());
            p.seq = seq;
            seq += 1;
            by_shard
                .entry(self.keys.shard_of(&p.id))
                .or_default()
                .push(p);
        }
        // Every chunk goes to its shard's lane at once (shards in parallel,
        // and with other calls' chunks for the same shard in one call).
        let mut pending = Vec::new();
        for (shard, items) in by_shard {
            for chunk in items.chunks(ENQUEUE_CHUNK) {
                let indices: Vec<usize> = chunk.iter().map(|p| p.index).collect();
                pending.push((
                    indices,
                    self.enqueue_lane(queue, shard, chunk.to_vec(), options),
                ));
            }
        }
        for (indices, answer) in pending {
            let outcomes = answer.await?;
            for (index, outcome) in indices.into_iter().zip(outcomes) {
                results[index] = Some(outcome);
            }
        }
        self.index_seqs(queue, &results).await;
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(BrokerError::unavailable("item not processed"))))
            .collect())
    }

    /// Runs the enqueue function for items of one shard (sorted by seq),
    /// creating the queue first when the shard does not know it.
    pub(crate) async fn enqueue_chunk(
        &self,
        queue: &QueueName,
        shard: u32,
        mut chunk: Vec<Prepared>,
        now: u64,
        options: EnqueueOptions,
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        let keys = self.keys.shard(queue, shard);
        let args = |chunk: &[Prepared]| chunk.iter().flat_map(|p| p.args.clone()).collect();
        let mut reply = self.run(scripts::ENQUEUE, &keys, now, args(&chunk)).await?;
        // The queue is created once; fresh seqs are refused only when a
        // call with newer seqs (from this node or another) reached the
        // shard between our INCRBY and our call, so every refused round
        // means another call went through: bounded generously.
        for _ in 0..MAX_ROUNDS {
            match status(&reply)?.0 {
                "NOQ" => self.ensure_queue(queue, options.auto_create).await?,
                "SEQ" => {
                    let mut seq = self.alloc_seqs(chunk.len() as u64).await?;
                    for p in &mut chunk {
                        p.args[1] = seq.to_string().into_bytes();
                        p.seq = seq;
                        seq += 1;
                    }
                }
                _ => break,
            }
            reply = self.run(scripts::ENQUEUE, &keys, now, args(&chunk)).await?;
        }
        let (word, rest) = status(&reply)?;
        if word != "OK" || rest.len() != chunk.len() * 4 {
            return Err(BrokerError::unavailable(format!(
                "enqueue into {queue} failed: {word}"
            )));
        }
        self.enqueued(queue, shard, &chunk, rest).await
    }

    /// The outcomes of enqueued `items` from the enqueue code's answers (4
    /// values per item: code, seq, deliver_at, state; `enqueue_items` in
    /// lua/common.lua), after waking the nodes that a created or replaced
    /// message concerns. Shared by enqueue and a schedule's fire.
    pub(crate) async fn enqueued(
        &self,
        queue: &QueueName,
        shard: u32,
        items: &[Prepared],
        replies: &[redis::Value],
    ) -> BrokerResult<Vec<BrokerResult<EnqueueOutcome>>> {
        let mut outcomes = Vec::with_capacity(items.len());
        let mut ready = 0;
        let mut earliest: Option<u64> = None;
        for (item, r) in items.iter().zip(replies.chunks(4)) {
            let [code, seq, deliver_at, state] = r else {
                return Err(BrokerError::unavailable("enqueue: short reply"));
            };
            let (code, seq, deliver_at) = (int(code)?, int(seq)?, int(deliver_at)?);
            let id = item.id.clone();
            // A new message, or one whose content and due time a replace
            // changed, may be ready now or due earlier than the timers
            // know; a successor waits for its lease's end, whose expiry
            // is armed already.
            if code == 1 || code == 2 {
                match text(state)? {
                    "R" => ready += 1,
                    "S" => earliest = Some(earliest.map_or(deliver_at, |e| e.min(deliver_at))),
                    _ => {}
                }
            }
            // A created item is due when asked, or earlier by debounce's cap.
            debug_assert!(
                code != 1 || deliver_at <= item.deliver_at,
                "{deliver_at} vs {}",
                item.deliver_at
            );
            outcomes.push(match code {
                1 => Ok(EnqueueOutcome::created(id, seq, deliver_at)),
                2 => Ok(EnqueueOutcome::replaced(id, seq, deliver_at, false)),
                3 => Ok(EnqueueOutcome::replaced(id, seq, deliver_at, true)),
                4 => Err(BrokerError::replace_dead(&id)),
                0 => Ok(EnqueueOutcome::duplicate(id, seq, deliver_at)),
                _ => return Err(BrokerError::unavailable("enqueue: unknown answer")),
            });
        }
        if ready > 0 {
            self.announce_ready(queue, ready).await;
        }
        if let Some(due) = earliest {
            self.announce_due(queue, shard, due).await;
        }
        Ok(outcomes)
    }

    /// Records seq -> queue/id for `get_by_seq`. Best effort: a failure
    /// here loses only that lookup, never the message.
    pub(crate) async fn index_seqs(
        &self,
        queue: &QueueName,
        results: &[Option<BrokerResult<EnqueueOutcome>>],
    ) {
        let mut buckets: BTreeMap<String, redis::Cmd> = BTreeMap::new();
        for outcome in results.iter().flatten().flatten() {
            if outcome.created {
                let (bucket, field) = self.keys.seq_slot(outcome.seq);
                buckets
                    .entry(bucket)
                    .or_insert_with_key(|b| {
                        let mut hset = redis::cmd("HSET");
                        hset.arg(b);
                        hset
                    })
                    .arg(field)
                    .arg(format!("{queue}/{}", outcome.id));
            }
        }
        if buckets.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for cmd in buckets.into_values() {
            pipe.add_command(cmd).ignore();
        }
        let mut conn = self.conn.clone();
        if let Err(err) = pipe.query_async::<()>(&mut conn).await {
            tracing::warn!(error = %err, "seq index update failed");
        }
    }

    /// Drops seq -> queue/id after the message is gone. Not awaited: the
    /// entry is best effort either way (lookups verify and clean up), and
    /// waiting for it would double the round trips of every ack.
    pub(crate) fn unindex_seq(&self, seq: u64) {
        self.unindex
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(seq);
        self.unindex_ready.notify_one();
    }

    pub(crate) async fn get(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<Message> {
        self.check_open()?;
        let (_, keys) = self.shard_of(queue, id);
        let reply = self
            .run(
                scripts::GET,
                &keys,
                self.clock.now_ms(),
                vec![id.as_str().into()],
            )
            .await?;
        match status(&reply)? {
            ("OK", rest) => record::message(queue, rest),
            _ => Err(self.not_found(queue, id).await),
        }
    }

    /// The history of a live or retained message (`lua/events.lua`).
    pub(crate) async fn events(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<History> {
        self.check_open()?;
        let (_, keys) = self.shard_of(queue, id);
        let reply = self
            .run(
                scripts::EVENTS,
                &keys,
                self.clock.now_ms(),
                vec![id.as_str().into()],
            )
            .await?;
        match status(&reply)? {
            ("OK", [enqueued_at, tail, ..]) => {
                let tail = record::bytes(tail)
                    .ok_or_else(|| BrokerError::unavailable("events: no history"))?;
                crate::history::decode(int(enqueued_at)?, tail)
            }
            _ => Err(self.not_found(queue, id).await),
        }
    }

    pub(crate) async fn get_by_seq(&self, seq: u64) -> BrokerResult<Option<Message>> {
        self.check_open()?;
        let (bucket, field) = self.keys.seq_slot(seq);
        let entry: Option<String> = self
            .query(redis::cmd("HGET").arg(&bucket).arg(field), false)
            .await?;
        let Some((queue, id)) = entry.as_deref().and_then(|e| e.rsplit_once('/')) else {
            return Ok(None);
        };
        let (Ok(queue), Ok(id)) = (QueueName::new(queue), MessageId::new(id)) else {
            return Ok(None);
        };
        match self.get(&queue, &id).await {
            // A retained message is gone for lookups by seq (beanstalkd
            // sees it deleted).
            Ok(m) if m.seq == seq && !m.state.ended() => Ok(Some(m)),
            Ok(_) | Err(BrokerError::MessageNotFound { .. } | BrokerError::QueueNotFound(_)) => {
                // A stale entry (deleted queue, the message ended, or the
                // id reused): drop it.
                self.unindex_seq(seq);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn cancel(&self, queue: &QueueName, id: &MessageId) -> BrokerResult<()> {
        self.check_open()?;
        let (_, keys) = self.shard_of(queue, id);
        let reply = self
            .run(
                scripts::CANCEL,
                &keys,
                self.clock.now_ms(),
                vec![id.as_str().into()],
            )
            .await?;
        match status(&reply)? {
            ("OK", [sk, rest @ ..]) => {
                self.unindex_seq(int(sk)?);
                self.woke(queue, rest.first()).await;
                Ok(())
            }
            _ => Err(self.not_found(queue, id).await),
        }
    }

    pub(crate) async fn reschedule(
        &self,
        queue: &QueueName,
        id: &MessageId,
        change: Reschedule,
    ) -> BrokerResult<Message> {
        self.check_open()?;
        let now = self.clock.now_ms();
        let deliver_at = change
            .schedule
            .map(|s| check_deliver_at(s.deliver_at(now)))
            .transpose()?;
        let (shard, keys) = self.shard_of(queue, id);
        let args = vec![
            id.as_str().into(),
            deliver_at
                .map(|d| d.to_string())
                .unwrap_or_default()
                .into_bytes(),
            change
                .priority
                .map(|p| p.to_string())
                .unwrap_or_default()
                .into_bytes(),
        ];
        let reply = self.run(scripts::RESCHEDULE, &keys, now, args).await?;
        match status(&reply)? {
            ("OK", rest) => {
                let message = record::message(queue, rest)?;
                match message.state {
                    MessageState::Ready => self.announce_ready(queue, 1).await,
                    MessageState::Scheduled => {
                        self.announce_due(queue, shard, message.deliver_at).await;
                    }
                    _ => {}
                }
                Ok(message)
            }
            ("IS", [state, ..]) => Err(BrokerError::InvalidState {
                id: id.clone(),
                state: record::state(text(state)?)?,
                reason: "only scheduled and ready messages can be rescheduled",
            }),
            _ => Err(self.not_found(queue, id).await),
        }
    }

    pub(crate) async fn list(
        &self,
        queue: &QueueName,
        query: ListQuery,
    ) -> BrokerResult<Vec<Message>> {
        self.check_open()?;
        if !self.queue_exists(queue).await? {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        let limit = query.limit.min(1_000);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let cursor = match &query.after {
            Some(after) => self.cursor(queue, after, query.state).await?,
            None => None,
        };
        let (score, member) = cursor.unwrap_or_default();
        let now = self.clock.now_ms();
        let mut all = Vec::new();
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            let args = vec![
                state_code(query.state).into(),
                score.clone().into_bytes(),
                member.clone(),
                limit.to_string().into_bytes(),
            ];
            let reply = self.run(scripts::LIST, &keys, now, args).await?;
            if let ("OK", rest) = status(&reply)? {
                all.extend(record::messages(queue, rest)?);
            }
        }
        all.sort_by_key(|m| order_key(m, query.state));
        all.truncate(limit as usize);
        Ok(all)
    }

    /// The (score, member) of the cursor message in the listed state's
    /// sorted set. A cursor that is gone or no longer in that state starts
    /// the listing over (as the reference model does).
    async fn cursor(
        &self,
        queue: &QueueName,
        after: &MessageId,
        state: MessageState,
    ) -> BrokerResult<Option<(String, Vec<u8>)>> {
        let message = match self.get(queue, after).await {
            Ok(m) => m,
            Err(BrokerError::MessageNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if message.state != state {
            return Ok(None);
        }
        let (score, da, seq, id) = order_key(&message, state);
        let member = match state {
            MessageState::Ready => member_key(&[da, seq], &id),
            // seq8 . pr4 . id (lua/common.lua `smember`).
            MessageState::Scheduled => {
                let mut m = seq.to_be_bytes().to_vec();
                m.extend_from_slice(&message.priority.to_be_bytes());
                m.extend_from_slice(id.as_bytes());
                m
            }
            _ => member_key(&[seq], &id),
        };
        Ok(Some((score.to_string(), member)))
    }
}

fn state_code(state: MessageState) -> &'static str {
    match state {
        MessageState::Scheduled => "S",
        MessageState::Ready => "R",
        MessageState::Leased => "L",
        MessageState::Dead => "D",
        MessageState::Acked => "A",
        MessageState::Cancelled => "C",
    }
}

/// The order of a state's sorted set as a tuple: (score, deliver_at for
/// ready, seq, id), matching the members' byte order.
pub(crate) fn order_key(m: &Message, state: MessageState) -> (u64, u64, u64, String) {
    let id = m.id.as_str().to_owned();
    match state {
        MessageState::Scheduled => (m.deliver_at, 0, m.seq, id),
        MessageState::Ready => (u64::from(m.priority), m.deliver_at, m.seq, id),
        MessageState::Leased => (m.lease_until.unwrap_or(0), 0, m.seq, id),
        MessageState::Dead => (m.died_at.unwrap_or(0), 0, m.seq, id),
        MessageState::Acked | MessageState::Cancelled => (m.ended_at.unwrap_or(0), 0, m.seq, id),
    }
}
