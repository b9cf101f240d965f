//! Bytes per pending entry at N = 10^6 (value type `u64`), measured with a
//! counting global allocator: live heap bytes after inserting N entries one by
//! one (normal `Vec` growth, no pre-sizing) minus live bytes before, over N.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-wheel cargo bench -p delayd-wheel --bench memory`
//!
//! The allocator wrapper is the only `unsafe` in the crate's targets; it just
//! forwards to `System` and counts (the workspace denies unsafe code).

#![expect(
    unsafe_code,
    reason = "a counting global allocator implements the unsafe GlobalAlloc"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use delayd_wheel::Wheel;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments, so
// `System`'s guarantees carry over; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded verbatim.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded verbatim.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded verbatim.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: u64 = 1_000_000;

fn deadline(k: u64) -> u64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 60_000
}

fn measure<S>(name: &str, build: impl FnOnce() -> S) {
    let before = LIVE.load(Ordering::Relaxed);
    let structure = build();
    let after = LIVE.load(Ordering::Relaxed);
    let per = (after - before) as f64 / N as f64;
    println!("{name:<28} {per:>7.1} bytes/entry");
    black_box(&structure);
    drop(structure);
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    let _guard = rt.enter();
    println!("N = {N}, value = u64");
    measure("delayd_wheel::Wheel", || {
        let mut w = Wheel::new();
        for k in 0..N {
            w.insert(deadline(k), k);
        }
        w
    });
    measure("tokio_util DelayQueue", || {
        let mut q = tokio_util::time::DelayQueue::new();
        let base = tokio::time::Instant::now();
        for k in 0..N {
            q.insert_at(k, base + Duration::from_millis(deadline(k)));
        }
        q
    });
    measure("BinaryHeap<Reverse<(d,s,k)>>", || {
        let mut h = BinaryHeap::new();
        for k in 0..N {
            h.push(Reverse((deadline(k), k, k)));
        }
        h
    });
}
