//! An async, typed client of delayd's HTTP API (api.md v1).
//!
//! # Layout
//! - [`client`]: [`Client`], one method per endpoint (queues, enqueue and
//!   batch enqueue, get/events/cancel/reschedule, lease/ack/nack/defer/extend,
//!   flow keys, dead letters and redrive, health, readiness, metrics).
//! - [`schedules`]: [`Client`]'s recurring-schedule methods (put, get,
//!   list, delete, pause, resume, trigger, preview).
//! - [`wire`]: the JSON bodies: `delayd_api`'s types (shared with the
//!   server, so the two cannot disagree), under this crate's names. They
//!   are wire types, not `delayd-core`'s: the wire is a compatibility
//!   boundary, and a client must not move when the server's internals do.
//! - [`error`]: [`ClientError`], split by how a caller reacts (the server
//!   refused, the server is unreachable, the answer made no sense).
//! - `broker` (feature `broker`): [`HttpBroker`], the `delayd_core::Broker`
//!   trait over HTTP, so the conformance suite can run through a real server.
//!
//! HTTP/1.1 by default; [`Protocol::Http2`] (prior knowledge over
//! `http://`, ALPN over `https://`) carries many concurrent requests on one
//! connection.
//!
//! # Example
//! ```no_run
//! use delayd_client::{Client, LeaseOptions, NewMessage};
//!
//! # async fn demo() -> Result<(), delayd_client::ClientError> {
//! let client = Client::new("http://127.0.0.1:7070")?.with_token("secret");
//! let enqueued = client
//!     .enqueue("emails", &NewMessage::new("hello").delay_ms(30_000).id("welcome:42"))
//!     .await?;
//! println!("{} due at {}", enqueued.id, enqueued.deliver_at);
//!
//! let options = LeaseOptions { max: 10, wait_ms: 5_000, lease_ms: None };
//! for message in client.lease("emails", options).await? {
//!     println!("attempt {}: {:?}", message.attempt, message.payload.as_bytes());
//!     client.ack("emails", &message.id, &message.lease_id).await?;
//! }
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "broker")]
mod broker;
pub mod client;
pub mod error;
pub mod schedules;
pub mod wire;

#[cfg(feature = "broker")]
pub use broker::{HttpBroker, ShutdownHook};
pub use client::{Client, NackOptions, Protocol, PutQueue};
pub use delayd_api::Whoami;
pub use error::ClientError;
pub use schedules::PutSchedule;
pub use wire::{
    AckItem, Enqueued, ErrorDetail, Event, EventKind, FlowSpec, FlowView, History, KeyInfo,
    LeaseOptions, Leased, MessageView, NewMessage, OnConflict, Payload, PushSpec, PushView, Queue,
    QueueConfigView, QueuePut, QueueStats, RateSpec, RateView, Reschedule, Retry,
};
