//! The JSON bodies of delayd's HTTP API v1, as serde types shared by the
//! server, the client and the dashboard endpoints, so the three cannot
//! disagree about a field.
//!
//! These are wire types, not core types (the project's style principle 11):
//! the wire is a compatibility promise and the core model is free to
//! change, so this crate does not depend on `delayd-core`. The server and
//! the client's `HttpBroker` convert between the two explicitly.
//!
//! # Layout
//! - [`payload`]: [`Payload`], the `payload` (UTF-8) / `payload_base64`
//!   split, one type for requests and responses.
//! - [`queue`]: the `PUT /v1/queues/{queue}` body and the queue object.
//! - [`flow`]: flow control's `flow` object (as set and as shown) and the
//!   key view.
//! - [`message`]: enqueue (one, batch), the message object, `PATCH`.
//! - [`consume`]: lease, ack, batch ack, nack, extend.
//! - [`events`]: a message's history (its events, oldest first).
//! - [`dead`]: the redrive body and its answer.
//! - [`schedule`]: recurring schedules: the `PUT` body, the schedule object,
//!   the list, the preview.
//! - [`error`]: the error body, and the health/readiness status body.
//! - [`dashboard`]: the dashboard's histogram.
//! - [`access`]: `GET /v1/whoami`, what the request's token may do.
//! - `nullable`: readers that take an explicit `null` as "absent".
//!
//! # Compatibility rules
//! - Request bodies (`*Body`) deny unknown fields: a typo such as
//!   `dealy_ms` must be a 400, never "deliver now". They serialize only the
//!   fields that are set, so a client never sends what it did not mean.
//! - Responses ignore unknown fields: a client built against this version
//!   keeps working with a newer server that adds fields.
//! - Numbers are unsigned integers where api.md says integer, so serde
//!   itself refuses fractions, negatives and strings.
//! - With the `openapi` feature every type derives `utoipa::ToSchema`,
//!   under the schema names the server's OpenAPI document has always used.
//!
//! # Example
//! ```
//! use delayd_api::{EnqueueBody, Leased, LeasedList, Payload};
//!
//! // A client builds a request body; only the fields set are sent.
//! let body = EnqueueBody::new("hello").id("welcome:42").delay_ms(30_000);
//! let json = serde_json::to_value(&body).unwrap();
//! assert_eq!(
//!     json,
//!     serde_json::json!({"id": "welcome:42", "payload": "hello", "delay_ms": 30000})
//! );
//!
//! // The server reads it back strictly: an unknown field is an error.
//! let typo = serde_json::json!({"payload": "hello", "dealy_ms": 30000});
//! assert!(serde_json::from_value::<EnqueueBody>(typo).is_err());
//!
//! // A response with a field this version does not know still reads.
//! let answer = serde_json::json!({"messages": [{
//!     "id": "welcome:42", "seq": 7, "lease_id": "l1", "lease_until": 1000,
//!     "attempt": 1, "deliver_at": 900, "priority": 1024, "headers": {},
//!     "payload_base64": "/wA=", "added_later": true
//! }]});
//! let leased: LeasedList = serde_json::from_value(answer).unwrap();
//! let first: &Leased = &leased.messages[0];
//! assert_eq!(first.payload, Payload::Binary(vec![0xff, 0x00]));
//! ```

pub mod access;
pub mod consume;
pub mod dashboard;
pub mod dead;
pub mod error;
pub mod events;
pub mod flow;
pub mod message;
mod nullable;
pub mod payload;
pub mod queue;
pub mod schedule;

pub use access::Whoami;
pub use consume::{
    AckBody, AckItem, AckResult, AckResults, AcksBody, ExtendBody, Extended, LeaseBody, Leased,
    LeasedList, NackBody, DEFAULT_LEASE_MAX, DEFAULT_LEASE_WAIT_MS,
};
pub use dashboard::Histogram;
pub use dead::{RedriveBody, Redriven};
pub use error::{ErrorBody, ErrorDetail, Status};
pub use events::{Event, EventKind, History};
pub use flow::{FlowBody, FlowView, KeyInfo, RateBody, RateView};
pub use message::{
    BatchBody, BatchItemResult, BatchResults, EnqueueBody, Enqueued, Message, MessageList,
    OnConflict, PatchBody,
};
pub use payload::{encode_base64, Payload};
pub use queue::{
    PushBody, PushView, Queue, QueueConfig, QueueList, QueuePutBody, QueueStats, RetryBody,
    RetryPolicy, DEFAULT_RETRY_INITIAL_MS, DEFAULT_RETRY_MAX_MS, DEFAULT_RETRY_MULTIPLIER,
    MAX_RETAIN_MS,
};
pub use schedule::{
    CatchupMode, OverlapMode, Preview, PreviewBody, Schedule, ScheduleList, ScheduleMessage,
    ScheduleMessageBody, SchedulePutBody,
};
