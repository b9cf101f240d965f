//! Metric names of the push dispatcher (recorded through the `metrics`
//! facade; the server installs the Prometheus recorder).

/// Counter: push requests by outcome. Labels `queue`, `outcome` (one of
/// [`Outcome::label`](crate::deliver::Outcome::label)'s values: `delivered`,
/// `http_error`, `timeout`, `connect_error`, `disallowed`, `error`).
pub const PUSH_DELIVERIES_TOTAL: &str = "delayd_push_deliveries_total";
/// Histogram, seconds: one push request, from send to answer (or failure).
/// Label `queue`.
pub const PUSH_LATENCY_SECONDS: &str = "delayd_push_latency_seconds";
/// Histogram, seconds: how late a first push attempt was sent
/// (sent_at - deliver_at). Label `queue`.
pub const PUSH_LATENESS_SECONDS: &str = "delayd_push_lateness_seconds";
/// Counter: push requests that were retries (attempt > 1). Label `queue`.
pub const PUSH_RETRIES_TOTAL: &str = "delayd_push_retries_total";
/// Counter: pushed messages moved to `dead` after their last failed attempt.
/// Label `queue`.
pub const PUSH_DEAD_LETTERED_TOTAL: &str = "delayd_push_dead_lettered_total";
/// Gauge: push requests in flight. Label `queue`.
pub const PUSH_IN_FLIGHT: &str = "delayd_push_in_flight";
