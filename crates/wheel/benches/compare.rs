//! delayd-wheel vs `tokio_util::time::DelayQueue` vs a `BinaryHeap` baseline.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-wheel cargo bench -p delayd-wheel --bench compare`
//! (`WHEEL_BENCH_HUGE=1` adds N = 10^7).
//!
//! Workloads, each at N = 10^4 and 10^6, deadlines uniform over 0..60_000 ms
//! from a seeded splitmix64 RNG (identical sequence for every contender):
//! - `insert_fire`: build an empty structure, insert N, fire all N.
//! - `insert_cancel`: build an empty structure, insert N, cancel all N.
//! - `steady`: N pending; one iteration = insert one (now + rand) and fire the
//!   earliest one. Setup is outside the timed region.
//!
//! How each contender is driven:
//! - wheel: `Wheel<u64>`; fire = `poll_expired(60_000)` until `None`; steady
//!   state moves `now` to `next_deadline()` and polls one.
//! - tokio-util: one current-thread runtime with paused time, `insert_at`
//!   relative to a base `Instant`. Fire-all: `tokio::time::advance` past the
//!   last deadline, then `poll_fn(|cx| q.poll_expired(cx)).await` until
//!   `None` (the runtime's real waker; with time advanced every internal
//!   `Sleep` is already elapsed, so this never parks). Cancel = `remove`.
//!   Steady: insert, then poll; on `Pending` advance paused time by 1 ms. Time
//!   is measured with `std::time::Instant` via `iter_custom` (tokio's clock is
//!   paused), runtime construction excluded.
//! - heap: `BinaryHeap<Reverse<(deadline, seq, key)>>`; cancel is lazy: the
//!   key goes into a `HashSet` and is skipped when popped (so "cancel all"
//!   does not free the heap; it is the cheapest possible cancel).
mod common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::poll_fn;
use std::hint::black_box;
use std::time::{Duration, Instant as StdInstant};

use common::*;
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use delayd_wheel::Wheel;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;

fn timed_tokio<F, Fut, R>(rt: &Runtime, iters: u64, f: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = R>,
{
    rt.block_on(async {
        let t = StdInstant::now();
        for _ in 0..iters {
            black_box(f().await);
        }
        t.elapsed()
    })
}

fn bench_one_shot(c: &mut Criterion) {
    for n in sizes() {
        let ds = deadlines(n, 42);
        let mut g = c.benchmark_group(format!("n={n}"));
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Elements(n as u64));
        let rt = runtime();
        g.bench_function(BenchmarkId::new("insert_fire", "wheel"), |b| {
            b.iter(|| wheel_insert_fire(&ds))
        });
        g.bench_function(BenchmarkId::new("insert_fire", "heap"), |b| {
            b.iter(|| heap_insert_fire(&ds))
        });
        g.bench_function(BenchmarkId::new("insert_fire", "tokio_util"), |b| {
            b.iter_custom(|iters| timed_tokio(&rt, iters, || tokio_insert_fire(&ds)))
        });
        g.bench_function(BenchmarkId::new("insert_cancel", "wheel"), |b| {
            b.iter(|| wheel_insert_cancel(&ds))
        });
        g.bench_function(BenchmarkId::new("insert_cancel", "heap"), |b| {
            b.iter(|| heap_insert_cancel(&ds))
        });
        g.bench_function(BenchmarkId::new("insert_cancel", "tokio_util"), |b| {
            b.iter_custom(|iters| timed_tokio(&rt, iters, || tokio_insert_cancel(&ds)))
        });
        g.finish();
    }
}

fn bench_steady(c: &mut Criterion) {
    for n in sizes() {
        let ds = deadlines(n, 7);
        let extra = deadlines(1 << 16, 9);
        let mut g = c.benchmark_group(format!("steady/n={n}"));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Elements(1));

        let mut w = Wheel::new();
        for (k, &d) in ds.iter().enumerate() {
            w.insert(d, k as u64);
        }
        let mut i = 0usize;
        g.bench_function("wheel", |b| {
            b.iter(|| {
                let now = w.now();
                w.insert(now + extra[i & 0xFFFF], i as u64);
                i += 1;
                let due = w.next_deadline().unwrap_or(now);
                black_box(w.poll_expired(due))
            })
        });

        let mut h = BinaryHeap::new();
        for (k, &d) in ds.iter().enumerate() {
            h.push(Reverse((d, k as u64, k as u64)));
        }
        let (mut now, mut seq) = (0u64, n as u64);
        g.bench_function("heap", |b| {
            b.iter(|| {
                h.push(Reverse((now + extra[seq as usize & 0xFFFF], seq, seq)));
                seq += 1;
                let top = h.pop();
                if let Some(Reverse((d, _, _))) = top {
                    now = d;
                }
                black_box(top)
            })
        });

        let rt = runtime();
        let (mut q, base) = rt.block_on(async {
            let mut q = DelayQueue::new();
            let base = Instant::now();
            for (k, &d) in ds.iter().enumerate() {
                q.insert_at(k as u64, base + Duration::from_millis(d));
            }
            (q, base)
        });
        let mut j = 0usize;
        g.bench_function("tokio_util", |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = StdInstant::now();
                    for _ in 0..iters {
                        let at = Instant::now() + Duration::from_millis(extra[j & 0xFFFF]);
                        q.insert_at(j as u64, at.max(base));
                        j += 1;
                        loop {
                            let polled =
                                poll_fn(|cx| std::task::Poll::Ready(q.poll_expired(cx))).await;
                            match polled {
                                std::task::Poll::Ready(e) => {
                                    black_box(e);
                                    break;
                                }
                                std::task::Poll::Pending => {
                                    tokio::time::advance(Duration::from_millis(1)).await
                                }
                            }
                        }
                    }
                    t.elapsed()
                })
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench_one_shot, bench_steady);
criterion_main!(benches);
