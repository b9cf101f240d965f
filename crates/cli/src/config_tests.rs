//! `delayd serve` option resolution: flags > DELAYD_* env > TOML file >
//! defaults, and clear errors for bad values. (The parsers of durations and
//! sizes are tested beside them, in `crate::duration`.)

use std::collections::HashMap;
use std::io::Write as _;
use std::time::Duration;

use clap::Parser;
use delayd_local::Durability;

use super::{ConfigError, ServeArgs, ServeConfig, StoreConfig};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn args(flags: &[&str]) -> ServeArgs {
    let argv = std::iter::once("delayd").chain(flags.iter().copied());
    Cli::try_parse_from(argv).unwrap().serve
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn defaults() {
    let c = ServeConfig::resolve(&args(&[]), env(&[])).unwrap();
    assert_eq!(c.http.to_string(), "127.0.0.1:7070");
    assert_eq!(
        c.beanstalk.map(|a| a.to_string()),
        Some("127.0.0.1:11300".into())
    );
    assert_eq!(
        c.store,
        StoreConfig::Local {
            data_dir: "./delayd-data".into(),
            durability: Durability::Always,
            horizon: None,
            disk_reserve: 64 << 20,
            cache_size: 64 << 20,
            history: true,
        }
    );
    assert_eq!(c.options, delayd_server::ServerOptions::default());
    assert_eq!(c.options.max_payload, 1 << 20);
    assert_eq!(c.options.max_delay_ms, 3650 * 86_400_000);
    assert!(c.options.auto_create && c.options.tokens.is_empty() && c.push_allow.is_empty());
}

/// The embedded store's settings, from its variant.
fn local(c: &ServeConfig) -> (Option<Duration>, u64, usize) {
    match &c.store {
        StoreConfig::Local {
            horizon,
            disk_reserve,
            cache_size,
            ..
        } => (*horizon, *disk_reserve, *cache_size),
        other => panic!("expected the embedded store, got {other:?}"),
    }
}

#[test]
fn cache_size_from_flag_and_env() {
    let c = ServeConfig::resolve(&args(&["--cache-size", "8MiB"]), env(&[])).unwrap();
    assert_eq!(local(&c).2, 8 << 20);
    let c = ServeConfig::resolve(&args(&[]), env(&[("DELAYD_CACHE_SIZE", "1GiB")])).unwrap();
    assert_eq!(local(&c).2, 1 << 30);
    let bad = ServeConfig::resolve(&args(&["--cache-size", "big"]), env(&[]));
    assert!(bad.unwrap_err().to_string().contains("cache_size"));
}

#[test]
fn disk_reserve_from_flag_env_and_file() {
    let c = ServeConfig::resolve(&args(&["--disk-reserve", "1GiB"]), env(&[])).unwrap();
    assert_eq!(local(&c).1, 1 << 30);
    let c = ServeConfig::resolve(&args(&[]), env(&[("DELAYD_DISK_RESERVE", "0")])).unwrap();
    assert_eq!(local(&c).1, 0);
    let bad = ServeConfig::resolve(&args(&["--disk-reserve", "lots"]), env(&[]));
    assert!(bad.unwrap_err().to_string().contains("disk_reserve"));
}

#[test]
fn message_history_on_or_off() {
    let history = |c: &ServeConfig| match &c.store {
        StoreConfig::Local { history, .. } => *history,
        other => panic!("expected the embedded store, got {other:?}"),
    };
    let c = ServeConfig::resolve(&args(&["--message-history", "off"]), env(&[])).unwrap();
    assert!(!history(&c));
    let c = ServeConfig::resolve(&args(&[]), env(&[("DELAYD_MESSAGE_HISTORY", "off")])).unwrap();
    assert!(!history(&c));
    let bad = ServeConfig::resolve(&args(&["--message-history", "maybe"]), env(&[]));
    assert!(bad.unwrap_err().to_string().contains("message_history"));
}

#[test]
fn precedence_flags_env_file_defaults() {
    let f = file("http = \"127.0.0.1:1\"\nbeanstalk = \"127.0.0.1:2\"\nmax_payload = \"64KiB\"\nmax_delay = \"48h\"\ntoken = [\"file\"]\nno_auto_create = true\n");
    let path = f.path().to_str().unwrap();
    let e = env(&[
        ("DELAYD_BEANSTALK", "off"),
        ("DELAYD_MAX_PAYLOAD", "1MB"),
        ("DELAYD_TOKEN", "e1, e2"),
        ("DELAYD_UNRELATED", "x"),
        ("HOME", "/"),
    ]);
    let c = ServeConfig::resolve(
        &args(&[
            "--config",
            path,
            "--max-payload",
            "100",
            "--http",
            "127.0.0.1:3",
        ]),
        e.clone(),
    )
    .unwrap();
    assert_eq!(c.http.to_string(), "127.0.0.1:3", "flag beats env and file");
    assert_eq!(c.options.max_payload, 100, "flag beats env and file");
    assert_eq!(c.beanstalk, None, "env beats file");
    assert_eq!(
        c.options.tokens,
        vec!["e1", "e2"],
        "env list is comma-separated and beats file"
    );
    assert_eq!(c.options.max_delay_ms, 48 * 3_600_000, "file beats default");
    assert!(!c.options.auto_create, "file beats default");

    let c = ServeConfig::resolve(&args(&["--config", path]), env(&[])).unwrap();
    assert_eq!(c.http.to_string(), "127.0.0.1:1");
    assert_eq!(c.options.max_payload, 64 * 1024);
    assert_eq!(c.options.tokens, vec!["file"]);

    let c = ServeConfig::resolve(
        &args(&["--config", path, "--token", "a", "--token", "b"]),
        e,
    )
    .unwrap();
    assert_eq!(c.options.tokens, vec!["a", "b"], "repeated flags beat env");
    // The config file path itself may come from the environment.
    let c = ServeConfig::resolve(&args(&[]), env(&[("DELAYD_CONFIG", path)])).unwrap();
    assert_eq!(c.http.to_string(), "127.0.0.1:1");
}

#[test]
fn stores_and_durability() {
    let c = ServeConfig::resolve(
        &args(&["--store", "redis://a:6379,redis://b:6379/2"]),
        env(&[]),
    )
    .unwrap();
    assert_eq!(
        c.store,
        StoreConfig::Redis {
            urls: vec!["redis://a:6379".into(), "redis://b:6379/2".into()],
            tls_ca: None,
            wait: None,
        }
    );
    let c = ServeConfig::resolve(
        &args(&[
            "--store",
            "rediss://a:6380",
            "--redis-tls-ca",
            "/etc/ca.pem",
        ]),
        env(&[]),
    )
    .unwrap();
    assert_eq!(
        c.store,
        StoreConfig::Redis {
            urls: vec!["rediss://a:6380".into()],
            tls_ca: Some("/etc/ca.pem".into()),
            wait: None,
        }
    );
    assert!(ServeConfig::resolve(&args(&["--redis-tls-ca", "/etc/ca.pem"]), env(&[])).is_err());
    let c = ServeConfig::resolve(
        &args(&["--durability", "interval", "--data", "/tmp/x"]),
        env(&[]),
    )
    .unwrap();
    assert_eq!(
        c.store,
        StoreConfig::Local {
            data_dir: "/tmp/x".into(),
            durability: Durability::Interval(Duration::from_millis(50)),
            horizon: None,
            disk_reserve: 64 << 20,
            cache_size: 64 << 20,
            history: true,
        }
    );
    let e = env(&[
        ("DELAYD_DURABILITY", "interval"),
        ("DELAYD_DURABILITY_INTERVAL", "1s"),
    ]);
    let c =
        ServeConfig::resolve(&args(&["--horizon", "5m", "--push-allow", "10.0.0.0/8"]), e).unwrap();
    assert!(
        matches!(c.store, StoreConfig::Local { durability: Durability::Interval(d), .. } if d == Duration::from_secs(1))
    );
    assert_eq!(local(&c).0, Some(Duration::from_secs(300)));
    assert_eq!(c.push_allow, vec!["10.0.0.0/8"]);
    assert_eq!(c.options.push_allow, vec!["10.0.0.0/8"]);
    let c = ServeConfig::resolve(
        &args(&["--durability", "never", "--no-auto-create"]),
        env(&[]),
    )
    .unwrap();
    assert!(matches!(
        c.store,
        StoreConfig::Local {
            durability: Durability::Never,
            ..
        }
    ));
    assert!(!c.options.auto_create);
}

fn error(flags: &[&str], e: &[(&str, &str)]) -> String {
    match ServeConfig::resolve(&args(flags), env(e)) {
        Ok(c) => panic!("expected an error for {flags:?} {e:?}, got {c:?}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn bad_values_give_clear_errors() {
    let msg = error(&["--max-payload", "12 parsecs"], &[]);
    assert!(
        msg.contains("max_payload") && msg.contains("command line") && msg.contains("unit"),
        "{msg}"
    );
    let msg = error(&[], &[("DELAYD_MAX_DELAY", "forever")]);
    assert!(
        msg.contains("max_delay") && msg.contains("environment"),
        "{msg}"
    );
    let msg = error(&["--max-delay", "3600"], &[]);
    assert!(msg.contains("needs a unit"), "{msg}");
    let msg = error(&["--http", "nowhere"], &[]);
    assert!(msg.contains("http") && msg.contains("address"), "{msg}");
    let msg = error(&["--durability", "sometimes"], &[]);
    assert!(msg.contains("always, interval or never"), "{msg}");
    let msg = error(&["--store", "mysql://x"], &[]);
    assert!(msg.contains("redis://"), "{msg}");
    let msg = error(&["--store", "redis://x:1", "--data", "/d"], &[]);
    assert!(msg.contains("--data and --store"), "{msg}");
    let msg = error(&["--push-allow", "10.0.0.0/99"], &[]);
    assert!(msg.contains("10.0.0.0/99") && msg.contains("CIDR"), "{msg}");
    let msg = error(&[], &[("DELAYD_NO_AUTO_CREATE", "maybe")]);
    assert!(msg.contains("true or false"), "{msg}");

    let f = file("max_payload = \"1MiB\"\nmax_paylod = 5\n");
    let err = ServeConfig::resolve(&args(&["--config", f.path().to_str().unwrap()]), env(&[]))
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::File { .. })
            && err.to_string().contains("unknown key \"max_paylod\""),
        "{err}"
    );
    let f = file("http = [");
    let err = ServeConfig::resolve(&args(&["--config", f.path().to_str().unwrap()]), env(&[]))
        .unwrap_err();
    assert!(matches!(err, ConfigError::File { .. }), "{err}");
    let err =
        ServeConfig::resolve(&args(&["--config", "/no/such/file.toml"]), env(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::ReadFile { .. }), "{err}");
}

#[test]
fn connection_budget_and_timeouts() {
    let c = ServeConfig::resolve(&args(&[]), env(&[])).unwrap();
    let budget = crate::fd_limit::default_max_connections();
    assert_eq!(
        c.http_limits.max_connections + c.beanstalk_max_connections,
        budget
    );
    assert_eq!(c.http_limits.header_timeout, Duration::from_secs(10));
    assert_eq!(c.http_limits.idle_timeout, Duration::from_secs(60));
    assert_eq!(c.tls, None);

    // Split evenly with both listeners; all to HTTP with beanstalkd off.
    let c = ServeConfig::resolve(&args(&["--max-connections", "301"]), env(&[])).unwrap();
    assert_eq!(
        (c.http_limits.max_connections, c.beanstalk_max_connections),
        (151, 150)
    );
    let c = ServeConfig::resolve(
        &args(&["--beanstalk", "off"]),
        env(&[("DELAYD_MAX_CONNECTIONS", "300")]),
    )
    .unwrap();
    assert_eq!(c.http_limits.max_connections, 300);

    let f =
        file("max_connections = 40\nhttp_header_timeout = \"2s\"\nhttp_idle_timeout = \"5m\"\n");
    let c =
        ServeConfig::resolve(&args(&["--config", f.path().to_str().unwrap()]), env(&[])).unwrap();
    assert_eq!(c.http_limits.max_connections, 20);
    assert_eq!(c.http_limits.header_timeout, Duration::from_secs(2));
    assert_eq!(c.http_limits.idle_timeout, Duration::from_secs(300));

    let msg = error(&["--max-connections", "0"], &[]);
    assert!(
        msg.contains("max_connections") && msg.contains("positive"),
        "{msg}"
    );
    let msg = error(&["--http-idle-timeout", "0s"], &[]);
    assert!(
        msg.contains("http_idle_timeout") && msg.contains("zero"),
        "{msg}"
    );
}

#[test]
fn tls_needs_both_files() {
    let c = ServeConfig::resolve(
        &args(&["--tls-cert", "c.pem"]),
        env(&[("DELAYD_TLS_KEY", "k.pem")]),
    )
    .unwrap();
    let tls = c.tls.expect("TLS on");
    assert_eq!(
        (tls.cert.to_str(), tls.key.to_str()),
        (Some("c.pem"), Some("k.pem"))
    );
    let msg = error(&["--tls-cert", "c.pem"], &[]);
    assert!(msg.contains("--tls-cert and --tls-key"), "{msg}");
    let msg = error(&[], &[("DELAYD_TLS_KEY", "k.pem")]);
    assert!(msg.contains("--tls-cert and --tls-key"), "{msg}");
}

#[test]
fn a_setting_for_the_other_store_is_an_error_naming_it() {
    let redis = ["--store", "redis://a:6379"];
    for (flag, value, key) in [
        ("--horizon", "5m", "--horizon"),
        ("--disk-reserve", "1GiB", "--disk-reserve"),
        ("--cache-size", "8MiB", "--cache-size"),
        ("--durability", "never", "--durability"),
        ("--durability-interval", "1s", "--durability-interval"),
    ] {
        let mut flags = redis.to_vec();
        flags.extend([flag, value]);
        let msg = error(&flags, &[]);
        assert!(
            msg.contains(key) && msg.contains("command line") && msg.contains("embedded store"),
            "{msg}"
        );
    }
    // Even a value the embedded store would refuse: the store decides first.
    let msg = error(&redis, &[("DELAYD_DURABILITY", "sometimes")]);
    assert!(
        msg.contains("--durability") && msg.contains("environment"),
        "{msg}"
    );
    let f = file("cache_size = \"1MiB\"\n");
    let path = f.path().to_str().unwrap();
    let msg = error(&["--store", "redis://a:6379", "--config", path], &[]);
    assert!(
        msg.contains("--cache-size") && msg.contains("config file"),
        "{msg}"
    );

    let msg = error(&["--redis-tls-ca", "/etc/ca.pem"], &[]);
    assert!(
        msg.contains("--redis-tls-ca") && msg.contains("Redis --store"),
        "{msg}"
    );
    let msg = error(&["--data", "/d"], &[("DELAYD_REDIS_TLS_CA", "/etc/ca.pem")]);
    assert!(
        msg.contains("--redis-tls-ca") && msg.contains("environment"),
        "{msg}"
    );
}

#[test]
fn every_flag_is_a_key_of_the_environment_and_the_file() {
    // The keys come from `ServeArgs` itself: a new flag needs no list.
    let c = ServeConfig::resolve(
        &args(&[]),
        env(&[
            ("DELAYD_HTTP_IDLE_TIMEOUT", "7s"),
            ("DELAYD_PUSH_ALLOW", "10.0.0.0/8,example.com"),
        ]),
    )
    .unwrap();
    assert_eq!(c.http_limits.idle_timeout, Duration::from_secs(7));
    assert_eq!(c.push_allow, vec!["10.0.0.0/8", "example.com"]);
    let f = file("tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\npush_allow = [\"10.0.0.0/8\"]\n");
    let c =
        ServeConfig::resolve(&args(&["--config", f.path().to_str().unwrap()]), env(&[])).unwrap();
    assert!(c.tls.is_some());
    assert_eq!(c.push_allow, vec!["10.0.0.0/8"]);
    let f = file("config = \"other.toml\"\n");
    let msg = ServeConfig::resolve(&args(&["--config", f.path().to_str().unwrap()]), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("unknown key \"config\""), "{msg}");
}

#[test]
fn body_timeout_and_minimum_rate() {
    let c = ServeConfig::resolve(&args(&[]), env(&[])).unwrap();
    assert_eq!(c.http_limits.body_timeout, Duration::from_secs(20));
    assert_eq!(c.http_limits.body_min_rate, 500);
    let c = ServeConfig::resolve(
        &args(&["--http-body-timeout", "5s"]),
        env(&[("DELAYD_HTTP_BODY_MIN_RATE", "0")]),
    )
    .unwrap();
    assert_eq!(c.http_limits.body_timeout, Duration::from_secs(5));
    assert_eq!(c.http_limits.body_min_rate, 0);
    let msg = error(&["--http-body-min-rate", "fast"], &[]);
    assert!(msg.contains("http_body_min_rate"), "{msg}");
    let msg = error(&["--http-body-timeout", "0s"], &[]);
    assert!(msg.contains("http_body_timeout"), "{msg}");
}

#[test]
fn the_connection_budget_is_kept_whole() {
    let c = ServeConfig::resolve(&args(&["--max-connections", "1"]), env(&[])).unwrap();
    assert_eq!(c.max_connections, 1);
    // Each listener may take the one connection; the shared budget in
    // `serve` keeps the total at 1.
    assert_eq!(
        (c.http_limits.max_connections, c.beanstalk_max_connections),
        (1, 1)
    );
    let c = ServeConfig::resolve(&args(&["--max-connections", "301"]), env(&[])).unwrap();
    assert_eq!(c.max_connections, 301);
}

#[test]
fn redis_replica_wait() {
    let c = ServeConfig::resolve(
        &args(&["--store", "redis://a:6379", "--redis-wait-replicas", "1"]),
        env(&[("DELAYD_REDIS_WAIT_TIMEOUT", "250ms")]),
    )
    .unwrap();
    let StoreConfig::Redis { wait, .. } = c.store else {
        panic!("a Redis store")
    };
    assert_eq!(
        wait,
        Some(delayd_redis::ReplicaWait {
            replicas: 1,
            timeout: Duration::from_millis(250)
        })
    );
    let msg = error(
        &["--store", "redis://a:6379", "--redis-wait-replicas", "0"],
        &[],
    );
    assert!(msg.contains("redis_wait_replicas"), "{msg}");
    let msg = error(
        &[
            "--store",
            "redis://a:6379",
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout",
            "5s",
        ],
        &[],
    );
    assert!(msg.contains("redis_wait_timeout"), "{msg}");
    // A Redis setting with the embedded store is an error naming it.
    let msg = error(&["--redis-wait-replicas", "1"], &[]);
    assert!(
        msg.contains("redis_wait_replicas") || msg.contains("redis-wait-replicas"),
        "{msg}"
    );
}

#[test]
fn token_file_from_flag_env_or_config_file() {
    let digest = "0".repeat(64);
    let tokens = file(&format!(
        "[[token]]\nname = \"viewer\"\nsha256 = \"{digest}\"\nscopes = [\"read:*\"]\n"
    ));
    let path = tokens.path().to_str().unwrap();
    let config = file(&format!("token_file = {path:?}\n"));
    let config_path = config.path().to_str().unwrap();
    for c in [
        ServeConfig::resolve(&args(&["--token-file", path]), env(&[])).unwrap(),
        ServeConfig::resolve(&args(&[]), env(&[("DELAYD_TOKEN_FILE", path)])).unwrap(),
        ServeConfig::resolve(&args(&["--config", config_path]), env(&[])).unwrap(),
    ] {
        assert_eq!(c.token_file.as_deref(), Some(tokens.path()));
        let scoped = c.options.scoped_tokens.expect("scoped tokens");
        assert_eq!(scoped.names(), ["viewer"]);
    }
    let missing = error(&["--token-file", "/nonexistent/tokens.toml"], &[]);
    assert!(
        missing.contains("token file /nonexistent/tokens.toml"),
        "{missing}"
    );
}

#[test]
fn beanstalk_beyond_loopback_with_tokens_is_refused_unless_accepted() {
    let refused = error(&["--beanstalk", "0.0.0.0:11300", "--token", "t"], &[]);
    assert!(refused.contains("--beanstalk-unauthenticated"), "{refused}");
    let refused = error(&["--beanstalk", "0.0.0.0:11300"], &[("DELAYD_TOKEN", "t")]);
    assert!(refused.contains("no authentication"), "{refused}");
    for (flags, e) in [
        (vec!["--beanstalk", "0.0.0.0:11300"], vec![]),
        (vec!["--beanstalk", "[::1]:11300", "--token", "t"], vec![]),
        (vec!["--beanstalk", "off", "--token", "t"], vec![]),
        (
            vec!["--beanstalk", "0.0.0.0:11300", "--token", "t"],
            vec![("DELAYD_BEANSTALK_UNAUTHENTICATED", "true")],
        ),
    ] {
        ServeConfig::resolve(&args(&flags), env(&e)).unwrap();
    }
}
