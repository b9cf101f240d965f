//! Tokio adapter tests on paused (virtual) time.
#![cfg(feature = "tokio")]

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use delayd_wheel::{DelayQueue, DuplicateKey};
use futures_core::Stream;
use tokio::time::Instant;

/// A waker that records whether it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn flag_waker() -> (Arc<Flag>, Waker) {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    (flag.clone(), Waker::from(flag))
}

#[tokio::test(start_paused = true)]
async fn yields_in_deadline_order_at_virtual_times() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    q.insert(1, Duration::from_millis(30), "a").unwrap();
    q.insert(2, Duration::from_millis(10), "b").unwrap();
    q.insert(3, Duration::from_millis(20), "c").unwrap();
    q.insert_at(4, start + Duration::from_micros(20_500), "d")
        .unwrap();
    assert_eq!(q.len(), 4);
    let mut got = Vec::new();
    while !q.is_empty() {
        let (k, v) = q.next_expired().await;
        got.push((k, v, start.elapsed().as_micros()));
    }
    // "d" at 20.5 ms rounds up to 21 ms: late by < 1 ms, never early.
    assert_eq!(
        got,
        [
            (2, "b", 10_000),
            (3, "c", 20_000),
            (4, "d", 21_000),
            (1, "a", 30_000)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn earlier_insert_wakes_pending_poll() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    q.insert("late", Duration::from_secs(100), ()).unwrap();
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(q.poll_expired(&mut cx).is_pending());
    assert!(!flag.0.load(Ordering::SeqCst));
    q.insert("soon", Duration::from_millis(5), ()).unwrap();
    assert!(
        flag.0.load(Ordering::SeqCst),
        "insert must wake the parked poll"
    );
    assert_eq!(q.next_expired().await, ("soon", ()));
    assert_eq!(start.elapsed(), Duration::from_millis(5));
}

#[tokio::test(start_paused = true)]
async fn empty_stream_is_pending_not_finished() {
    let mut q: DelayQueue<u32, ()> = DelayQueue::default();
    let (flag, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    assert_eq!(Pin::new(&mut q).poll_next(&mut cx), Poll::Pending);
    q.insert(7, Duration::ZERO, ()).unwrap();
    assert!(flag.0.load(Ordering::SeqCst));
    let item = poll_fn(|cx| Pin::new(&mut q).poll_next(cx)).await;
    assert_eq!(item, Some((7, ())));
}

#[tokio::test(start_paused = true)]
async fn cancel_and_reschedule() {
    let start = Instant::now();
    let mut q = DelayQueue::new();
    q.insert("x", Duration::from_millis(10), 1).unwrap();
    q.insert("y", Duration::from_millis(20), 2).unwrap();
    assert_eq!(
        q.insert("y", Duration::ZERO, 3),
        Err(DuplicateKey { key: "y" })
    );
    assert_eq!(q.cancel(&"x"), Some(1));
    assert!(!q.contains(&"x"));
    assert!(q.reschedule(&"y", start + Duration::from_millis(40)));
    assert!(!q.reschedule(&"x", start));
    assert_eq!(q.next_expired().await, ("y", 2));
    assert_eq!(start.elapsed(), Duration::from_millis(40));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn far_future_entry_does_not_spin() {
    let mut q = DelayQueue::new();
    q.insert(1, Duration::from_secs(86_400 * 365 * 100), ())
        .unwrap();
    let (_, waker) = flag_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(q.poll_expired(&mut cx).is_pending());
    q.insert(2, Duration::from_millis(1), ()).unwrap();
    assert_eq!(q.next_expired().await, (2, ()));
    assert_eq!(q.len(), 1);
}
