//! delayd's domain model and the `Broker` trait.
//!
//! # Layout
//! - [`model`]: validated names and ids ([`QueueName`], [`MessageId`],
//!   [`LeaseId`]), queue configuration with its retry policy and push target,
//!   queue stats.
//! - [`message`]: a message and its states, and the request/response types
//!   of the trait (enqueue, lease, nack, reschedule, list, redrive).
//! - [`broker`]: the [`Broker`] trait every backend implements and every
//!   frontend calls.
//! - [`pipeline`]: the calls of [`Broker::pipeline`] (one client's
//!   back-to-back calls as one durable step).
//! - [`error`]: [`BrokerError`], split by how callers react (status codes).
//! - [`clock`]: the injected wall clock.
//! - [`metric`]: names of the metrics brokers record through the `metrics`
//!   facade (the server installs the Prometheus exporter).
//! - `testkit` (feature `testkit`): the conformance suite, one test per
//!   semantic rule, run against every `Broker`.
//!
//! Core types are not wire types: the HTTP API and the beanstalkd protocol
//! convert explicitly, because the wire carries compatibility promises.

#![forbid(unsafe_code)]

pub mod broker;
pub mod clock;
pub mod error;
pub mod message;
pub mod metric;
pub mod model;
pub mod pipeline;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use broker::{check_ack_batch, Broker, DueHistogram, Upsert, HISTOGRAM_SCAN_LIMIT, MAX_BATCH};
pub use clock::{Clock, ManualClock, SkewedClock, SystemClock};
pub use error::{BrokerError, BrokerResult};
pub use message::{
    check_lease_ms, Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest, LeaseRequest,
    ListQuery, Message, MessageCounters, MessageState, Nack, Redrive, Reschedule, Schedule,
};
pub use model::{
    LeaseId, MessageId, PushConfig, QueueConfig, QueueConfigPatch, QueueInfo, QueueName,
    QueueStats, RetryPolicy, DEFAULT_PRIORITY,
};
pub use pipeline::{PipelinedCall, PipelinedResult};
