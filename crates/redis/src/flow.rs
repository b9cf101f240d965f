//! Flow control's calls on Redis (api.md "Flow control"; docs/redis.md
//! "Flow control"). The gate runs inside the lease function
//! (`lua/flow.lua`, a port of `Bucket::ready_at`/`take` and the admission
//! rule, checked against Rust by `tests/redis/flow_lua.rs`); the deferral rule
//! runs here, in Rust (`FlowConfig::defer`), and `lua/defer.lua` applies
//! its verdict only to the record it was decided on.

use delayd_core::{
    metric, BrokerError, BrokerResult, Deferral, FlowKey, KeyInfo, LeaseId, MessageId, Nack,
    QueueName,
};
use redis::Value;

use crate::broker::Inner;
use crate::history::defer_code;
use crate::record::{int, opt_int, status, text};
use crate::scripts;

/// Rounds of a deferral whose record changed under it before the call
/// fails `Unavailable` (a leased record changes only by its own lease's
/// calls, so a second round is already rare).
const MAX_ROUNDS: usize = 10;

impl Inner {
    /// A nack with `defer: true`: read the message, decide the deferral
    /// (`FlowConfig::deferred`) from it, and let `defer.lua` carry it out if
    /// the message is still leased by `lease` with the attempts and
    /// deferrals read.
    pub(crate) async fn defer(
        &self,
        queue: &QueueName,
        id: &MessageId,
        lease: &LeaseId,
        nack: Nack,
    ) -> BrokerResult<()> {
        self.check_open()?;
        let Some(config) = self.load_config(queue).await? else {
            return Err(self.not_found(queue, id).await);
        };
        let Some(flow) = config.flow.as_ref() else {
            return Err(BrokerError::defer_without_flow(queue));
        };
        for _ in 0..MAX_ROUNDS {
            let message = self.get(queue, id).await?;
            let now = self.clock.now_ms();
            let deferred = flow.deferred(
                &config.retry,
                message.attempts,
                message.deferrals,
                nack.delay_ms,
                now,
            );
            let verdict = match deferred.verdict {
                Deferral::Dead => b"D".to_vec(),
                Deferral::Again { deliver_at } => deliver_at.to_string().into_bytes(),
            };
            let (shard, keys) = self.shard_of(queue, id);
            let args = vec![
                id.as_str().into(),
                lease.as_str().into(),
                message.attempts.to_string().into_bytes(),
                message.deferrals.to_string().into_bytes(),
                deferred.attempts.to_string().into_bytes(),
                deferred.deferrals.to_string().into_bytes(),
                verdict,
                nack.priority
                    .map(|p| p.to_string())
                    .unwrap_or_default()
                    .into_bytes(),
                nack.error_text().unwrap_or_default().as_bytes().to_vec(),
                defer_code(nack.defer_reason()).into(),
            ];
            let reply = self.run(scripts::DEFER, &keys, now, args).await?;
            match status(&reply)? {
                ("OK", rest) => {
                    metrics::counter!(metric::FLOW_DEFERRALS_TOTAL, "queue" => queue.to_string())
                        .increment(1);
                    self.woke(queue, rest.get(2)).await;
                    return self.after_nack(queue, shard, rest).await;
                }
                ("LM", _) => {
                    return Err(BrokerError::LeaseMismatch {
                        id: id.clone(),
                        lease: lease.to_string(),
                    })
                }
                ("CHG", _) => continue,
                _ => return Err(self.not_found(queue, id).await),
            }
        }
        Err(BrokerError::unavailable(format!(
            "defer of {id}: the message kept changing"
        )))
    }

    /// `GET /v1/queues/{queue}/keys/{key}`: the key's live messages by
    /// state over the queue's shards, and its cooldown.
    pub(crate) async fn key_info(&self, queue: &QueueName, key: &FlowKey) -> BrokerResult<KeyInfo> {
        self.check_open()?;
        if !self.queue_exists(queue).await? {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        let mut info = KeyInfo::empty(key.clone());
        let now = self.clock.now_ms();
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            let reply = self
                .run(scripts::KEY_INFO, &keys, now, vec![key.as_str().into()])
                .await?;
            match status(&reply)? {
                ("OK", [scheduled, ready, leased, dead, cooling, ..]) => {
                    info.scheduled += int(scheduled)?;
                    info.ready += int(ready)?;
                    info.leased += int(leased)?;
                    info.dead += int(dead)?;
                    if let Some(until) = opt_int(cooling)? {
                        info.cooling_until =
                            Some(info.cooling_until.map_or(until, |u| u.max(until)));
                    }
                }
                ("NOQ", _) => return Err(BrokerError::QueueNotFound(queue.clone())),
                _ => return Err(BrokerError::unavailable("key_info: unexpected reply")),
            }
        }
        Ok(info)
    }

    /// A call's `wakes` answer (lua/flow.lua): that many waiting lease
    /// calls may now get a message (parked messages made ready again,
    /// slots freed): wake them here and on the other nodes.
    pub(crate) async fn woke(&self, queue: &QueueName, wakes: Option<&Value>) {
        let n = wakes.and_then(|v| int(v).ok()).unwrap_or(0);
        if n > 0 {
            self.wake
                .ready_n(queue, usize::try_from(n).unwrap_or(usize::MAX));
            self.publish_detached(format!("r {queue}"));
        }
    }

    /// Runs `flow_eval.lua` (the differential test's entry point).
    pub(crate) async fn flow_eval(&self, args: Vec<Vec<u8>>) -> BrokerResult<Vec<String>> {
        let keys = self.keys.shard(&QueueName::new("flow-eval")?, 0);
        let reply = self.run(scripts::FLOW_EVAL, &keys, 0, args).await?;
        reply
            .iter()
            .map(|v| match v {
                Value::Int(i) => Ok(i.to_string()),
                other => text(other).map(str::to_owned),
            })
            .collect()
    }
}
