//! [`Broker::pipeline`](crate::Broker::pipeline): calls one client sent
//! back to back, run in order as one durable step.
//!
//! A beanstalkd connection pipelines its commands (a worker keeps several
//! `reserve`s and `delete`s in flight); running each as its own durable
//! call would cost one fsync round trip per command on that connection.
//! A pipeline runs them in order, each exactly as its own method would,
//! and waits for durability once, after the last.

use crate::broker::Broker;
use crate::error::BrokerResult;
use crate::message::{
    Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest, LeaseRequest, Nack,
};
use crate::model::{LeaseId, MessageId, QueueName};

/// One call of a pipeline: a [`Broker`](crate::Broker) method's arguments.
#[derive(Clone, Debug)]
pub enum PipelinedCall {
    Enqueue {
        queue: QueueName,
        messages: Vec<EnqueueRequest>,
        options: EnqueueOptions,
    },
    /// A lease that does not wait (`wait_ms: 0`).
    Lease {
        queues: Vec<QueueName>,
        max: u32,
        lease_ms: Option<u64>,
    },
    Ack {
        queue: QueueName,
        id: MessageId,
        lease: LeaseId,
    },
    Nack {
        queue: QueueName,
        id: MessageId,
        lease: LeaseId,
        nack: Nack,
    },
    Bury {
        queue: QueueName,
        id: MessageId,
        lease: LeaseId,
        priority: Option<u32>,
    },
    Extend {
        queue: QueueName,
        id: MessageId,
        lease: LeaseId,
        lease_ms: Option<u64>,
    },
}

/// The result of one [`PipelinedCall`], as its method would return it.
#[derive(Clone, Debug, PartialEq)]
pub enum PipelinedResult {
    Enqueued(BrokerResult<Vec<BrokerResult<EnqueueOutcome>>>),
    Leased(BrokerResult<Vec<Delivery>>),
    /// Ack, nack and bury.
    Done(BrokerResult<()>),
    /// The new `lease_until`.
    Extended(BrokerResult<u64>),
}

/// Whether a pipeline stops after a lease of `max` that answered `leased`:
/// it leased fewer than `max` (or failed), so called one by one, what
/// follows would run only after that lease had waited.
pub fn stops_after_lease<T>(leased: &BrokerResult<Vec<T>>, max: u32) -> bool {
    leased.as_ref().map_or(true, |got| got.len() < max as usize)
}

/// Runs one pipelined call with its own method, as the default
/// [`Broker::pipeline`] does; true when the pipeline stops after it.
/// Backends that batch some calls use it for the others.
pub async fn run_call<B: Broker + ?Sized>(
    broker: &B,
    call: PipelinedCall,
) -> (PipelinedResult, bool) {
    let result = match call {
        PipelinedCall::Enqueue {
            queue,
            messages,
            options,
        } => PipelinedResult::Enqueued(broker.enqueue(&queue, messages, options).await),
        PipelinedCall::Lease {
            queues,
            max,
            lease_ms,
        } => {
            let request = LeaseRequest {
                max,
                wait_ms: 0,
                lease_ms,
            };
            // Pipelines are beanstalkd connections'.
            let leased = broker
                .lease_via(&queues, request, crate::events::Via::Beanstalk)
                .await;
            let stop = stops_after_lease(&leased, max);
            return (PipelinedResult::Leased(leased), stop);
        }
        PipelinedCall::Ack { queue, id, lease } => {
            PipelinedResult::Done(broker.ack(&queue, &id, &lease).await)
        }
        PipelinedCall::Nack {
            queue,
            id,
            lease,
            nack,
        } => PipelinedResult::Done(broker.nack(&queue, &id, &lease, nack).await),
        PipelinedCall::Bury {
            queue,
            id,
            lease,
            priority,
        } => PipelinedResult::Done(broker.bury(&queue, &id, &lease, priority).await),
        PipelinedCall::Extend {
            queue,
            id,
            lease,
            lease_ms,
        } => PipelinedResult::Extended(broker.extend(&queue, &id, &lease, lease_ms).await),
    };
    (result, false)
}
