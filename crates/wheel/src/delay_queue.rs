//! [`DelayQueue`]: an async keyed delay queue over [`KeyedWheel`] (feature
//! `tokio`).
//!
//! Exactly one `tokio::time::Sleep` is owned and re-armed to the wheel's
//! earliest deadline; no per-entry tokio timers exist. Wheel time is whole
//! milliseconds since the queue was created: deadlines round *up* to the next
//! millisecond and the current time rounds *down*, so nothing fires early.

use std::future::{poll_fn, Future};
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::{Instant, Sleep};

use crate::error::DuplicateKey;
use crate::keyed::KeyedWheel;

/// Async keyed delay queue yielding expired `(key, value)` pairs.
///
/// As a [`Stream`] it never ends: when empty, `poll_next` returns `Pending`
/// (not `None`) and is woken by the next insert, so one queue can back a
/// long-lived driver task. Methods take `&mut self`; put the queue in the task
/// that drives it (or behind a mutex) rather than sharing it.
pub struct DelayQueue<K: Hash + Eq + Clone, V> {
    wheel: KeyedWheel<K, V>,
    origin: Instant,
    /// The single timer, armed for `armed_for` (wheel milliseconds).
    sleep: Pin<Box<Sleep>>,
    armed_for: Option<u64>,
    /// Task parked in `poll_next`, woken when an insert moves the deadline.
    waker: Option<Waker>,
}

impl<K: Hash + Eq + Clone, V> DelayQueue<K, V> {
    /// Creates an empty queue whose time origin is `Instant::now()`.
    pub fn new() -> Self {
        let origin = Instant::now();
        DelayQueue {
            wheel: KeyedWheel::new(),
            origin,
            sleep: Box::pin(tokio::time::sleep_until(origin)),
            armed_for: None,
            waker: None,
        }
    }

    /// Schedules `value` under `key` to fire at `when`.
    pub fn insert_at(&mut self, key: K, when: Instant, value: V) -> Result<(), DuplicateKey<K>> {
        let deadline = self.deadline_ms(when);
        self.wheel.insert(key, deadline, value)?;
        self.on_deadline_change();
        Ok(())
    }

    /// Schedules `value` under `key` to fire `delay` from now.
    pub fn insert(&mut self, key: K, delay: Duration, value: V) -> Result<(), DuplicateKey<K>> {
        self.insert_at(key, Instant::now() + delay, value)
    }

    pub fn cancel(&mut self, key: &K) -> Option<V> {
        // A later-than-needed sleep is harmless: poll_next re-arms on wake.
        self.wheel.cancel(key)
    }

    /// Moves `key` to `when`; `false` if the key is not scheduled.
    pub fn reschedule(&mut self, key: &K, when: Instant) -> bool {
        let deadline = self.deadline_ms(when);
        let found = self.wheel.reschedule(key, deadline);
        if found {
            self.on_deadline_change();
        }
        found
    }

    pub fn contains(&self, key: &K) -> bool {
        self.wheel.contains(key)
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Polls for the next expired entry; see the type docs for `Pending`.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<(K, V)> {
        loop {
            let now = self.now_ms();
            if let Some((key, _, value)) = self.wheel.poll_expired(now) {
                return Poll::Ready((key, value));
            }
            let Some(next) = self.wheel.next_deadline() else {
                self.park(cx);
                return Poll::Pending;
            };
            if self.armed_for != Some(next) {
                let (at, exact) = self.instant_for(next);
                self.sleep.as_mut().reset(at);
                // A clamped arm is redone on every poll so it keeps moving out.
                self.armed_for = exact.then_some(next);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                self.park(cx);
                return Poll::Pending;
            }
            // The sleep elapsed: loop to collect what is now due.
        }
    }

    /// Waits for the next expired entry (never returns while empty).
    pub async fn next_expired(&mut self) -> (K, V) {
        poll_fn(|cx| self.poll_expired(cx)).await
    }

    fn park(&mut self, cx: &Context<'_>) {
        match &mut self.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
    }

    /// An insert or reschedule may have made the earliest deadline earlier
    /// than the armed sleep: wake the parked task so it re-arms.
    fn on_deadline_change(&mut self) {
        let next = self.wheel.next_deadline();
        let earlier = match (next, self.armed_for) {
            (Some(n), Some(armed)) => n < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if earlier {
            if let Some(w) = self.waker.take() {
                w.wake();
            }
        }
    }

    fn now_ms(&self) -> u64 {
        let since = Instant::now().saturating_duration_since(self.origin);
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }

    fn deadline_ms(&self, when: Instant) -> u64 {
        let since = when.saturating_duration_since(self.origin);
        let ms = since.as_nanos().div_ceil(1_000_000);
        u64::try_from(ms).unwrap_or(u64::MAX)
    }

    /// The instant for wheel time `ms`, and whether it is exact. Deadlines
    /// beyond ~30 years from now (tokio's own "far future") are clamped.
    fn instant_for(&self, ms: u64) -> (Instant, bool) {
        let far = Instant::now() + Duration::from_secs(86_400 * 365 * 30);
        match self.origin.checked_add(Duration::from_millis(ms)) {
            Some(at) if at <= far => (at, true),
            _ => (far, false),
        }
    }
}

impl<K: Hash + Eq + Clone, V> Default for DelayQueue<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone + Unpin, V: Unpin> Stream for DelayQueue<K, V> {
    type Item = (K, V);

    /// Never returns `Ready(None)`: an empty queue is `Pending`.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<(K, V)>> {
        self.get_mut().poll_expired(cx).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Structural check: many entries, still one `Sleep`, armed for the
    /// earliest deadline.
    #[tokio::test(start_paused = true)]
    async fn one_sleep_armed_for_earliest() {
        let mut q = DelayQueue::new();
        for i in 0..1_000u64 {
            q.insert(i, Duration::from_millis(5_000 - i), ()).unwrap();
        }
        let waker = futures_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(q.poll_expired(&mut cx).is_pending());
        assert_eq!(q.armed_for, Some(4_001));
        assert_eq!(q.sleep.deadline(), q.origin + Duration::from_millis(4_001));
        assert_eq!(q.next_expired().await, (999, ()));
        assert!(q.poll_expired(&mut cx).is_pending());
        assert_eq!(q.armed_for, Some(4_002));
    }

    fn futures_waker() -> Waker {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        Waker::from(std::sync::Arc::new(Noop))
    }
}
