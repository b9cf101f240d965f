//! Push delivery: delayd POSTs due messages of queues that have a `push`
//! config to their webhook (api.md, "Push delivery").
//!
//! # Layout
//! - [`dispatcher`]: [`PushDispatcher`] and [`PushOptions`]: the pooled HTTP
//!   client, the discovery loop that keeps one worker per push queue, and
//!   shutdown.
//! - `worker`: one queue's loop: lease as many due messages as there are
//!   free concurrency permits, run each delivery as a task, ack on 2xx and
//!   nack otherwise (honouring `Retry-After`).
//! - `deliver`: one request: body, `delayd-*` headers, signature, and the
//!   classification of the answer.
//! - [`credentials`]: push credentials: the target's `headers` (checked and
//!   turned into a header map) and the refusal of user info in URLs.
//! - [`policy`]: [`PushPolicy`], the `--push-allow` allowlist, checked at
//!   configuration ([`PushPolicy::check_url`]) and after DNS resolution.
//! - `resolver`: the HTTP client's resolver, which applies the policy so
//!   that the client connects only to checked addresses.
//! - [`signature`]: [`sign`] and [`verify_signature`] for
//!   `delayd-signature` (receivers use `verify_signature`).
//! - [`metric`]: metric names.
//!
//! Deliveries go through the broker's leases like pull consumers, so an
//! unacked push (crash, timeout) is delivered again once its lease expires:
//! at least once, never lost. See docs/push.md.

//! # Example
//!
//! Start the dispatcher over a broker; it delivers every queue whose config
//! has a `push` target allowed by the policy, until the token is cancelled:
//!
//! ```
//! use std::sync::Arc;
//! use delayd_core::testkit::ModelBroker;
//! use delayd_push::{PushDispatcher, PushOptions, PushPolicy};
//! use tokio_util::sync::CancellationToken;
//!
//! # tokio::runtime::Runtime::new().expect("runtime").block_on(async {
//! let policy = PushPolicy::new(&["10.0.0.0/8".to_string()]).expect("a valid allowlist");
//! let shutdown = CancellationToken::new();
//! let dispatcher = PushDispatcher::start(
//!     Arc::new(ModelBroker::new()),
//!     Arc::new(policy),
//!     PushOptions::default(),
//!     shutdown.clone(),
//! );
//! shutdown.cancel(); // e.g. on SIGTERM: in-flight requests finish first
//! dispatcher.join().await;
//! # });
//! ```

pub mod credentials;
mod deliver;
pub mod dispatcher;
pub mod metric;
pub mod policy;
mod resolver;
pub mod signature;
mod worker;

pub use dispatcher::{ClientError, PushDispatcher, PushOptions};
pub use policy::{PolicyError, PushPolicy};
pub use signature::{sign, verify_signature};
