//! Workloads shared by the `compare` (criterion, wall time) and `cputime`
//! (on-CPU time) benches; see `compare.rs` for how each contender is driven.
#![allow(dead_code)] // each bench binary uses a subset

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::future::poll_fn;
use std::time::Duration;

use delayd_wheel::Wheel;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;

pub const SPAN_MS: u64 = 60_000;

pub fn deadlines(n: usize, seed: u64) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            // splitmix64
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % SPAN_MS
        })
        .collect()
}

pub fn sizes() -> Vec<usize> {
    let mut sizes = vec![10_000, 1_000_000];
    if std::env::var("WHEEL_BENCH_HUGE").is_ok_and(|v| v == "1") {
        sizes.push(10_000_000);
    }
    sizes
}

pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}

// ---- wheel -------------------------------------------------------------------

pub fn wheel_insert_fire(ds: &[u64]) -> u64 {
    let mut w = Wheel::new();
    for (k, &d) in ds.iter().enumerate() {
        w.insert(d, k as u64);
    }
    let mut sum = 0;
    while let Some(e) = w.poll_expired(SPAN_MS) {
        sum += e.value;
    }
    sum
}

pub fn wheel_insert_cancel(ds: &[u64]) -> usize {
    let mut w = Wheel::new();
    let handles: Vec<_> = ds
        .iter()
        .enumerate()
        .map(|(k, &d)| w.insert(d, k as u64))
        .collect();
    handles.into_iter().filter_map(|h| w.cancel(h)).count()
}

// ---- heap --------------------------------------------------------------------

pub fn heap_insert_fire(ds: &[u64]) -> u64 {
    let mut h = BinaryHeap::new();
    let cancelled: HashSet<u64> = HashSet::new();
    for (k, &d) in ds.iter().enumerate() {
        h.push(Reverse((d, k as u64, k as u64)));
    }
    let mut sum = 0;
    while let Some(Reverse((_, _, key))) = h.pop() {
        if !cancelled.contains(&key) {
            sum += key;
        }
    }
    sum
}

pub fn heap_insert_cancel(ds: &[u64]) -> usize {
    let mut h = BinaryHeap::new();
    let mut cancelled = HashSet::new();
    for (k, &d) in ds.iter().enumerate() {
        h.push(Reverse((d, k as u64, k as u64)));
    }
    for k in 0..ds.len() as u64 {
        cancelled.insert(k);
    }
    h.len() + cancelled.len()
}

// ---- tokio-util --------------------------------------------------------------

pub async fn tokio_insert_fire(ds: &[u64]) -> u64 {
    let mut q = DelayQueue::new();
    let base = Instant::now();
    for (k, &d) in ds.iter().enumerate() {
        q.insert_at(k as u64, base + Duration::from_millis(d));
    }
    tokio::time::advance(Duration::from_millis(SPAN_MS + 1)).await;
    let mut sum = 0;
    while let Some(e) = poll_fn(|cx| q.poll_expired(cx)).await {
        sum += e.into_inner();
    }
    sum
}

pub async fn tokio_insert_cancel(ds: &[u64]) -> usize {
    let mut q = DelayQueue::new();
    let base = Instant::now();
    let keys: Vec<_> = ds
        .iter()
        .enumerate()
        .map(|(k, &d)| q.insert_at(k as u64, base + Duration::from_millis(d)))
        .collect();
    keys.iter().map(|key| q.remove(key).into_inner()).count()
}
