//! `Broker::pipeline` for Redis: runs of one kind of call become one call.
//!
//! A beanstalkd connection pipelines its puts, reserves and deletes. Called
//! one by one, each would be its own round trip and function call; here a
//! run of consecutive enqueues into one queue (same options) is one
//! `enqueue` (one function call per shard), a run of acks is one
//! `ack_many` per queue, and a run of identical non-waiting leases is one
//! lease of their summed `max`, handed out in order (their `leased` events
//! name `beanstalk`, the frontend that pipelines). Other calls run one by
//! one. Results are exactly those of calling one by one: acks of distinct
//! leases do not interact, an enqueue batch applies its items in order, and
//! the lease run stops where the first call leased fewer than its `max`
//! (the calls after it are given back unrun, as the trait requires).

use std::collections::VecDeque;

use delayd_core::pipeline::{run_call, stops_after_lease};
use delayd_core::{
    Broker, BrokerResult, Delivery, LeaseId, LeaseRequest, MessageId, PipelinedCall,
    PipelinedResult, QueueName, Via, MAX_BATCH,
};
use futures_util::future::join_all;

use crate::RedisBroker;

impl RedisBroker {
    pub(crate) async fn run_pipeline(
        &self,
        calls: &mut VecDeque<PipelinedCall>,
    ) -> Vec<PipelinedResult> {
        let mut results = Vec::with_capacity(calls.len());
        while let Some(call) = calls.pop_front() {
            let stop = match call {
                PipelinedCall::Enqueue { .. } => {
                    self.enqueue_run(call, calls, &mut results).await;
                    false
                }
                PipelinedCall::Ack { queue, id, lease } => {
                    self.ack_run((queue, id, lease), calls, &mut results).await;
                    false
                }
                PipelinedCall::Lease {
                    queues,
                    max,
                    lease_ms,
                } => {
                    self.lease_run(queues, max, lease_ms, calls, &mut results)
                        .await
                }
                other => {
                    let (result, stop) = run_call(self, other).await;
                    results.push(result);
                    stop
                }
            };
            if stop {
                break;
            }
        }
        results
    }

    async fn enqueue_run(
        &self,
        first: PipelinedCall,
        calls: &mut VecDeque<PipelinedCall>,
        results: &mut Vec<PipelinedResult>,
    ) {
        let PipelinedCall::Enqueue {
            queue,
            mut messages,
            options,
        } = first
        else {
            return;
        };
        let mut sizes = vec![messages.len()];
        while let Some(PipelinedCall::Enqueue {
            queue: q,
            messages: m,
            options: o,
        }) = calls.front()
        {
            if *q != queue || *o != options || messages.len() + m.len() > MAX_BATCH {
                break;
            }
            sizes.push(m.len());
            if let Some(PipelinedCall::Enqueue { messages: m, .. }) = calls.pop_front() {
                messages.extend(m);
            }
        }
        match self.enqueue(&queue, messages, options).await {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for size in sizes {
                    let part = outcomes.by_ref().take(size).collect();
                    results.push(PipelinedResult::Enqueued(Ok(part)));
                }
            }
            Err(err) => {
                for _ in sizes {
                    results.push(PipelinedResult::Enqueued(Err(err.clone())));
                }
            }
        }
    }

    async fn ack_run(
        &self,
        first: (QueueName, MessageId, LeaseId),
        calls: &mut VecDeque<PipelinedCall>,
        results: &mut Vec<PipelinedResult>,
    ) {
        let mut run = vec![first];
        while run.len() < MAX_BATCH {
            match calls.pop_front() {
                Some(PipelinedCall::Ack { queue, id, lease }) => run.push((queue, id, lease)),
                Some(other) => {
                    calls.push_front(other);
                    break;
                }
                None => break,
            }
        }
        // One ack_many per queue, all at once; answers back in run order.
        let mut queues: Vec<&QueueName> = run.iter().map(|(q, _, _)| q).collect();
        queues.sort();
        queues.dedup();
        let answers = join_all(queues.iter().map(|queue| {
            let pairs: Vec<_> = run
                .iter()
                .filter(|(q, _, _)| q == *queue)
                .map(|(_, id, lease)| (id.clone(), lease.clone()))
                .collect();
            self.inner.ack_many(queue, pairs)
        }))
        .await;
        let mut per_queue: Vec<_> = answers
            .into_iter()
            .map(|a| match a {
                Ok(list) => list.into_iter().map(Some).collect::<VecDeque<_>>(),
                Err(err) => std::iter::repeat_n(Some(Err(err)), run.len()).collect(),
            })
            .collect();
        for (queue, _, _) in &run {
            let slot = queues.iter().position(|q| *q == queue).unwrap_or(0);
            let answer = per_queue[slot]
                .pop_front()
                .flatten()
                .unwrap_or_else(|| Err(delayd_core::BrokerError::unavailable("ack not answered")));
            results.push(PipelinedResult::Done(answer));
        }
    }

    /// Returns whether the pipeline stops (a call of the run leased fewer
    /// than its `max`).
    async fn lease_run(
        &self,
        queues: Vec<QueueName>,
        max: u32,
        lease_ms: Option<u64>,
        calls: &mut VecDeque<PipelinedCall>,
        results: &mut Vec<PipelinedResult>,
    ) -> bool {
        let mut maxes = vec![max];
        let mut total = max as usize;
        while let Some(PipelinedCall::Lease {
            queues: q,
            max: m,
            lease_ms: l,
        }) = calls.front()
        {
            if *q != queues || *l != lease_ms || total + *m as usize > MAX_BATCH {
                break;
            }
            maxes.push(*m);
            total += *m as usize;
            calls.pop_front();
        }
        let request = LeaseRequest {
            max: total as u32,
            wait_ms: 0,
            lease_ms,
        };
        let mut leased: BrokerResult<VecDeque<Delivery>> = self
            .lease_via(&queues, request, Via::Beanstalk)
            .await
            .map(VecDeque::from);
        for (i, max) in maxes.iter().enumerate() {
            let share = match &mut leased {
                Ok(rest) => {
                    let n = rest.len().min(*max as usize);
                    Ok(rest.drain(..n).collect())
                }
                Err(err) => Err(err.clone()),
            };
            let stop = stops_after_lease(&share, *max);
            results.push(PipelinedResult::Leased(share));
            if stop {
                // The calls after it did not run: give them back.
                for max in maxes[i + 1..].iter().rev() {
                    calls.push_front(PipelinedCall::Lease {
                        queues: queues.clone(),
                        max: *max,
                        lease_ms,
                    });
                }
                return true;
            }
        }
        false
    }
}
