//! The `compare` workloads at N = 10^6, timed by the thread's *on-CPU* time
//! (`/proc/thread-self/schedstat`, nanoseconds) instead of wall time, so the
//! numbers survive a shared, overloaded machine. Each contender runs
//! `ROUNDS` times; the best round is reported.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-wheel cargo bench -p delayd-wheel --bench cputime`
//! (`WHEEL_BENCH_HUGE=1` adds N = 10^7). Linux only.
mod common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::poll_fn;
use std::hint::black_box;
use std::task::Poll;
use std::time::Duration;

use delayd_wheel::Wheel;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;

use common::*;

const ROUNDS: usize = 3;

/// Nanoseconds this thread has spent on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux only)")
}

/// Best-of-`ROUNDS` CPU nanoseconds for one call of `f`. Each round repeats
/// `f` until it has done ~10^6 ops, because schedstat only advances at
/// scheduler ticks and context switches (coarse for short runs).
fn best<R>(n: usize, mut f: impl FnMut() -> R) -> f64 {
    let reps = (1_000_000 / n).max(1);
    (0..ROUNDS)
        .map(|_| {
            let t = cpu_ns();
            for _ in 0..reps {
                black_box(f());
            }
            (cpu_ns() - t) as f64 / reps as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// One result line; `ops` is what the CPU time is divided by.
fn row(workload: &str, n: usize, ops: usize, wheel: f64, heap: f64, tokio: f64) {
    let per = |ns: f64| ns / ops as f64;
    println!(
        "{workload:<14} N={n:>9} | wheel {:>7.1} ns/op ({:>5.1} M/s) | heap {:>7.1} ns/op | tokio-util {:>7.1} ns/op | tokio/wheel {:>5.2}x | heap/wheel {:>5.2}x",
        per(wheel),
        1e3 / per(wheel),
        per(heap),
        per(tokio),
        tokio / wheel,
        heap / wheel,
    );
}

fn main() {
    let rt = runtime();
    for n in sizes() {
        let ds = deadlines(n, 42);
        let wheel = best(n, || wheel_insert_fire(&ds));
        let heap = best(n, || heap_insert_fire(&ds));
        let tokio = best(n, || rt.block_on(tokio_insert_fire(&ds)));
        row("insert_fire", n, n, wheel, heap, tokio);
        let wheel = best(n, || wheel_insert_cancel(&ds));
        let heap = best(n, || heap_insert_cancel(&ds));
        let tokio = best(n, || rt.block_on(tokio_insert_cancel(&ds)));
        row("insert_cancel", n, n, wheel, heap, tokio);
        let extra = deadlines(STEADY_OPS, 9);
        let wheel = steady_wheel(&ds, &extra);
        let heap = steady_heap(&ds, &extra);
        let tokio = steady_tokio(&rt, &ds, &extra);
        row("steady", n, STEADY_OPS, wheel, heap, tokio);
    }
}

/// Steady-state iterations (insert one, fire one) after building N pending.
const STEADY_OPS: usize = 1_000_000;

fn steady_wheel(ds: &[u64], extra: &[u64]) -> f64 {
    let mut w = Wheel::new();
    for (k, &d) in ds.iter().enumerate() {
        w.insert(d, k as u64);
    }
    let t = cpu_ns();
    for (i, &x) in extra.iter().enumerate() {
        let now = w.now();
        w.insert(now + x, i as u64);
        let due = w.next_deadline().unwrap_or(now);
        black_box(w.poll_expired(due));
    }
    (cpu_ns() - t) as f64
}

fn steady_heap(ds: &[u64], extra: &[u64]) -> f64 {
    let mut h = BinaryHeap::new();
    for (k, &d) in ds.iter().enumerate() {
        h.push(Reverse((d, k as u64, k as u64)));
    }
    let (mut now, mut seq) = (0u64, ds.len() as u64);
    let t = cpu_ns();
    for &x in extra {
        h.push(Reverse((now + x, seq, seq)));
        seq += 1;
        if let Some(Reverse((d, _, k))) = h.pop() {
            now = d;
            black_box(k);
        }
    }
    (cpu_ns() - t) as f64
}

fn steady_tokio(rt: &tokio::runtime::Runtime, ds: &[u64], extra: &[u64]) -> f64 {
    rt.block_on(async {
        let mut q = DelayQueue::new();
        let base = Instant::now();
        for (k, &d) in ds.iter().enumerate() {
            q.insert_at(k as u64, base + Duration::from_millis(d));
        }
        let t = cpu_ns();
        for (i, &x) in extra.iter().enumerate() {
            q.insert_at(i as u64, Instant::now() + Duration::from_millis(x));
            loop {
                match poll_fn(|cx| Poll::Ready(q.poll_expired(cx))).await {
                    Poll::Ready(e) => {
                        black_box(e);
                        break;
                    }
                    Poll::Pending => tokio::time::advance(Duration::from_millis(1)).await,
                }
            }
        }
        (cpu_ns() - t) as f64
    })
}
