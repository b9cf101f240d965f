//! Configuration of a [`crate::RedisBroker`] and the errors of connecting.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::{Clock, SystemClock};

/// Where and how a [`crate::RedisBroker`] keeps its state.
#[derive(Clone)]
pub struct RedisConfig {
    /// One URL (`redis://host:port[/db]`) selects a single Redis; several
    /// are the seed nodes of a Redis Cluster.
    pub urls: Vec<String>,
    /// Each queue is spread over this many shards (hash tags `{queue#k}`),
    /// so one queue's load can spread over cluster nodes. At least 1; every
    /// node of a deployment must use the same value.
    pub shards: u32,
    /// Prefix of every key and channel, so several deployments (or tests)
    /// can share one Redis. Must not contain `{` or `}` (hash tags).
    pub key_prefix: String,
    /// Wall clock for `deliver_at`, lease expiry and pauses.
    pub clock: Arc<dyn Clock>,
    /// PEM certificates of the CAs that `rediss://` servers are checked
    /// against, instead of the system's trust store (for a private CA).
    /// Ignored for `redis://` URLs.
    pub tls_ca: Option<Vec<u8>>,
    /// For tests on tokio's paused clock (virtual time) only: each Redis
    /// request and connect keeps tokio from auto-advancing time while it
    /// is in flight (one blocking task per request), so a round trip is
    /// not taken for idleness. Leave it `false` in production.
    pub virtual_time: bool,
    /// Acknowledge a write only once this many replicas have it (Redis
    /// `WAIT` after each call that may write). `None`: acknowledged when
    /// the primary has applied it, so a failover to a replica that had not
    /// received it yet loses it (docs/redis.md, "Replication and
    /// failover"). On a Cluster, each `WAIT` goes to the primary of the
    /// call's slot.
    pub wait_replicas: Option<ReplicaWait>,
}

/// How [`RedisConfig::wait_replicas`] waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaWait {
    /// Replicas that must have a write before it is acknowledged (>= 1).
    pub replicas: u32,
    /// How long one call waits for them. When they do not all confirm in
    /// time the call fails `Unavailable` with `maybe_applied` (the primary
    /// applied it; a retry of an enqueue with an id is idempotent). Keep it
    /// below the response timeout of 2 s.
    pub timeout: Duration,
}

impl RedisConfig {
    /// A single Redis at `url`, one shard per queue, prefix `delayd`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            urls: vec![url.into()],
            shards: 1,
            key_prefix: "delayd".into(),
            clock: Arc::new(SystemClock),
            tls_ca: None,
            virtual_time: false,
            wait_replicas: None,
        }
    }

    /// Parses `--store`'s value: one URL or a comma-separated list of
    /// cluster nodes.
    pub fn from_store_arg(store: &str) -> Self {
        let mut config = Self::new("");
        config.urls = store
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        config
    }

    pub(crate) fn validate(&self) -> Result<(), RedisBrokerError> {
        if self.urls.is_empty() {
            return Err(RedisBrokerError::InvalidConfig(
                "at least one Redis URL is needed".into(),
            ));
        }
        if self.shards == 0 {
            return Err(RedisBrokerError::InvalidConfig(
                "shards must be at least 1".into(),
            ));
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(RedisBrokerError::InvalidConfig(
                "key_prefix must be non-empty and contain no '{' or '}'".into(),
            ));
        }
        if let Some(wait) = self.wait_replicas {
            if wait.replicas == 0
                || wait.timeout.is_zero()
                || wait.timeout >= crate::conn::RESPONSE_TIMEOUT
            {
                return Err(RedisBrokerError::InvalidConfig(format!(
                    "wait_replicas needs at least 1 replica and a timeout above 0 and below \
                     the response timeout of {:?}",
                    crate::conn::RESPONSE_TIMEOUT
                )));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("urls", &self.urls)
            .field("shards", &self.shards)
            .field("key_prefix", &self.key_prefix)
            .field("tls_ca", &self.tls_ca.as_ref().map(|_| "<pem>"))
            .field("wait_replicas", &self.wait_replicas)
            .finish_non_exhaustive()
    }
}

/// Why [`crate::RedisBroker::connect`] failed. Once connected, failures are
/// `BrokerError::Unavailable` and the broker reconnects by itself.
#[derive(Debug, thiserror::Error)]
pub enum RedisBrokerError {
    #[error("invalid Redis configuration: {0}")]
    InvalidConfig(String),
    #[error("cannot connect to Redis: {0}")]
    Connect(#[from] redis::RedisError),
}
