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
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Cheap to clone: both variants multiplex one connection (per node).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// One URL of a plain Redis: a single connection; several URLs, or one
    /// URL of a Cluster node: a Cluster connection seeded from them.
    pub(crate) async fn connect(
        urls: &[String],
        tls_ca: Option<&[u8]>,
    ) -> Result<Self, RedisBrokerError> {
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
            return Ok(Self::Single(manager));
        }
        Self::connect_cluster(urls, tls_ca).await
    }

    async fn connect_cluster(
        urls: &[String],
        tls_ca: Option<&[u8]>,
    ) -> Result<Self, RedisBrokerError> {
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
        Ok(Self::Cluster(client.get_async_connection().await?))
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
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
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
