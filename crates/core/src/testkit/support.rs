//! Small helpers the conformance cases share: unique queue names, terse
//! enqueue/lease calls that panic with context, and time bounds.
//!
//! Cases are written against time as the broker sees it: [`now_ms`] reads
//! the case's clock, and waiting is tokio's (`sleep`, `Instant`). Over HTTP
//! and Redis that is the wall clock and real time: "not before" bounds are
//! exact, "arrived by" bounds are generous ([`SLACK_MS`]) so a loaded
//! 2-core machine does not make them flaky. In-process brokers run on
//! *virtual time* instead ([`run_case_virtual`]): tokio's clock is paused
//! and jumps to the next timer whenever every task is waiting, and the
//! broker reads a [`VirtualClock`] that follows it, so a case that waits
//! 30 s of lease time takes microseconds and no bound depends on the
//! machine's load.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::clock::{Clock, SystemClock};
use crate::error::BrokerError;
use crate::message::{
    Delivery, EnqueueOptions, EnqueueOutcome, EnqueueRequest, LeaseRequest, ListQuery, Message,
    MessageState, Schedule,
};
use crate::model::{MessageId, QueueConfigPatch, QueueName, RetryPolicy};

/// How late an "arrived by" check may be on a loaded machine.
pub const SLACK_MS: u64 = 1_500;

/// Upper bound for a whole case, so a hanging broker fails instead of hangs.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(60);

/// Upper bound of virtual time for a case that moves the wall clock and
/// lets hours pass (`conformance_tests_schedules!`'s wall cases).
pub const WALL_CASE_TIMEOUT: Duration = Duration::from_secs(6 * 3_600);

thread_local! {
    /// The clock of the case running on this thread, when it is not the
    /// system's (set by [`run_case_virtual`], whose runtime runs every task
    /// of the case on this thread).
    static CASE_CLOCK: std::cell::RefCell<Option<Arc<VirtualClock>>> =
        const { std::cell::RefCell::new(None) };
}

/// The broker's wall time now: the case's [`VirtualClock`] on virtual
/// time, else the system clock (the broker reads the same one).
pub fn now_ms() -> u64 {
    CASE_CLOCK
        .with(|c| c.borrow().as_ref().map(|clock| clock.now_ms()))
        .unwrap_or_else(|| SystemClock.now_ms())
}

/// Sets the case's wall clock to `ms` (tokio's time does not move): what a
/// broker sees after downtime (forward) or a clock step. Only on virtual
/// time ([`run_case_virtual`]); panics on real time, where the wall clock
/// is the system's and cannot be moved.
pub fn set_wall_time(ms: u64) {
    case_clock("set_wall_time").set(ms);
}

/// Moves the case's wall clock by `delta_ms` (negative: back). Only on
/// virtual time, like [`set_wall_time`].
pub fn jump_wall_time(delta_ms: i64) {
    case_clock("jump_wall_time").jump(delta_ms);
}

fn case_clock(what: &str) -> Arc<VirtualClock> {
    CASE_CLOCK.with(|c| c.borrow().clone()).unwrap_or_else(|| {
        panic!("{what} needs virtual time: run the case with the virtual_time form of the macro")
    })
}

/// A wall clock that follows tokio's clock: the system time when it was
/// made plus the tokio time elapsed since, plus an offset a case may move
/// ([`set_wall_time`], [`jump_wall_time`]). Under a paused runtime
/// (`start_paused`) it moves only when tokio's time does or the case moves
/// it, so a broker reading it and timing its waits with tokio sees one
/// consistent time. Clones share the offset.
#[derive(Clone, Debug)]
pub struct VirtualClock {
    base_ms: u64,
    origin: tokio::time::Instant,
    /// Added to the followed time; moved only by the case.
    offset_ms: Arc<AtomicI64>,
}

impl VirtualClock {
    /// Must be made inside the runtime whose time it follows.
    pub fn new() -> Self {
        Self {
            base_ms: SystemClock.now_ms(),
            origin: tokio::time::Instant::now(),
            offset_ms: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Moves the wall clock by `delta_ms` (negative: back).
    pub fn jump(&self, delta_ms: i64) {
        self.offset_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }

    /// Sets the wall clock to `ms` now; it goes on moving with tokio's time.
    pub fn set(&self, ms: u64) {
        let delta = ms as i64 - self.now_ms() as i64;
        self.jump(delta);
    }

    fn followed_ms(&self) -> u64 {
        self.base_ms + self.origin.elapsed().as_millis() as u64
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> u64 {
        let offset = self.offset_ms.load(Ordering::SeqCst);
        (self.followed_ms() as i64 + offset).max(0) as u64
    }
}

/// A queue name unique to this case and this run, so cases can share one
/// backend (a Redis server) with each other and with other test processes.
pub fn queue(case: &str, suffix: &str) -> QueueName {
    let tag: u64 = rand::random();
    let name = format!("ct.{case}.{suffix}.{tag:016x}");
    QueueName::new(name).unwrap_or_else(|e| panic!("bad test queue name: {e}"))
}

pub fn id(s: &str) -> MessageId {
    MessageId::new(s).unwrap_or_else(|e| panic!("bad test id {s:?}: {e}"))
}

/// A short retry backoff so retry cases finish quickly: 100 ms, doubling,
/// at most 1 s.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        initial_ms: 100,
        max_ms: 1_000,
        multiplier: 2.0,
    }
}

/// Creates a fresh queue with [`fast_retry`] and `max_attempts`.
pub async fn make_queue(b: &Arc<dyn Broker>, q: &QueueName, max_attempts: u32) {
    let patch = QueueConfigPatch {
        max_attempts: Some(max_attempts),
        retry: Some(fast_retry()),
        ..QueueConfigPatch::default()
    };
    must(b.put_queue(q, patch).await, "put_queue");
}

/// A request with this id (or a generated one), schedule and payload.
pub fn req(id_: Option<&str>, schedule: Schedule, payload: &str) -> EnqueueRequest {
    EnqueueRequest {
        id: id_.map(id),
        schedule,
        payload: payload.as_bytes().to_vec(),
        ..EnqueueRequest::default()
    }
}

/// Enqueues one request and returns its outcome, panicking on any error.
pub async fn put(b: &Arc<dyn Broker>, q: &QueueName, r: EnqueueRequest) -> EnqueueOutcome {
    let mut results = must(
        b.enqueue(q, vec![r], EnqueueOptions::default()).await,
        "enqueue",
    );
    assert_eq!(results.len(), 1, "enqueue of one item gave {results:?}");
    must(results.remove(0), "enqueue item")
}

/// Enqueues a ready message with this id.
pub async fn put_now(b: &Arc<dyn Broker>, q: &QueueName, id_: &str) -> EnqueueOutcome {
    put(b, q, req(Some(id_), Schedule::Now, id_)).await
}

pub async fn lease(b: &Arc<dyn Broker>, q: &QueueName, max: u32, wait_ms: u64) -> Vec<Delivery> {
    lease_for(b, q, max, wait_ms, None).await
}

pub async fn lease_for(
    b: &Arc<dyn Broker>,
    q: &QueueName,
    max: u32,
    wait_ms: u64,
    lease_ms: Option<u64>,
) -> Vec<Delivery> {
    let request = LeaseRequest {
        max,
        wait_ms,
        lease_ms,
    };
    must(b.lease(std::slice::from_ref(q), request).await, "lease")
}

/// Leases exactly one message (waiting up to a few seconds), panicking
/// otherwise.
pub async fn lease_one(b: &Arc<dyn Broker>, q: &QueueName, lease_ms: Option<u64>) -> Delivery {
    let mut got = lease_for(b, q, 1, 5_000, lease_ms).await;
    assert_eq!(got.len(), 1, "expected one delivery from {q}, got {got:?}");
    got.remove(0)
}

pub async fn get(b: &Arc<dyn Broker>, q: &QueueName, id_: &MessageId) -> Message {
    must(b.get(q, id_).await, "get")
}

/// Leases `id_` (which must be the only ready message) and nacks it with
/// no delay, `attempts` times, checking the attempt numbers from 1.
pub async fn nack_times(b: &Arc<dyn Broker>, q: &QueueName, id_: &MessageId, attempts: u32) {
    for attempt in 1..=attempts {
        let d = lease_one(b, q, None).await;
        assert_eq!(&d.id, id_, "leased the wrong message");
        assert_eq!(d.attempt, attempt, "attempt numbers count deliveries");
        let nack = crate::message::Nack {
            delay_ms: Some(0),
            ..crate::message::Nack::default()
        };
        must(b.nack(q, id_, &d.lease_id, nack).await, "nack");
    }
}

/// Waits until the wall clock has moved past `t`, so that two events get
/// distinct millisecond timestamps (dead-letter order is by time of death).
pub async fn tick_past(t: u64) {
    while now_ms() <= t {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Polls `check` every 20 ms until it returns true or `within_ms` passes.
/// Only for effects no call can wait on (a lease expiring unobserved).
pub async fn eventually<F, Fut>(within_ms: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_millis(within_ms);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within_ms} ms waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every message of `q` by state, up to `limit` a state, the states in
/// [`MessageState::ALL`] order (what the model and crash tests compare).
pub async fn list_by_state(
    b: &dyn Broker,
    q: &QueueName,
    limit: u32,
) -> Vec<(MessageState, Vec<Message>)> {
    let mut out = Vec::new();
    for state in MessageState::ALL {
        let query = ListQuery {
            state,
            after: None,
            limit,
        };
        out.push((state, must(b.list(q, query).await, "list")));
    }
    out
}

/// Unwraps a broker result, naming the call in the panic.
pub fn must<T>(r: Result<T, BrokerError>, call: &str) -> T {
    r.unwrap_or_else(|e| panic!("{call} failed: {e:?}"))
}

pub fn assert_not_found<T: std::fmt::Debug>(r: Result<T, BrokerError>, what: &str) {
    assert!(
        matches!(r, Err(BrokerError::MessageNotFound { .. })),
        "{what}: expected MessageNotFound, got {r:?}"
    );
}

pub fn assert_queue_not_found<T: std::fmt::Debug>(r: Result<T, BrokerError>, what: &str) {
    assert!(
        matches!(r, Err(BrokerError::QueueNotFound(_))),
        "{what}: expected QueueNotFound, got {r:?}"
    );
}

pub fn assert_lease_mismatch<T: std::fmt::Debug>(r: Result<T, BrokerError>, what: &str) {
    assert!(
        matches!(r, Err(BrokerError::LeaseMismatch { .. })),
        "{what}: expected LeaseMismatch, got {r:?}"
    );
}

pub fn assert_invalid_state<T: std::fmt::Debug>(r: Result<T, BrokerError>, what: &str) {
    assert!(
        matches!(r, Err(BrokerError::InvalidState { .. })),
        "{what}: expected InvalidState, got {r:?}"
    );
}

/// Runs one case on virtual time: a current-thread runtime with tokio's
/// clock paused (it jumps to the next timer whenever all tasks wait), and a
/// [`VirtualClock`] that `make_case` hands to the broker it builds and that
/// [`now_ms`] reads. For brokers whose every wait is a tokio timer or a
/// tokio wake-up; a broker that waits on another thread (a store's fsync)
/// would see time jump past its deadlines meanwhile.
pub fn run_case_virtual<F, Fut>(make_case: F)
where
    F: FnOnce(Arc<VirtualClock>) -> Fut,
    Fut: Future<Output = ()>,
{
    run_case_virtual_within(CASE_TIMEOUT, make_case);
}

/// [`run_case_virtual`] with a longer bound, for cases that let hours of
/// virtual time pass (a DST transition). Costs nothing when a broker
/// hangs: with every task waiting, tokio's paused clock jumps straight to
/// the bound.
pub fn run_case_virtual_within<F, Fut>(timeout: Duration, make_case: F)
where
    F: FnOnce(Arc<VirtualClock>) -> Fut,
    Fut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"));
    runtime.block_on(async {
        let clock = Arc::new(VirtualClock::new());
        CASE_CLOCK.with(|c| *c.borrow_mut() = Some(clock.clone()));
        let outcome = tokio::time::timeout(timeout, make_case(clock)).await;
        CASE_CLOCK.with(|c| *c.borrow_mut() = None);
        if outcome.is_err() {
            panic!("case did not finish within {timeout:?} of virtual time");
        }
    });
}

/// Runs one case on a fresh 2-worker runtime with [`CASE_TIMEOUT`]; what
/// the conformance macros expand to, so callers need no tokio attribute.
pub fn run_case<F: Future<Output = ()>>(case: F) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"));
    runtime.block_on(async {
        if tokio::time::timeout(CASE_TIMEOUT, case).await.is_err() {
            panic!("case did not finish within {CASE_TIMEOUT:?}");
        }
    });
}
