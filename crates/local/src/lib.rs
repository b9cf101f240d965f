//! delayd's durable, embedded broker: [`LocalBroker`].
//!
//! # Layout
//! - [`config`]: [`LocalConfig`] and the [`Durability`] modes.
//! - `broker`: opening, the skeleton of every call (lock, change, join the
//!   open commit group, wait for its fsync), shutdown.
//! - `recover`: loading the disk into memory, one sequence for the open
//!   and for the sync thread's reopen after a failed write.
//! - `api`: `impl Broker for LocalBroker`, argument checks.
//! - `state`: what is in memory (queues, the horizon's messages, ready
//!   sets, timers) and the place/unlink primitives every transition uses.
//! - `lock`: the state lock, with its wait and hold times per call site
//!   (`delayd_state_lock_*_seconds`).
//! - `bounded_map`: the hash map of the in-memory indexes (messages by id,
//!   timers by seq, armed schedules), which resizes incrementally: no
//!   insert under the state lock moves the whole table.
//! - `messages`, `consume`: the transitions (enqueue, cancel, reschedule,
//!   redrive, list; lease, ack, nack, bury, extend, lease expiry); a
//!   lease's payloads are read after the state lock is released
//!   (`consume::Leased`).
//! - `pipeline`: a beanstalkd connection's pipelined calls in one lock
//!   hold (`Broker::pipeline_applied`).
//! - `flow`: flow control's memory (each key's parked ready messages, its
//!   holder, its timers) over core's gate.
//! - `settle`: where callers wait for their commit group (a table of
//!   wakers by ticket).
//! - `lease`, `waiters`: lease calls, and the hand-off that serves waiting
//!   lease calls per queue in arrival order (one ready message wakes one
//!   call).
//! - `schedules`, `fire`: recurring schedules (the calls, the index of
//!   armed schedules; firing a due one with core's `fire_step`: its
//!   messages and its advanced record in one commit group).
//! - `driver`: the task that fires timers and moves the horizon, and
//!   `catch_up`, the same firing at a call's own `now` before the call
//!   acts (time settled at the call; waking waiters stays the driver's).
//! - `timers`: timers keyed by seq, on `delayd-wheel` with a monotonic clock.
//! - `store`, `codec`, `schedule_codec`: fjall keyspaces, key and record
//!   encodings (specified in docs/storage.md).
//! - `group`: the open commit group and the group in flight, as memory
//!   sees them (the part of the state the sync thread closes).
//! - `sync`: the sync thread, which writes each commit group to the engine
//!   as one batch and fsyncs it.
//! - `prezero`: zeros written ahead of the journal's writer, so that a
//!   group's `fdatasync` writes data, not block allocations.
//! - `disk`: the free-space reserve below which enqueues are refused.
//! - `fault`: the fault-injection seam of the tests (feature
//!   `fault-injection`).
//! - [`check`]: finding damaged journal batches, table and version files
//!   and records (`delayd check`; open runs its cheap part).
//! - [`error`]: [`OpenError`], [`StoreError`].
//!
//! Architecture invariants: the store is written only in whole commit
//! groups closed under the state lock (by the sync thread, or the open
//! group flushed before a scan), one writer at a time behind the engine
//! write lock, so commit order is state-change order; every write is in the
//! open group, the group in flight or the engine, and reads look there in
//! that order; a call that changes state returns
//! only after its commit is as durable as [`Durability`] promises; a
//! scheduled message is in memory if and only if it is below the horizon
//! watermark; nothing fires before the injected wall clock reaches its
//! deadline; a schedule's fired messages and its advanced record join the
//! open group in one absorb, so they are durable together or not at all;
//! schedules are never polled or scanned to fire, each armed one has one
//! timer at its cursor.

//! # Example
//!
//! Open a store, enqueue a message due in 50 ms, lease it when it is due
//! (waiting up to a second), ack it:
//!
//! ```
//! use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule};
//! use delayd_local::{LocalBroker, LocalConfig};
//!
//! # tokio::runtime::Runtime::new().expect("runtime").block_on(async {
//! let dir = tempfile::tempdir().expect("a temporary directory");
//! let broker = LocalBroker::open(LocalConfig::new(dir.path())).await.expect("open");
//! let queue = QueueName::new("sessions").expect("a valid name");
//! let request = EnqueueRequest {
//!     schedule: Schedule::Delay(50),
//!     payload: b"expire session 7".to_vec(),
//!     ..EnqueueRequest::default()
//! };
//! // Answered once the message is durable (fsynced with the default durability).
//! let outcome = broker.enqueue(&queue, vec![request], EnqueueOptions::default()).await.expect("enqueue");
//! let id = outcome[0].as_ref().expect("stored").id.clone();
//! let wait = LeaseRequest { max: 10, wait_ms: 1_000, lease_ms: None };
//! let delivery = broker.lease(&[queue.clone()], wait).await.expect("lease").remove(0);
//! assert_eq!(delivery.id, id);
//! broker.ack(&queue, &delivery.id, &delivery.lease_id).await.expect("ack");
//! broker.shutdown().await.expect("shutdown");
//! # });
//! ```

mod api;
#[doc(hidden)]
pub mod bounded_map;
mod broker;
pub mod check;
mod codec;
pub mod config;
mod consume;
mod disk;
mod driver;
pub mod error;
mod fault;
mod fire;
mod flow;
mod group;
mod history;
mod lease;
mod lock;
mod messages;
mod pipeline;
mod prezero;
mod recover;
mod replace;
mod retain;
mod schedule_codec;
mod schedules;
mod settle;
mod state;
mod store;
mod sync;
mod timers;
mod waiters;

pub use broker::{LocalBroker, RecoveryReport, StoreStats};
pub use check::{CheckReport, FileKind, Finding, Severity};
pub use config::{Durability, LocalConfig};
pub use error::{OpenError, StoreError};
#[cfg(any(test, feature = "fault-injection"))]
pub use fault::FaultPlan;
