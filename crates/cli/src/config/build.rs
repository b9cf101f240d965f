//! From the layered raw values to a [`ServeConfig`]: each option parsed
//! (or defaulted), the connection budget split between the listeners, and
//! the store with the settings that belong to it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use delayd_local::{Durability, LocalConfig};
use delayd_server::{
    ConnectionLimits, ScopedTokens, ServerOptions, DEFAULT_BODY_MIN_RATE, DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
};

use super::layers::Layers;
use super::{ConfigError, ServeConfig, StoreConfig, TlsFiles};
use crate::duration::{parse_duration, parse_size};

const DEFAULT_HTTP: &str = "127.0.0.1:7070";
const DEFAULT_BEANSTALK: &str = "127.0.0.1:11300";
const DEFAULT_DATA: &str = "./delayd-data";
const DEFAULT_DURABILITY_INTERVAL: &str = "50ms";

/// Settings of the embedded store, refused with a Redis `--store`.
const LOCAL_ONLY: &[&str] = &[
    "durability",
    "durability_interval",
    "horizon",
    "disk_reserve",
    "cache_size",
    "message_history",
];

/// Settings of a Redis store, refused with the embedded one.
const REDIS_ONLY: &[&str] = &["redis_tls_ca", "redis_wait_replicas", "redis_wait_timeout"];

pub(super) fn build(layers: &Layers) -> Result<ServeConfig, ConfigError> {
    let http = layers.parse("http", DEFAULT_HTTP, parse_addr)?;
    let beanstalk = layers.parse("beanstalk", DEFAULT_BEANSTALK, |v| {
        if v.eq_ignore_ascii_case("off") {
            Ok(None)
        } else {
            parse_addr(v).map(Some)
        }
    })?;
    let store = match layers.one("store") {
        Some((source, value)) => redis_store(layers, source, value)?,
        None => local_store(layers)?,
    };
    let max_payload = layers.parse("max_payload", "1MiB", to_usize)?;
    let max_body = layers.parse("max_body", "64MiB", to_usize)?;
    let max_delay = layers.parse("max_delay", "3650d", parse_duration)?;
    let no_auto_create = layers.parse("no_auto_create", "false", parse_bool)?;
    let push_allow = layers.list("push_allow");
    if let Err(error) = delayd_push::PushPolicy::new(&push_allow) {
        return Err(ConfigError::Conflict(error.to_string()));
    }
    let connections = connections(layers, beanstalk.is_some())?;
    let tokens = layers.list("token");
    let token_file = layers.one("token_file").map(|(_, v)| PathBuf::from(v));
    let scoped_tokens = match &token_file {
        Some(path) => Some(ScopedTokens::new(crate::token::read_token_file(path)?)),
        None => None,
    };
    let unauthenticated = layers.parse("beanstalk_unauthenticated", "false", parse_bool)?;
    if let Some(addr) = beanstalk {
        let tokens_on = !tokens.is_empty() || token_file.is_some();
        if tokens_on && !addr.ip().is_loopback() && !unauthenticated {
            return Err(ConfigError::Conflict(format!(
                "--beanstalk {addr} listens beyond loopback, but the beanstalkd protocol has \
                 no authentication: anyone who reaches it could bypass the tokens \
                 (--token/--token-file) that protect HTTP. Listen on a loopback address, \
                 turn it off with --beanstalk off, or give --beanstalk-unauthenticated \
                 to accept this"
            )));
        }
    }
    let options = ServerOptions {
        tokens,
        scoped_tokens,
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
        http_limits: connections.http,
        beanstalk_max_connections: connections.beanstalk,
        max_connections: connections.budget,
        tls: tls_files(layers)?,
        token_file,
    })
}

fn to_usize(value: &str) -> Result<usize, String> {
    parse_size(value).and_then(|n| usize::try_from(n).map_err(|_| "too large".to_owned()))
}

/// The first of `keys` that some layer sets: an error naming it, since it
/// configures the other store.
fn refuse_other_store(
    layers: &Layers,
    keys: &[&'static str],
    store: &'static str,
) -> Result<(), ConfigError> {
    for &key in keys {
        if let Some((origin, _)) = layers.one(key) {
            return Err(ConfigError::OtherStore { key, origin, store });
        }
    }
    Ok(())
}

/// `--store`: Redis or Redis Cluster, split by the Redis crate.
fn redis_store(
    layers: &Layers,
    origin: super::Source,
    value: String,
) -> Result<StoreConfig, ConfigError> {
    let urls = delayd_redis::RedisConfig::from_store_arg(&value).urls;
    let scheme_ok = |u: &String| u.starts_with("redis://") || u.starts_with("rediss://");
    if urls.is_empty() || !urls.iter().all(scheme_ok) {
        return Err(ConfigError::Invalid {
            key: "store",
            value,
            origin,
            reason: "expected redis://HOST:PORT[/DB] (rediss:// for TLS) or a comma-separated list of them"
                .into(),
        });
    }
    if layers.one("data").is_some() {
        return Err(ConfigError::Conflict(
            "--data and --store select different backends; give only one".into(),
        ));
    }
    refuse_other_store(
        layers,
        LOCAL_ONLY,
        "the embedded store (--data), not to a Redis --store",
    )?;
    let tls_ca = layers.one("redis_tls_ca").map(|(_, v)| PathBuf::from(v));
    Ok(StoreConfig::Redis {
        urls,
        tls_ca,
        wait: replica_wait(layers)?,
    })
}

/// `--redis-wait-replicas` (none by default) and its timeout.
fn replica_wait(layers: &Layers) -> Result<Option<delayd_redis::ReplicaWait>, ConfigError> {
    if layers.one("redis_wait_replicas").is_none() {
        return Ok(None);
    }
    let replicas = layers.parse("redis_wait_replicas", "0", |v| {
        match v.trim().parse::<u32>() {
            Ok(0) | Err(_) => Err("expected a positive whole number of replicas".to_owned()),
            Ok(n) => Ok(n),
        }
    })?;
    let timeout = layers.parse("redis_wait_timeout", "500ms", |v| {
        parse_duration(v).and_then(|d| {
            if d.is_zero() || d >= Duration::from_secs(2) {
                Err("must be above zero and below 2s (the Redis response timeout)".to_owned())
            } else {
                Ok(d)
            }
        })
    })?;
    Ok(Some(delayd_redis::ReplicaWait { replicas, timeout }))
}

/// The embedded store (`--data`) and its settings.
fn local_store(layers: &Layers) -> Result<StoreConfig, ConfigError> {
    refuse_other_store(layers, REDIS_ONLY, "a Redis --store")?;
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
    let history = layers.parse("message_history", "on", |v| match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("expected on or off".to_owned()),
    })?;
    Ok(StoreConfig::Local {
        data_dir,
        durability,
        horizon: layers.parse_opt("horizon", parse_duration)?,
        disk_reserve,
        cache_size,
        history,
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
