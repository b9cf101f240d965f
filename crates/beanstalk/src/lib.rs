//! A beanstalkd-protocol listener over delayd's [`Broker`](delayd_core::Broker):
//! existing beanstalkd clients and workers talk to delayd unchanged.
//!
//! # Layout
//! - [`proto`]: the wire format, client to server: [`parse`] (a pure
//!   function over bytes, fuzzed and property-tested) and the [`Decoder`]
//!   that adds the discard state for oversized bodies and overlong lines.
//! - `reply`: server-to-client frames and YAML documents.
//! - `server`: [`BeanstalkServer`] (bind, accept loop with its connection
//!   limit, shutdown), [`BeanstalkHandle`] (drain mode), and each
//!   connection's read-decode-execute-write loop.
//! - `shared`: what the command handlers build on: [`BeanstalkConfig`],
//!   the state all connections share, one connection's state (`Session`:
//!   used tube, watch list, reserved jobs) and the broker-error replies.
//!   The handler files below add methods to `Session` and import from
//!   here (and `proto`, `reply`, `tubes`, `stats`); the one exception is
//!   `pipeline`, which builds a pipelined put's request with `put::request`
//!   (the same parse as a single `put`).
//! - `session`: command dispatch and the tube commands.
//! - `put`: `put`, batching a pipelined run of them into one broker call.
//! - `pipeline`: a connection's pipelined puts, reserves and commands on
//!   held jobs as one `Broker::pipeline` call (one durable commit per
//!   burst); replies as if run one by one.
//! - `jobs`: worker commands (`reserve` and its waiting, `delete`,
//!   `release`, `bury`, `touch`, `reserve-job`).
//! - `inspect`: `peek*`, `kick*`, `stats*`, `list-tubes`, `pause-tube`.
//! - `tubes`: tube-to-queue names and per-tube connection counts.
//! - `stats`: counters and the `stats`/`stats-job`/`stats-tube` documents
//!   with beanstalkd 1.13's keys; the metric names this crate records.
//!
//! The mapping to broker operations, and where delayd differs from
//! beanstalkd, is written down in docs/beanstalk.md.
//!
//! Architecture invariant: the listener keeps no job state of its own
//! beyond which leases each connection holds; every job lives in the
//! broker, so HTTP and beanstalkd clients see the same jobs.

//! # Example
//!
//! Serve the beanstalkd protocol over any broker (here the reference
//! model; `delayd serve` passes its LocalBroker or RedisBroker):
//!
//! ```
//! use std::sync::Arc;
//! use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
//! use delayd_core::testkit::ModelBroker;
//!
//! # tokio::runtime::Runtime::new().expect("runtime").block_on(async {
//! let addr = "127.0.0.1:0".parse().expect("an address");
//! let server = BeanstalkServer::bind(addr, Arc::new(ModelBroker::new()), BeanstalkConfig::default())
//!     .await
//!     .expect("bind");
//! println!("beanstalkd clients connect to {}", server.local_addr());
//! // Serves until the future completes (e.g. on SIGTERM), then drains.
//! server.run(async {}).await;
//! # });
//! ```

mod inspect;
mod jobs;
mod pipeline;
pub mod proto;
mod put;
mod reply;
mod server;
mod session;
mod shared;
mod stats;
mod tubes;

pub use proto::{parse, Command, Decoder, Frame, ProtoError};
pub use server::{BeanstalkHandle, BeanstalkServer};
pub use shared::{create_queue, BeanstalkConfig};
pub use stats::{COMMANDS_TOTAL, CONNECTIONS, CONNECTIONS_REFUSED_TOTAL, MAX_CONNECTIONS};
