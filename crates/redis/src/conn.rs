//! One connection type over single Redis and Redis Cluster, both of which
//! reconnect by themselves, and the mapping of Redis errors to
//! `BrokerError::Unavailable`.

use std::time::Duration;

use delayd_core::BrokerError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::config::RedisBrokerError;

/// How long one command may take before the call fails `Unavailable`.
/// Short, so a dead Redis is reported quickly instead of hanging requests.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Cheap to clone: both kinds multiplex one connection (per node).
#[derive(Clone)]
pub(crate) struct Conn {
    kind: Kind,
    /// `RedisConfig::virtual_time`: hold tokio's paused clock while a
    /// request is in flight.
    hold_time: bool,
}

#[derive(Clone)]
enum Kind {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Keeps a paused tokio clock (a test on virtual time) from jumping ahead
/// while it lives: a running blocking task inhibits auto-advance, so a
/// Redis round trip is not mistaken for idleness that lets the response
/// timeout (or a case's wait) elapse. The task ends when this is dropped.
pub(crate) struct TimeHold {
    /// Dropping it ends the blocking task.
    _release: Option<std::sync::mpsc::Sender<()>>,
}

impl TimeHold {
    pub(crate) fn new(hold: bool) -> Self {
        if !hold {
            return Self { _release: None };
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            // Returns when the sender is dropped.
            let _ = rx.recv();
        });
        Self { _release: Some(tx) }
    }
}

impl Conn {
    /// One URL of a plain Redis: a single connection; several URLs, or one
    /// URL of a Cluster node: a Cluster connection seeded from them.
    pub(crate) async fn connect(
        urls: &[String],
        tls_ca: Option<&[u8]>,
        hold_time: bool,
    ) -> Result<Self, RedisBrokerError> {
        let _hold = TimeHold::new(hold_time);
        let kind = Self::connect_kind(urls, tls_ca).await?;
        Ok(Self { kind, hold_time })
    }

    async fn connect_kind(
        urls: &[String],
        tls_ca: Option<&[u8]>,
    ) -> Result<Kind, RedisBrokerError> {
        if let [url] = urls {
            let client = client(url, tls_ca)?;
            if is_cluster_node(&client).await? {
                return Self::connect_cluster(urls, tls_ca).await;
            }
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(200));
            let manager = ConnectionManager::new_with_config(client, config).await?;
            return Ok(Kind::Single(manager));
        }
        Self::connect_cluster(urls, tls_ca).await
    }

    async fn connect_cluster(
        urls: &[String],
        tls_ca: Option<&[u8]>,
    ) -> Result<Kind, RedisBrokerError> {
        let tls = urls.iter().any(|url| is_tls(url));
        if tls {
            install_crypto_provider();
        }
        let mut builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .retries(2);
        if let (true, Some(ca)) = (tls, tls_ca) {
            builder = builder.certs(certificates(ca));
        }
        let client = builder.build()?;
        Ok(Kind::Cluster(client.get_async_connection().await?))
    }
}

/// A client of one Redis. A `rediss://` URL is checked against `tls_ca`
/// (PEM) when given, else against the system's trust store.
pub(crate) fn client(url: &str, tls_ca: Option<&[u8]>) -> redis::RedisResult<redis::Client> {
    if !is_tls(url) {
        return redis::Client::open(url);
    }
    install_crypto_provider();
    match tls_ca {
        Some(ca) => redis::Client::build_with_tls(url, certificates(ca)),
        None => redis::Client::open(url),
    }
}

fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

fn certificates(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// The redis crate builds its rustls configuration from the process-wide
/// crypto provider, which rustls cannot pick by itself when more than one
/// is compiled in. Installs ring unless the process already chose one
/// (then that one is used: the error only says a provider exists).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn is_cluster_node(client: &redis::Client) -> Result<bool, RedisBrokerError> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await?;
    Ok(info.contains("cluster_enabled:1"))
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let hold = TimeHold::new(self.hold_time);
        let request = match &mut self.kind {
            Kind::Single(c) => c.req_packed_command(cmd),
            Kind::Cluster(c) => c.req_packed_command(cmd),
        };
        Box::pin(async move {
            let answer = request.await;
            drop(hold);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let hold = TimeHold::new(self.hold_time);
        let request = match &mut self.kind {
            Kind::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Kind::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        };
        Box::pin(async move {
            let answer = request.await;
            drop(hold);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        match &self.kind {
            Kind::Single(c) => c.get_db(),
            Kind::Cluster(c) => c.get_db(),
        }
    }
}

/// A failed Redis call. `write` says whether the call could have changed
/// state: then a failure seen after sending may have been applied.
pub(crate) fn unavailable(err: &redis::RedisError, write: bool) -> BrokerError {
    tracing::warn!(error = %err, "redis call failed");
    BrokerError::Unavailable {
        reason: format!("redis: {err}"),
        maybe_applied: write && !err.is_connection_refusal(),
    }
}
