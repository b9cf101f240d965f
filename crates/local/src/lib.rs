//! delayd's durable, embedded broker: [`LocalBroker`].
//!
//! # Layout
//! - [`config`]: [`LocalConfig`] and the [`Durability`] modes.
//! - `broker`: opening, recovery, the skeleton of every call (lock, change,
//!   commit, wait for fsync), shutdown.
//! - `api`: `impl Broker for LocalBroker`, argument checks.
//! - `state`: what is in memory (queues, the horizon's messages, ready
//!   sets, timers) and the place/unlink primitives every transition uses.
//! - `messages`, `consume`: the transitions (enqueue, cancel, reschedule,
//!   redrive, list; lease, ack, nack, bury, extend, lease expiry).
//! - `driver`: the task that fires timers and moves the horizon.
//! - `timers`: timers keyed by seq, on `delayd-wheel` with a monotonic clock.
//! - `store`, `codec`: fjall keyspaces, key and record encodings
//!   (specified in docs/storage.md).
//! - `sync`: the group-commit fsync thread.
//! - [`error`]: [`OpenError`], [`StoreError`].
//!
//! Architecture invariants: the store is written only under the state lock,
//! so commit order is state-change order; a call that changes state returns
//! only after its commit is as durable as [`Durability`] promises; a
//! scheduled message is in memory if and only if it is below the horizon
//! watermark; nothing fires before the injected wall clock reaches its
//! deadline.

#![forbid(unsafe_code)]

mod api;
mod broker;
mod codec;
pub mod config;
mod consume;
mod driver;
pub mod error;
mod lease;
mod messages;
mod state;
mod store;
mod sync;
mod timers;
mod waiters;

pub use broker::{LocalBroker, RecoveryReport, StoreStats};
pub use config::{Durability, LocalConfig};
pub use error::{OpenError, StoreError};
