//! Prometheus metrics: the process-wide recorder, per-request counters and
//! latency histograms by route template, and per-queue gauges refreshed from
//! `list_queues` at scrape time (so they are never stale and cost nothing
//! between scrapes).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::MatchedPath;
use axum::http::{Method, StatusCode};
use delayd_core::metric;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// Counter: HTTP requests. Labels `method`, `route` (the template, e.g.
/// `/v1/queues/{queue}/messages`), `status`.
pub const HTTP_REQUESTS_TOTAL: &str = "delayd_http_requests_total";
/// Histogram, seconds: HTTP request latency. Same labels.
pub const HTTP_REQUEST_SECONDS: &str = "delayd_http_request_duration_seconds";
/// Gauge: open HTTP connections.
pub const HTTP_CONNECTIONS: &str = "delayd_http_connections";
/// Gauge: the most open HTTP connections (`--max-connections`' HTTP share).
pub const HTTP_MAX_CONNECTIONS: &str = "delayd_http_max_connections";
/// Counter: idle HTTP connections closed to admit a new one at the limit.
pub const HTTP_CONNECTIONS_EVICTED_TOTAL: &str = "delayd_http_connections_evicted_total";
/// Counter: HTTP connections answered 503 and closed at the limit because
/// every open one was busy.
pub const HTTP_CONNECTIONS_REFUSED_TOTAL: &str = "delayd_http_connections_refused_total";
/// Counter: requests whose body arrived too slowly (past the body timeout
/// and minimum rate), answered 408 and, on HTTP/1, closed.
pub const HTTP_SLOW_BODIES_TOTAL: &str = "delayd_http_slow_bodies_total";
/// Counter: HTTP connections cut for cancelling too many requests (HTTP/2
/// stream resets: the "rapid reset" flood).
pub const HTTP_RESET_FLOODS_TOTAL: &str = "delayd_http_reset_floods_total";
/// Gauge: live messages. Labels `queue`, `state`.
pub const QUEUE_MESSAGES: &str = "delayd_queue_messages";
/// Gauge: 1 while the queue is paused. Label `queue`.
pub const QUEUE_PAUSED: &str = "delayd_queue_paused";
/// Gauge: flow keys whose state the broker keeps, per queue (refreshed at
/// scrape from the queue's stats, like the two above). The name is core's.
pub const FLOW_ACTIVE_KEYS: &str = delayd_core::metric::FLOW_ACTIVE_KEYS;
/// Gauge, always 1: the version of the IANA time-zone database compiled
/// into the binary (label `version`, e.g. `2025b`), which decides the fire
/// times of cron schedules in a `tz`.
pub const TZDB_INFO: &str = "delayd_tzdb_info";

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];
/// Lock holds and waits, driver rounds, commit phases: microseconds up to
/// the stalls worth finding.
const LOCK_BUCKETS: &[f64] = &[
    0.000_001, 0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001,
    0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

/// The process's recorder, installed once. Tests build many servers in one
/// process; when some other recorder was installed first, our handle still
/// renders (an empty page) rather than failing the server.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(install).clone()
}

fn install() -> PrometheusHandle {
    let recorder = buckets(PrometheusBuilder::new()).build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!("a metrics recorder was already installed; /metrics shows only ours");
    }
    let upkeep = handle.clone();
    // Histograms buffer samples until upkeep drains them; without a scrape
    // they would grow without bound.
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            upkeep.run_upkeep();
        });
    if let Err(err) = spawned {
        tracing::warn!(%err, "could not start the metrics upkeep thread");
    }
    handle
}

fn buckets(builder: PrometheusBuilder) -> PrometheusBuilder {
    let with_buckets = || -> Result<PrometheusBuilder, BuildError> {
        let mut builder = PrometheusBuilder::new();
        for name in [
            HTTP_REQUEST_SECONDS,
            metric::FIRE_LATENESS_SECONDS,
            metric::DELIVERY_LATENESS_SECONDS,
            metric::COMMIT_SECONDS,
        ] {
            builder =
                builder.set_buckets_for_metric(Matcher::Full(name.into()), LATENCY_BUCKETS)?;
        }
        for name in [
            metric::STATE_LOCK_HOLD_SECONDS,
            metric::STATE_LOCK_WAIT_SECONDS,
            metric::DRIVER_ROUND_SECONDS,
            metric::COMMIT_PHASE_SECONDS,
        ] {
            builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), LOCK_BUCKETS)?;
        }
        for name in [
            metric::COMMIT_BATCH_SIZE,
            metric::DRIVER_ROUND_FIRED,
            metric::DRIVER_ROUND_HANDED,
        ] {
            builder = builder.set_buckets_for_metric(Matcher::Full(name.into()), BATCH_BUCKETS)?;
        }
        Ok(builder)
    };
    // Only an empty bucket list fails, and ours are constants.
    with_buckets().unwrap_or(builder)
}

/// Counts one answered request and records its latency, by method, route
/// template and status. The handles of each label set are kept: building
/// the labels and looking them up in the recorder cost more than the
/// increment, on every request.
pub(crate) fn record_request(
    route: Option<&MatchedPath>,
    method: &Method,
    status: StatusCode,
    started: Instant,
) {
    let route = route.map_or("unmatched", |p| p.as_str());
    let (requests, seconds) = request_handles(route, method, status);
    requests.increment(1);
    seconds.record(started.elapsed().as_secs_f64());
}

/// The request counter and latency histogram of one label set.
type RequestHandles = (metrics::Counter, metrics::Histogram);

fn request_handles(route: &str, method: &Method, status: StatusCode) -> RequestHandles {
    // Per (method, status), the routes seen: a few dozen label sets in all.
    type Cache = HashMap<(Method, u16), Vec<(Box<str>, RequestHandles)>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let routes = cache.entry((method.clone(), status.as_u16())).or_default();
    if let Some((_, handles)) = routes.iter().find(|(r, _)| &**r == route) {
        return handles.clone();
    }
    let labels = [
        ("method", method.as_str().to_owned()),
        ("route", route.to_owned()),
        ("status", status.as_u16().to_string()),
    ];
    let handles = (
        metrics::counter!(HTTP_REQUESTS_TOTAL, &labels),
        metrics::histogram!(HTTP_REQUEST_SECONDS, &labels),
    );
    routes.push((route.into(), handles.clone()));
    handles
}

/// Sets the info gauges (constant for the process's life; set at each
/// scrape so they show whichever recorder is in place).
pub fn set_info_gauges() {
    metrics::gauge!(TZDB_INFO, "version" => delayd_core::TZDB_VERSION).set(1.0);
}

/// Sets the per-queue gauges from the broker's current stats.
pub async fn refresh_queue_gauges(state: &crate::state::AppState) {
    let queues = match state.broker.list_queues().await {
        Ok(queues) => queues,
        Err(err) => {
            tracing::warn!(%err, "metrics scrape: cannot list queues");
            return;
        }
    };
    let mut exported = match state.exported_queues.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let mut gone = std::mem::take(&mut *exported);
    for info in &queues {
        let name = info.name.as_str().to_owned();
        gone.remove(&name);
        let stats = info.stats;
        set_queue(
            &name,
            stats.scheduled,
            stats.ready,
            stats.leased,
            stats.dead,
        );
        metrics::gauge!(QUEUE_PAUSED, "queue" => name.clone())
            .set(f64::from(u8::from(info.paused)));
        metrics::gauge!(FLOW_ACTIVE_KEYS, "queue" => name.clone()).set(stats.flow_keys as f64);
        exported.insert(name);
    }
    for name in gone {
        set_queue(&name, 0, 0, 0, 0);
        metrics::gauge!(QUEUE_PAUSED, "queue" => name.clone()).set(0.0);
        metrics::gauge!(FLOW_ACTIVE_KEYS, "queue" => name).set(0.0);
    }
}

fn set_queue(queue: &str, scheduled: u64, ready: u64, leased: u64, dead: u64) {
    let states = [
        ("scheduled", scheduled),
        ("ready", ready),
        ("leased", leased),
        ("dead", dead),
    ];
    for (state, count) in states {
        metrics::gauge!(QUEUE_MESSAGES, "queue" => queue.to_owned(), "state" => state)
            .set(count as f64);
    }
}
