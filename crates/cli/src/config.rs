//! `delayd serve` options: every option of api.md's "Starting the server",
//! settable by flag, `DELAYD_<NAME>` environment variable, or a TOML file
//! (`--config`, keys are the long option names with `_` for `-`), in that
//! precedence, then defaults.
//!
//! Values from every source go through the same parsers as strings, so a bad
//! value gets the same error wherever it came from, and the error names the
//! source. Durations and sizes use the CLI's one parser (`crate::duration`).
//!
//! This lives in the binary, which owns the process, rather than in the HTTP
//! crate: the result picks a store (`delayd_local` or `delayd_redis`), the
//! beanstalkd address and the horizon, none of which the HTTP API knows of;
//! the API only gets the ready-made [`ServerOptions`].

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use delayd_local::{Durability, LocalConfig};
use delayd_server::{
    ConnectionLimits, ServerOptions, DEFAULT_BODY_MIN_RATE, DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
};

use crate::duration::{parse_duration, parse_size};

const DEFAULT_HTTP: &str = "127.0.0.1:7070";
const DEFAULT_BEANSTALK: &str = "127.0.0.1:11300";
const DEFAULT_DATA: &str = "./delayd-data";
const DEFAULT_DURABILITY_INTERVAL: &str = "50ms";

/// The flags of `delayd serve`. Every field is optional so that an absent
/// flag can fall through to the environment, the file and the defaults.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
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
    /// `always` (fsync every group commit), `interval` or `never`
    /// [default: always].
    #[arg(long, value_name = "MODE")]
    pub durability: Option<String>,
    /// With `--durability interval`: how often to fsync [default: 50ms].
    #[arg(long, value_name = "DURATION")]
    pub durability_interval: Option<String>,
    /// Enables bearer-token auth (repeatable).
    #[arg(long, value_name = "TOKEN")]
    pub token: Vec<String>,
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
    /// The embedded store's in-memory horizon; `None`: its default.
    pub horizon: Option<Duration>,
    /// The embedded store's free-space reserve, bytes.
    pub disk_reserve: u64,
    /// The embedded store's block cache, bytes.
    pub cache_size: usize,
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
    },
    Redis {
        urls: Vec<String>,
        /// `--redis-tls-ca`: trusted CAs for `rediss://` (PEM file).
        tls_ca: Option<PathBuf>,
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
    #[error("{0}")]
    Conflict(String),
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

/// Every option's key (the long name with `_`), for the env and the file.
const KEYS: &[&str] = &[
    "http",
    "beanstalk",
    "data",
    "store",
    "redis_tls_ca",
    "durability",
    "durability_interval",
    "token",
    "max_payload",
    "max_body",
    "max_delay",
    "no_auto_create",
    "push_allow",
    "horizon",
    "disk_reserve",
    "cache_size",
    "max_connections",
    "http_header_timeout",
    "http_idle_timeout",
    "http_body_timeout",
    "http_body_min_rate",
    "tls_cert",
    "tls_key",
    "config",
];

/// The layers of raw values, looked up in precedence order.
struct Layers {
    flags: BTreeMap<&'static str, Vec<String>>,
    env: BTreeMap<&'static str, Vec<String>>,
    file: BTreeMap<&'static str, Vec<String>>,
}

impl Layers {
    /// The first layer that sets `key`, with its values.
    fn get(&self, key: &'static str) -> Option<(Source, &[String])> {
        [
            (Source::Flag, &self.flags),
            (Source::Env, &self.env),
            (Source::File, &self.file),
        ]
        .into_iter()
        .find_map(|(source, layer)| layer.get(key).map(|v| (source, v.as_slice())))
    }

    fn one(&self, key: &'static str) -> Option<(Source, String)> {
        self.get(key)
            .and_then(|(source, values)| values.first().map(|v| (source, v.clone())))
    }

    /// Parses `key` (or its default) with `parse`, naming the source on error.
    fn parse<T>(
        &self,
        key: &'static str,
        default: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let (source, value) = self
            .one(key)
            .unwrap_or((Source::Default, default.to_owned()));
        parse(&value).map_err(|reason| ConfigError::Invalid {
            key,
            value,
            origin: source,
            reason,
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
        let flags = flag_layer(args);
        let env = env_layer(env);
        let config_path = flags
            .get("config")
            .or_else(|| env.get("config"))
            .and_then(|v| v.first())
            .map(PathBuf::from);
        let file = match config_path {
            Some(path) => file_layer(&path)?,
            None => BTreeMap::new(),
        };
        build(&Layers { flags, env, file })
    }
}

fn flag_layer(args: &ServeArgs) -> BTreeMap<&'static str, Vec<String>> {
    let mut layer = BTreeMap::new();
    let mut put = |key: &'static str, value: Option<String>| {
        if let Some(value) = value {
            layer.insert(key, vec![value]);
        }
    };
    put("http", args.http.clone());
    put("beanstalk", args.beanstalk.clone());
    put("data", args.data.as_ref().map(|p| p.display().to_string()));
    put("store", args.store.clone());
    put(
        "redis_tls_ca",
        args.redis_tls_ca.as_ref().map(|p| p.display().to_string()),
    );
    put("durability", args.durability.clone());
    put("durability_interval", args.durability_interval.clone());
    put("max_payload", args.max_payload.clone());
    put("max_body", args.max_body.clone());
    put("max_delay", args.max_delay.clone());
    put("horizon", args.horizon.clone());
    put("disk_reserve", args.disk_reserve.clone());
    put("cache_size", args.cache_size.clone());
    put("max_connections", args.max_connections.clone());
    put("http_header_timeout", args.http_header_timeout.clone());
    put("http_idle_timeout", args.http_idle_timeout.clone());
    put("http_body_timeout", args.http_body_timeout.clone());
    put("http_body_min_rate", args.http_body_min_rate.clone());
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    put("tls_cert", path(&args.tls_cert));
    put("tls_key", path(&args.tls_key));
    put(
        "config",
        args.config.as_ref().map(|p| p.display().to_string()),
    );
    put("no_auto_create", args.no_auto_create.then(|| "true".into()));
    if !args.token.is_empty() {
        layer.insert("token", args.token.clone());
    }
    if !args.push_allow.is_empty() {
        layer.insert("push_allow", args.push_allow.clone());
    }
    layer
}

/// Lists (`DELAYD_TOKEN`, `DELAYD_PUSH_ALLOW`) are comma-separated.
fn env_layer<I, K, V>(env: I) -> BTreeMap<&'static str, Vec<String>>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut layer = BTreeMap::new();
    for (name, value) in env {
        let Some(suffix) = name.as_ref().strip_prefix("DELAYD_") else {
            continue;
        };
        let lower = suffix.to_ascii_lowercase();
        let Some(key) = KEYS.iter().copied().find(|k| *k == lower) else {
            continue;
        };
        let value = value.as_ref();
        let values = if is_list(key) {
            split_list(value)
        } else {
            vec![value.to_owned()]
        };
        layer.insert(key, values);
    }
    layer
}

fn is_list(key: &str) -> bool {
    matches!(key, "token" | "push_allow")
}

fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn file_layer(path: &PathBuf) -> Result<BTreeMap<&'static str, Vec<String>>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::ReadFile {
        path: path.clone(),
        error,
    })?;
    let file_error = |reason: String| ConfigError::File {
        path: path.clone(),
        reason,
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| file_error(e.to_string()))?;
    let mut layer = BTreeMap::new();
    for (name, value) in table {
        let key = KEYS
            .iter()
            .copied()
            .find(|k| *k == name && *k != "config")
            .ok_or_else(|| file_error(format!("unknown key {name:?}")))?;
        let values =
            toml_values(&value).map_err(|reason| file_error(format!("{name}: {reason}")))?;
        if values.len() > 1 && !is_list(key) {
            return Err(file_error(format!("{name}: takes one value, not a list")));
        }
        layer.insert(key, values);
    }
    Ok(layer)
}

fn toml_values(value: &toml::Value) -> Result<Vec<String>, String> {
    match value {
        toml::Value::String(s) => Ok(vec![s.clone()]),
        toml::Value::Integer(i) => Ok(vec![i.to_string()]),
        toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
        toml::Value::Array(items) => items
            .iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(s.clone()),
                other => Err(format!("list items must be strings, got {other}")),
            })
            .collect(),
        other => Err(format!("unsupported value {other}")),
    }
}

fn build(layers: &Layers) -> Result<ServeConfig, ConfigError> {
    let http = layers.parse("http", DEFAULT_HTTP, parse_addr)?;
    let beanstalk = layers.parse("beanstalk", DEFAULT_BEANSTALK, |v| {
        if v.eq_ignore_ascii_case("off") {
            Ok(None)
        } else {
            parse_addr(v).map(Some)
        }
    })?;
    let store = store(layers)?;
    let to_usize = |v: &str| {
        parse_size(v).and_then(|n| usize::try_from(n).map_err(|_| "too large".to_owned()))
    };
    let max_payload = layers.parse("max_payload", "1MiB", to_usize)?;
    let max_body = layers.parse("max_body", "64MiB", to_usize)?;
    let max_delay = layers.parse("max_delay", "3650d", parse_duration)?;
    let no_auto_create = layers.parse("no_auto_create", "false", parse_bool)?;
    let horizon = match layers.one("horizon") {
        Some(_) => Some(layers.parse("horizon", "", parse_duration)?),
        None => None,
    };
    // Defaults from the store's own constants (written in bytes).
    let disk_reserve = layers.parse(
        "disk_reserve",
        &LocalConfig::DEFAULT_DISK_RESERVE.to_string(),
        parse_size,
    )?;
    let cache_size = layers.parse(
        "cache_size",
        &LocalConfig::DEFAULT_PAYLOAD_CACHE_BYTES.to_string(),
        to_usize,
    )?;
    let tokens = list(layers, "token");
    let push_allow = list(layers, "push_allow");
    if let Err(reason) = delayd_push::PushPolicy::new(&push_allow).map_err(|e| e.to_string()) {
        return Err(ConfigError::Conflict(reason));
    }
    let connections = connections(layers, beanstalk.is_some())?;
    let options = ServerOptions {
        tokens,
        max_payload,
        max_body,
        max_delay_ms: u64::try_from(max_delay.as_millis()).unwrap_or(u64::MAX),
        auto_create: !no_auto_create,
        push_allow: push_allow.clone(),
        ..ServerOptions::default()
    };
    Ok(ServeConfig {
        http,
        beanstalk,
        store,
        options,
        push_allow,
        horizon,
        disk_reserve,
        cache_size,
        http_limits: connections.http,
        beanstalk_max_connections: connections.beanstalk,
        max_connections: connections.budget,
        tls: tls_files(layers)?,
    })
}

struct Connections {
    http: ConnectionLimits,
    beanstalk: usize,
    budget: usize,
}

/// `--max-connections` and the HTTP timeouts. The budget is split evenly
/// between the listeners: each is protected from a flood on the other
/// (beanstalkd clients keep idle connections on purpose, so the beanstalkd
/// listener cannot make room by closing idle ones as HTTP does).
fn connections(layers: &Layers, beanstalk_on: bool) -> Result<Connections, ConfigError> {
    let default_budget = crate::fd_limit::default_max_connections().to_string();
    let budget = layers.parse("max_connections", &default_budget, |v| {
        match v.trim().parse::<usize>() {
            Ok(0) | Err(_) => Err("expected a positive whole number".to_owned()),
            Ok(n) => Ok(n),
        }
    })?;
    let positive = |v: &str| {
        parse_duration(v).and_then(|d| {
            if d.is_zero() {
                Err("must be longer than zero".to_owned())
            } else {
                Ok(d)
            }
        })
    };
    let seconds = |d: Duration| format!("{}s", d.as_secs());
    let header_timeout = layers.parse(
        "http_header_timeout",
        &seconds(DEFAULT_HEADER_TIMEOUT),
        positive,
    )?;
    let idle_timeout = layers.parse(
        "http_idle_timeout",
        &seconds(DEFAULT_IDLE_TIMEOUT),
        positive,
    )?;
    let body_timeout = layers.parse(
        "http_body_timeout",
        &seconds(DEFAULT_BODY_TIMEOUT),
        positive,
    )?;
    let body_min_rate = layers.parse(
        "http_body_min_rate",
        &DEFAULT_BODY_MIN_RATE.to_string(),
        |v| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| "expected a whole number of bytes per second".to_owned())
        },
    )?;
    let beanstalk = if beanstalk_on { budget / 2 } else { 0 };
    Ok(Connections {
        http: ConnectionLimits {
            max_connections: (budget - beanstalk).max(1),
            header_timeout,
            idle_timeout,
            body_timeout,
            body_min_rate,
            ..ConnectionLimits::default()
        },
        beanstalk: beanstalk.max(1),
        budget,
    })
}

fn tls_files(layers: &Layers) -> Result<Option<TlsFiles>, ConfigError> {
    match (layers.one("tls_cert"), layers.one("tls_key")) {
        (Some((_, cert)), Some((_, key))) => Ok(Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
        })),
        (None, None) => Ok(None),
        _ => Err(ConfigError::Conflict(
            "--tls-cert and --tls-key go together: give both or neither".into(),
        )),
    }
}

fn list(layers: &Layers, key: &'static str) -> Vec<String> {
    layers
        .get(key)
        .map(|(_, values)| values.to_vec())
        .unwrap_or_default()
}

fn store(layers: &Layers) -> Result<StoreConfig, ConfigError> {
    if let Some((source, value)) = layers.one("store") {
        let urls = split_list(&value);
        let bad = urls.is_empty()
            || urls
                .iter()
                .any(|u| !u.starts_with("redis://") && !u.starts_with("rediss://"));
        if bad {
            return Err(ConfigError::Invalid {
                key: "store",
                value,
                origin: source,
                reason: "expected redis://HOST:PORT[/DB] (rediss:// for TLS) or a comma-separated list of them"
                    .into(),
            });
        }
        if layers.one("data").is_some() {
            return Err(ConfigError::Conflict(
                "--data and --store select different backends; give only one".into(),
            ));
        }
        let tls_ca = layers.one("redis_tls_ca").map(|(_, v)| PathBuf::from(v));
        return Ok(StoreConfig::Redis { urls, tls_ca });
    }
    if layers.one("redis_tls_ca").is_some() {
        return Err(ConfigError::Conflict(
            "--redis-tls-ca applies only to a Redis --store".into(),
        ));
    }
    let data_dir = PathBuf::from(
        layers
            .one("data")
            .map_or_else(|| DEFAULT_DATA.to_owned(), |(_, v)| v),
    );
    let interval = layers.parse(
        "durability_interval",
        DEFAULT_DURABILITY_INTERVAL,
        parse_duration,
    )?;
    let durability = layers.parse("durability", "always", |v| match v {
        "always" => Ok(Durability::Always),
        "interval" => Ok(Durability::Interval(interval)),
        "never" => Ok(Durability::Never),
        _ => Err("expected always, interval or never".to_owned()),
    })?;
    Ok(StoreConfig::Local {
        data_dir,
        durability,
    })
}

fn parse_addr(value: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    value
        .to_socket_addrs()
        .map_err(|err| format!("not an address (HOST:PORT): {err}"))?
        .next()
        .ok_or_else(|| "the host name has no address".to_owned())
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err("expected true or false".into()),
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
