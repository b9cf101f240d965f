//! `delayd serve` options: every option of api.md's "Starting the server",
//! settable by flag, `DELAYD_<NAME>` environment variable, or a TOML file
//! (`--config`, keys are the long option names with `_` for `-`), in that
//! precedence, then defaults.
//!
//! Settings belong to the store they configure (`StoreConfig`): one given
//! for the other store is an error naming it.
//!
//! - this file: the flags ([`ServeArgs`], also the one list of option keys
//!   for the environment and the file) and the resolved [`ServeConfig`];
//! - `layers`: the raw values of each source (flags, env, file), kept as
//!   strings so that every source goes through the same parsers and an
//!   error names its source;
//! - `build`: parsing, defaults and the store's settings. Durations and
//!   sizes use the CLI's one parser (`crate::duration`).
//!
//! This lives in the binary, which owns the process, rather than in the HTTP
//! crate: the result picks a store (`delayd_local` or `delayd_redis`), the
//! beanstalkd address and the horizon, none of which the HTTP API knows of;
//! the API only gets the ready-made [`ServerOptions`].

mod build;
mod layers;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use delayd_local::Durability;
use delayd_server::{ConnectionLimits, ServerOptions};

/// The flags of `delayd serve`. Every field is optional so that an absent
/// flag can fall through to the environment, the file and the defaults.
/// Its serde field names are the option keys of `DELAYD_<KEY>` and of the
/// file (see `layers`).
#[derive(clap::Args, serde::Serialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ServeArgs {
    /// HTTP listen address [default: 127.0.0.1:7070].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// beanstalkd protocol listen address, or `off` [default: 127.0.0.1:11300].
    #[arg(long, value_name = "ADDR|off")]
    pub beanstalk: Option<String>,
    /// Directory of the embedded store [default: ./delayd-data].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// `redis://HOST:PORT[/DB]` (or a comma-separated list of cluster
    /// nodes): use the Redis backend instead of the embedded store;
    /// `rediss://` for TLS.
    #[arg(long, value_name = "URL[,URL...]")]
    pub store: Option<String>,
    /// PEM file of the CA(s) that `rediss://` servers are checked against,
    /// instead of the system's trust store.
    #[arg(long, value_name = "FILE")]
    pub redis_tls_ca: Option<PathBuf>,
    /// Redis replicas that must have each write before delayd answers
    /// (`WAIT`; nothing acknowledged is lost when the primary fails over);
    /// not with Redis Cluster [default: none].
    #[arg(long, value_name = "N")]
    pub redis_wait_replicas: Option<String>,
    /// How long a call waits for `--redis-wait-replicas` before it fails
    /// 503 (below 2s) [default: 500ms].
    #[arg(long, value_name = "DURATION")]
    pub redis_wait_timeout: Option<String>,
    /// `always` (fsync every group commit), `interval` or `never`
    /// [default: always].
    #[arg(long, value_name = "MODE")]
    pub durability: Option<String>,
    /// With `--durability interval`: how often to fsync [default: 50ms].
    #[arg(long, value_name = "DURATION")]
    pub durability_interval: Option<String>,
    /// Enables bearer-token auth (repeatable); each such token has full
    /// access.
    #[arg(long, value_name = "TOKEN")]
    pub token: Vec<String>,
    /// TOML file of scoped tokens (`[[token]]` tables with `name`,
    /// `sha256` and `scopes`); read again on SIGHUP. Enables auth.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve the beanstalkd protocol, which has no authentication, beyond
    /// loopback even though tokens protect HTTP.
    #[arg(long)]
    pub beanstalk_unauthenticated: bool,
    /// Largest payload: bytes or with a unit (`1MiB`) [default: 1MiB].
    #[arg(long, value_name = "SIZE")]
    pub max_payload: Option<String>,
    /// Largest HTTP request body [default: 64MiB].
    #[arg(long, value_name = "SIZE")]
    pub max_body: Option<String>,
    /// Longest delay (`3650d`, `48h`, `30s`, `250ms`) [default: 3650d].
    #[arg(long, value_name = "DURATION")]
    pub max_delay: Option<String>,
    /// Enqueue to an unknown queue is 404 instead of creating it.
    #[arg(long)]
    pub no_auto_create: bool,
    /// Allowed push target, CIDR or host name (repeatable); none by default.
    #[arg(long, value_name = "CIDR|HOST")]
    pub push_allow: Vec<String>,
    /// How far ahead the embedded store keeps messages in memory
    /// [default: the store's].
    #[arg(long, value_name = "DURATION")]
    pub horizon: Option<String>,
    /// Free space the embedded store's filesystem keeps: below it enqueues
    /// get 507 `insufficient_storage` while acks and deletes still work;
    /// `0` turns the check off [default: 64MiB].
    #[arg(long, value_name = "SIZE")]
    pub disk_reserve: Option<String>,
    /// The embedded store's block cache (serves payload reads at delivery;
    /// most of the server's memory beyond the near-term messages)
    /// [default: 64MiB].
    #[arg(long, value_name = "SIZE")]
    pub cache_size: Option<String>,
    /// Whether the embedded store keeps each message's history (`GET
    /// .../events`): `on` or `off` (no event is written; the history
    /// answered is empty) [default: on].
    #[arg(long, value_name = "on|off")]
    pub message_history: Option<String>,
    /// Most open client connections, HTTP and beanstalkd together (split
    /// evenly when both listen) [default: from the file-descriptor limit].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<String>,
    /// Time a client has to send a request head once it started one, and
    /// for a TLS handshake [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub http_header_timeout: Option<String>,
    /// An HTTP connection with no request in progress is closed after this
    /// long [default: 60s].
    #[arg(long, value_name = "DURATION")]
    pub http_idle_timeout: Option<String>,
    /// Time a request body may take, plus a second per
    /// `--http-body-min-rate` bytes received; slower bodies get 408 and
    /// their connection closed [default: 20s].
    #[arg(long, value_name = "DURATION")]
    pub http_body_timeout: Option<String>,
    /// Bytes per second of request body that each earn a second beyond
    /// `--http-body-timeout`; 0: none do [default: 500].
    #[arg(long, value_name = "BYTES")]
    pub http_body_min_rate: Option<String>,
    /// PEM certificate chain: serve HTTPS (with `--tls-key`).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// TOML file with any of these options.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The resolved configuration of `delayd serve`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    pub http: SocketAddr,
    /// `None`: the beanstalkd listener is off.
    pub beanstalk: Option<SocketAddr>,
    pub store: StoreConfig,
    /// The HTTP API's options (tokens, limits, auto-create, push allowlist).
    pub options: ServerOptions,
    /// The push allowlist again, for the push dispatcher.
    pub push_allow: Vec<String>,
    /// The HTTP listener's connection limit (its share of
    /// `--max-connections`) and timeouts.
    pub http_limits: ConnectionLimits,
    /// The beanstalkd listener's share of `--max-connections`.
    pub beanstalk_max_connections: usize,
    /// `--max-connections`: both listeners' connections together never
    /// exceed it (each share is at least 1, so a budget of 1 is shared).
    pub max_connections: usize,
    /// `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// `--token-file`, read again on SIGHUP; its tokens at start are in
    /// `options.scoped_tokens`.
    pub token_file: Option<PathBuf>,
}

/// `--tls-cert` and `--tls-key`, read when the server starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreConfig {
    Local {
        data_dir: PathBuf,
        durability: Durability,
        /// The in-memory horizon; `None`: the store's default.
        horizon: Option<Duration>,
        /// The free-space reserve, bytes.
        disk_reserve: u64,
        /// The block cache, bytes.
        cache_size: usize,
        /// `--message-history`: messages keep their history.
        history: bool,
    },
    Redis {
        /// Split by `delayd_redis::RedisConfig::from_store_arg`.
        urls: Vec<String>,
        /// `--redis-tls-ca`: trusted CAs for `rediss://` (PEM file).
        tls_ca: Option<PathBuf>,
        /// `--redis-wait-replicas` and `--redis-wait-timeout`.
        wait: Option<delayd_redis::ReplicaWait>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{key} = {value:?} (from {origin}): {reason}")]
    Invalid {
        key: &'static str,
        value: String,
        origin: Source,
        reason: String,
    },
    #[error("cannot read config file {path}: {error}")]
    ReadFile {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("token file {path}: {reason}")]
    TokenFile { path: PathBuf, reason: String },
    #[error("{0}")]
    Conflict(String),
    #[error("--{} (from {origin}) applies only to {store}", key.replace('_', "-"))]
    OtherStore {
        key: &'static str,
        origin: Source,
        store: &'static str,
    },
}

/// Where a value came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Flag => "command line",
            Self::Env => "environment",
            Self::File => "config file",
            Self::Default => "default",
        })
    }
}

impl ServeConfig {
    /// Resolves flags, then `env` (pass `std::env::vars()`), then the
    /// `--config` file, then defaults.
    pub fn resolve<I, K, V>(args: &ServeArgs, env: I) -> Result<ServeConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        build::build(&layers::Layers::read(args, env)?)
    }
}

/// `resolve` with the process environment, for convenience in binaries.
pub fn resolve_from_process(args: &ServeArgs) -> Result<ServeConfig, ConfigError> {
    let env: HashMap<String, String> = std::env::vars().collect();
    ServeConfig::resolve(args, env)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
