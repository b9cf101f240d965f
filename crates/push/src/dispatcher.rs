//! The dispatcher: one pooled HTTP client, a discovery loop that keeps one
//! worker per queue with a push config, and orderly shutdown.
//!
//! Discovery polls `Broker::list_queues` every
//! [`PushOptions::discovery_interval`] (1 s by default). A changed queue
//! config restarts the queue's worker, and the old worker finishes the lease
//! call it is in (up to [`PushOptions::lease_wait`]), so a config change
//! takes effect within about the sum of the two. Deliveries the old worker has
//! in flight finish under the old config, so for a moment the queue may
//! have up to twice its old concurrency in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use delayd_core::{Broker, Clock, QueueConfig, QueueInfo, QueueName, SystemClock};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::policy::PushPolicy;
use crate::resolver::PolicyResolver;
use crate::worker::{QueueWorker, Shared};

/// Tuning of the dispatcher. `Default` is the production setting.
#[derive(Clone)]
pub struct PushOptions {
    /// How often queues are listed to find push configs (default 1 s): the
    /// longest a config change waits to take effect.
    pub discovery_interval: Duration,
    /// Added to a queue's `push.timeout_ms` to get the lease length of a
    /// push delivery (default 5 s): long enough to ack after a slow answer,
    /// short enough that a delivery this node dropped (crash) is retried soon.
    pub lease_margin: Duration,
    /// How long one lease call waits for a message (default 1 s); also the
    /// longest a worker takes to notice shutdown or a config change.
    pub lease_wait: Duration,
    /// After shutdown, how long in-flight requests may finish (default 5 s)
    /// before they are dropped; dropped deliveries are retried when their
    /// lease expires.
    pub shutdown_grace: Duration,
    /// Wall clock for `delayd-timestamp`, lateness and `Retry-After` dates.
    pub clock: Arc<dyn Clock>,
    /// `user-agent` of push requests.
    pub user_agent: String,
}

impl Default for PushOptions {
    fn default() -> Self {
        Self {
            discovery_interval: Duration::from_secs(1),
            lease_margin: Duration::from_secs(5),
            lease_wait: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(5),
            clock: Arc::new(SystemClock),
            user_agent: concat!("delayd-push/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

impl std::fmt::Debug for PushOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushOptions")
            .field("discovery_interval", &self.discovery_interval)
            .field("lease_margin", &self.lease_margin)
            .field("lease_wait", &self.lease_wait)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("user_agent", &self.user_agent)
            .finish_non_exhaustive()
    }
}

/// The HTTP client could not be built (TLS set-up).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the push HTTP client: {0}")]
pub struct ClientError(#[from] reqwest::Error);

/// Pushes due messages of every queue with a push config; see the crate
/// docs. Dropping it does not stop it: cancel the shutdown token, then
/// [`join`](Self::join).
pub struct PushDispatcher {
    supervisor: JoinHandle<()>,
    deliveries: TaskTracker,
    hard_stop: CancellationToken,
    shutdown_grace: Duration,
}

impl PushDispatcher {
    /// Starts the dispatcher on the current tokio runtime. If the HTTP
    /// client cannot be built (it practically cannot fail with rustls) the
    /// error is logged and nothing is pushed; use
    /// [`try_start`](Self::try_start) to handle it.
    pub fn start(
        broker: Arc<dyn Broker>,
        policy: Arc<PushPolicy>,
        options: PushOptions,
        shutdown: CancellationToken,
    ) -> PushDispatcher {
        let grace = options.shutdown_grace;
        match Self::try_start(broker, policy, options, shutdown.clone()) {
            Ok(dispatcher) => dispatcher,
            Err(error) => {
                tracing::error!(%error, "push delivery disabled");
                PushDispatcher {
                    supervisor: tokio::spawn(async move { shutdown.cancelled().await }),
                    deliveries: TaskTracker::new(),
                    hard_stop: CancellationToken::new(),
                    shutdown_grace: grace,
                }
            }
        }
    }

    /// [`start`](Self::start), failing if the HTTP client cannot be built.
    pub fn try_start(
        broker: Arc<dyn Broker>,
        policy: Arc<PushPolicy>,
        options: PushOptions,
        shutdown: CancellationToken,
    ) -> Result<PushDispatcher, ClientError> {
        let client = build_client(&policy, &options)?;
        let deliveries = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        let shutdown_grace = options.shutdown_grace;
        let shared = Arc::new(Shared {
            broker,
            policy,
            client,
            options,
            deliveries: deliveries.clone(),
            hard_stop: hard_stop.clone(),
        });
        let supervisor = tokio::spawn(supervise(shared, shutdown));
        Ok(PushDispatcher {
            supervisor,
            deliveries,
            hard_stop,
            shutdown_grace,
        })
    }

    /// Waits until the dispatcher has stopped after its shutdown token was
    /// cancelled: workers stop leasing, in-flight requests get
    /// `shutdown_grace` to finish and are then dropped.
    pub async fn join(self) {
        if let Err(error) = self.supervisor.await {
            tracing::error!(%error, "push supervisor task failed");
        }
        self.deliveries.close();
        let grace = tokio::time::timeout(self.shutdown_grace, self.deliveries.wait()).await;
        if grace.is_err() {
            tracing::warn!("push: dropping in-flight requests at shutdown; their leases will expire and they will be retried");
            self.hard_stop.cancel();
            self.deliveries.wait().await;
        }
    }
}

/// One pooled client for every queue: connections are reused per host, and
/// the resolver applies the allowlist. Redirects are never followed (3xx is
/// a failure) and environment proxies are ignored, because a proxy would
/// connect on our behalf to an address the policy never saw.
fn build_client(
    policy: &Arc<PushPolicy>,
    options: &PushOptions,
) -> Result<reqwest::Client, ClientError> {
    let client = reqwest::Client::builder()
        .dns_resolver(Arc::new(PolicyResolver::new(Arc::clone(policy))))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(options.user_agent.clone())
        .build()?;
    Ok(client)
}

struct RunningWorker {
    config: QueueConfig,
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

/// The discovery loop: keeps exactly one worker per queue with a push
/// config, running with that queue's current config.
async fn supervise(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut workers: HashMap<QueueName, RunningWorker> = HashMap::new();
    loop {
        match shared.broker.list_queues().await {
            Ok(queues) => reconcile(&shared, &mut workers, queues),
            Err(error) => tracing::warn!(%error, "push: cannot list queues"),
        }
        tokio::select! {
            () = tokio::time::sleep(shared.options.discovery_interval) => {}
            () = shutdown.cancelled() => break,
        }
    }
    for worker in workers.values() {
        worker.stop.cancel();
    }
    for (queue, worker) in workers {
        if let Err(error) = worker.handle.await {
            tracing::error!(%queue, %error, "push worker task failed");
        }
    }
}

fn reconcile(
    shared: &Arc<Shared>,
    workers: &mut HashMap<QueueName, RunningWorker>,
    queues: Vec<QueueInfo>,
) {
    let mut wanted: HashMap<QueueName, QueueConfig> = queues
        .into_iter()
        .filter(|q| q.config.push.is_some())
        .map(|q| (q.name, q.config))
        .collect();
    workers.retain(|queue, worker| {
        let keep = wanted.get(queue) == Some(&worker.config) && !worker.handle.is_finished();
        if keep {
            wanted.remove(queue);
        } else {
            worker.stop.cancel();
        }
        keep
    });
    for (queue, config) in wanted {
        let Some(worker) = QueueWorker::new(Arc::clone(shared), queue.clone(), &config) else {
            continue;
        };
        let stop = CancellationToken::new();
        // Tracked with the deliveries, so `join` also waits for workers that
        // were replaced by a config change and are still finishing a lease call.
        let handle = shared.deliveries.spawn(worker.run(stop.clone()));
        tracing::info!(%queue, "push: worker started");
        workers.insert(
            queue,
            RunningWorker {
                config,
                stop,
                handle,
            },
        );
    }
}
