//! `delayd serve`: opens the configured broker and runs every frontend on
//! it (HTTP API with the dashboard, beanstalkd listener, push dispatcher)
//! until SIGTERM or SIGINT.
//!
//! Start-up order: the broker first (every frontend needs it), then the
//! beanstalkd listener (test harnesses connect ~100 ms after spawning the
//! process), then push and HTTP. Shutdown order: one token stops the push
//! dispatcher and the beanstalkd listener (which releases reserved jobs)
//! while the HTTP server drains; the broker is shut down last, which makes
//! everything acknowledged durable.

use std::sync::Arc;

use anyhow::Context;
use delayd_core::Broker;
use tokio_util::sync::CancellationToken;

use delayd_server::{HttpListener, TlsConfig, TlsError};

use crate::config::{ServeArgs, ServeConfig, StoreConfig, TlsFiles};

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = crate::config::resolve_from_process(&args)?;
    // The recorder first: the listeners set their limit gauges on start.
    delayd_server::metrics::handle();
    let tls = config.tls.as_ref().map(load_tls).transpose()?;
    // Bind before opening the store: beanstalkd clients may connect within
    // ~50 ms of start and wait in the kernel's accept backlog meanwhile.
    let beanstalk_listener = match config.beanstalk {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for beanstalkd clients on {addr}"))?,
        ),
        None => None,
    };
    let broker = open_broker(&config).await?;
    let stop = CancellationToken::new();
    // Each listener has its share of `--max-connections`; the budget makes
    // the total exact too (a budget of 1 cannot be split in two shares).
    let budget = Arc::new(tokio::sync::Semaphore::new(config.max_connections));
    let beanstalk = match beanstalk_listener {
        Some(listener) => Some(start_beanstalk(listener, &config, &broker, &stop, &budget)?),
        None => None,
    };

    let policy =
        delayd_push::PushPolicy::new(&config.push_allow).context("invalid --push-allow entry")?;
    let push = delayd_push::PushDispatcher::try_start(
        broker.clone(),
        Arc::new(policy),
        delayd_push::PushOptions::default(),
        stop.clone(),
    )?;

    let token_file = config
        .token_file
        .clone()
        .zip(config.options.scoped_tokens.clone());
    let signals = tokio::spawn(watch_signals(
        stop.clone(),
        beanstalk.as_ref().map(|(handle, _)| handle.clone()),
        token_file,
    ));

    let listener = http_listener(&config, tls)
        .await?
        .with_shared_budget(budget);
    let stopped = stop.clone();
    let served = delayd_server::serve_until(listener, broker, config.options, async move {
        stopped.cancelled().await
    })
    .await;

    stop.cancel();
    signals.abort();
    push.join().await;
    if let Some((_, task)) = beanstalk {
        task.await.context("beanstalkd listener task failed")?;
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

type Beanstalk = (
    delayd_beanstalk::BeanstalkHandle,
    tokio::task::JoinHandle<()>,
);

fn start_beanstalk(
    listener: tokio::net::TcpListener,
    config: &ServeConfig,
    broker: &Arc<dyn Broker>,
    stop: &CancellationToken,
    budget: &Arc<tokio::sync::Semaphore>,
) -> anyhow::Result<Beanstalk> {
    let beanstalk_config = delayd_beanstalk::BeanstalkConfig {
        max_connections: config.beanstalk_max_connections,
        ..delayd_beanstalk::BeanstalkConfig::default()
    };
    let server = delayd_beanstalk::BeanstalkServer::from_listener(
        listener,
        broker.clone(),
        beanstalk_config,
        Arc::new(delayd_core::SystemClock),
    )?
    .with_shared_budget(Arc::clone(budget));
    tracing::info!(
        bound = %server.local_addr(),
        max_connections = config.beanstalk_max_connections,
        "beanstalkd protocol listening"
    );
    let handle = server.handle();
    let stopped = stop.clone();
    let task = tokio::spawn(server.run(async move { stopped.cancelled().await }));
    Ok((handle, task))
}

async fn http_listener(
    config: &ServeConfig,
    tls: Option<TlsConfig>,
) -> anyhow::Result<HttpListener> {
    let tcp = tokio::net::TcpListener::bind(config.http)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", config.http))?;
    let limits = config.http_limits;
    tracing::info!(
        bound = %tcp.local_addr()?,
        tls = tls.is_some(),
        max_connections = limits.max_connections,
        header_timeout = ?limits.header_timeout,
        idle_timeout = ?limits.idle_timeout,
        body_timeout = ?limits.body_timeout,
        body_min_rate = limits.body_min_rate,
        fd_limit = crate::fd_limit::soft_fd_limit(),
        "HTTP API listening"
    );
    let listener = HttpListener::from(tcp).with_limits(limits);
    Ok(match tls {
        Some(tls) => listener.with_tls(tls),
        None => listener,
    })
}

/// Reads and checks `--tls-cert` and `--tls-key`; errors name the file.
fn load_tls(files: &TlsFiles) -> anyhow::Result<TlsConfig> {
    let read = |path: &std::path::Path, option: &str| {
        std::fs::read(path).with_context(|| format!("cannot read {option} {}", path.display()))
    };
    let cert = read(&files.cert, "--tls-cert")?;
    let key = read(&files.key, "--tls-key")?;
    TlsConfig::from_pem(&cert, &key).map_err(|err| {
        let culprit = match err {
            TlsError::NoCertificate | TlsError::BadCertificate(_) => {
                format!("--tls-cert {}", files.cert.display())
            }
            TlsError::BadKey(_) => format!("--tls-key {}", files.key.display()),
            TlsError::Rejected(_) => format!(
                "--tls-cert {} with --tls-key {}",
                files.cert.display(),
                files.key.display()
            ),
        };
        anyhow::Error::new(err).context(culprit)
    })
}

/// The broker `config` selects (`delayd import` opens the same one).
pub(crate) async fn open_broker(config: &ServeConfig) -> anyhow::Result<Arc<dyn Broker>> {
    Ok(match &config.store {
        StoreConfig::Local {
            data_dir,
            durability,
            horizon,
            disk_reserve,
            cache_size,
            history,
        } => {
            let mut local = delayd_local::LocalConfig::new(data_dir);
            local.history = *history;
            local.durability = *durability;
            local.disk_reserve = *disk_reserve;
            local.payload_cache_bytes = *cache_size;
            local.engine_nice = Some(delayd_local::LocalConfig::SERVE_ENGINE_NICE);
            if let Some(horizon) = horizon {
                local.horizon_ms = horizon.as_millis().try_into().unwrap_or(u64::MAX);
            }
            let broker = delayd_local::LocalBroker::open(local)
                .await
                .map_err(|e| open_failed(e, data_dir))?;
            tracing::info!(data = %data_dir.display(), report = ?broker.recovery_report(), "store open");
            Arc::new(broker)
        }
        StoreConfig::Redis { urls, tls_ca, wait } => {
            let mut redis = delayd_redis::RedisConfig::new("");
            redis.urls = urls.clone();
            redis.wait_replicas = *wait;
            if let Some(path) = tls_ca {
                let pem = std::fs::read(path)
                    .with_context(|| format!("cannot read --redis-tls-ca {}", path.display()))?;
                redis.tls_ca = Some(pem);
            }
            let broker = delayd_redis::RedisBroker::connect(redis)
                .await
                .with_context(|| format!("cannot connect to Redis at {}", urls.join(",")))?;
            tracing::info!(redis = %urls.join(","), "connected to Redis");
            Arc::new(broker)
        }
    })
}

/// The open error with what to do: a damaged store gets the command that
/// lists every damaged file (the error itself names the first one).
fn open_failed(err: delayd_local::OpenError, data_dir: &std::path::Path) -> anyhow::Error {
    let dir = data_dir.display();
    if err.is_locked() {
        return anyhow::anyhow!(
            "cannot open the store in {dir}: another process has it open \
             (a running `delayd serve --data {dir}`?); stop it first"
        );
    }
    if err.is_corruption() {
        // One line, not the error chain: `OpenError` already prints its
        // source, and the chain would repeat the findings.
        return anyhow::anyhow!(
            "cannot open the store in {dir}: it is damaged; stop here and run \
             `delayd check --data {dir}` to list every damaged file and what to do: {err}"
        );
    }
    anyhow::Error::new(err).context(format!("cannot open the store in {dir}"))
}

/// SIGTERM/SIGINT stop the server; SIGUSR1 puts the beanstalkd listener in
/// drain mode (beanstalkd's behaviour: `put` answers `DRAINING`); SIGHUP
/// reads `--token-file` again.
async fn watch_signals(
    stop: CancellationToken,
    beanstalk: Option<delayd_beanstalk::BeanstalkHandle>,
    token_file: Option<(std::path::PathBuf, delayd_server::ScopedTokens)>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut usr1), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the server with SIGKILL");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM received, shutting down"); break; }
            _ = int.recv() => { tracing::info!("SIGINT received, shutting down"); break; }
            _ = usr1.recv() => {
                tracing::info!("SIGUSR1 received, beanstalkd listener draining");
                if let Some(handle) = &beanstalk { handle.drain(); }
            }
            _ = hup.recv() => match &token_file {
                Some((path, tokens)) => {
                    tracing::info!("SIGHUP received, reading the token file again");
                    crate::token::reload(path, tokens);
                }
                None => tracing::info!("SIGHUP received; no --token-file to read again"),
            },
        }
    }
    stop.cancel();
}
