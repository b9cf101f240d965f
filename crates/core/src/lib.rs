//! delayd's domain model and the `Broker` trait.
//!
//! # Layout
//! - [`model`]: validated names and ids ([`QueueName`], [`MessageId`],
//!   [`LeaseId`]), queue configuration with its retry policy and push target,
//!   queue stats.
//! - [`message`]: a message and its states, and the request/response types
//!   of the trait (enqueue, lease, nack, reschedule, list, redrive).
//! - [`flow`]: flow control's one gate (rate buckets, concurrency slots,
//!   cooldown, the deferral rule), pure code with `now` passed in.
//! - [`broker`]: the [`Broker`] trait every backend implements and every
//!   frontend calls.
//! - [`pipeline`]: the calls of [`Broker::pipeline`] (one client's
//!   back-to-back calls as one durable step).
//! - [`poison`]: the brokers' lock that ignores poisoning.
//! - [`accept`]: the frontends' policy for a failing `accept` (pause and
//!   log a run of failures once).
//! - [`recurring`]: recurring schedules: ids, definitions, the fire-time
//!   arithmetic (cron in IANA zones, `every_ms`).
//! - [`firing`]: the firing step every backend and the model run
//!   ([`fire_step`]: a due record in; the messages to write and the
//!   advanced record out).
//! - [`events`]: a message's history (its [`Event`]s, the last
//!   [`HISTORY_LEN`] kept).
//! - [`error`]: [`BrokerError`], split by how callers react (status codes).
//! - [`clock`]: the injected wall clock.
//! - [`metric`]: names of the metrics brokers record through the `metrics`
//!   facade (the server installs the Prometheus exporter).
//! - `testkit` (feature `testkit`): the conformance suite, one test per
//!   semantic rule, run against every `Broker`.
//!
//! Core types are not wire types: the HTTP API and the beanstalkd protocol
//! convert explicitly, because the wire carries compatibility promises.

//! # Example
//!
//! A frontend's call is written once against the trait and runs on every
//! backend; here against the reference model (feature `testkit`):
//!
//! ```
//! # #[cfg(feature = "testkit")]
//! # {
//! use delayd_core::testkit::ModelBroker;
//! use delayd_core::{
//!     Broker, BrokerResult, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule,
//! };
//!
//! /// Enqueues `body` due now, leases it back and acks it.
//! async fn round_trip(broker: &dyn Broker, queue: &QueueName, body: &[u8]) -> BrokerResult<Vec<u8>> {
//!     let request = EnqueueRequest {
//!         schedule: Schedule::Now,
//!         payload: body.to_vec(),
//!         ..EnqueueRequest::default()
//!     };
//!     let mut results = broker.enqueue(queue, vec![request], EnqueueOptions::default()).await?;
//!     results.remove(0)?; // each item succeeds or fails on its own
//!     let mut leased = broker.lease(std::slice::from_ref(queue), LeaseRequest::default()).await?;
//!     let delivery = leased.remove(0);
//!     broker.ack(queue, &delivery.id, &delivery.lease_id).await?;
//!     Ok(delivery.payload)
//! }
//!
//! let runtime = tokio::runtime::Runtime::new().expect("runtime");
//! let queue = QueueName::new("orders").expect("a valid name");
//! let body = runtime.block_on(round_trip(&ModelBroker::new(), &queue, b"close order 42"));
//! assert_eq!(body.expect("round trip"), b"close order 42");
//! # }
//! ```

pub mod accept;
pub mod broker;
pub mod clock;
pub mod error;
pub mod events;
pub mod firing;
pub mod flow;
pub mod message;
pub mod metric;
pub mod model;
pub mod pipeline;
pub mod poison;
pub mod recurring;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use broker::{
    check_ack_batch, check_deliver_at, Broker, DueHistogram, Settling, Upsert,
    HISTOGRAM_SCAN_LIMIT, MAX_BATCH, MAX_DELIVER_AT,
};
pub use clock::{Clock, ManualClock, SkewedClock, SystemClock};
pub use error::{BrokerError, BrokerResult};
pub use events::{
    DeathReason, DeferReason, Event, EventKind, History, PushFailure, Via, HISTORY_LEN,
};
pub use firing::{fire_step, FireStep};
pub use flow::{Bucket, Deferral, Deferred, FlowConfig, FlowKey, GateState, Hold, KeyInfo, Rate};
pub use message::{
    check_lease_ms, truncate_text, Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest,
    LeaseRequest, ListQuery, Message, MessageCounters, MessageState, Nack, OnConflict, Redrive,
    Replacement, Reschedule, Schedule, MAX_ERROR_BYTES,
};
pub use model::{
    is_valid_message_id, is_valid_queue_name, LeaseId, MessageId, PushConfig, QueueConfig,
    QueueConfigPatch, QueueInfo, QueueName, QueueStats, RetryPolicy, DEFAULT_PRIORITY,
    MESSAGE_ID_MAX_LEN, MESSAGE_ID_PATTERN, QUEUE_NAME_MAX_LEN, QUEUE_NAME_PATTERN,
    RESERVED_QUEUE_NAMES,
};
pub use pipeline::{PipelinedCall, PipelinedResult};
pub use recurring::{
    Catchup, FirePlan, FireTimes, MessageTemplate, Overlap, Recurrence, ScheduleDefinition,
    ScheduleId, ScheduleRecord, TZDB_VERSION,
};
