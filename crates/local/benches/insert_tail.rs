//! The longest single insert into the broker's in-memory index of messages,
//! with up to 1,000,000 live messages, against `std::collections::HashMap`
//! in the same run (the structure the broker used before; docs/BENCHMARKS.md,
//! "Where the tail came from").
//!
//! Each map gets N inserts of a message-sized entry (an `Arc<str>` id, as
//! `MessageId` is, and a boxed 200-byte record), every insert timed alone.
//! With `DELAYD_BENCH_CHURN=1` each insert beyond the first N/2 also removes
//! the oldest entry (steady churn: tombstones, no growth). Prints the
//! latency percentiles and the longest insert of each map and their ratio.
//! N: env `DELAYD_BENCH_N` (default 1,000,000).
//!
//! `cargo bench -p delayd-local --bench insert_tail`

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use delayd_local::bounded_map::BoundedMap;
use hdrhistogram::Histogram;

/// A message record's size in memory (`codec::MessageRecord` is about this).
type Record = Box<[u8; 200]>;

fn id(i: u64) -> Arc<str> {
    format!("0190a1b2-c3d4-7e5f-8a9b-{i:012x}").into()
}

trait Map {
    fn put(&mut self, key: Arc<str>, value: Record);
    fn take(&mut self, key: &str);
}

impl Map for HashMap<Arc<str>, Record> {
    fn put(&mut self, key: Arc<str>, value: Record) {
        self.insert(key, value);
    }
    fn take(&mut self, key: &str) {
        self.remove(key);
    }
}

impl Map for BoundedMap<Arc<str>, Record> {
    fn put(&mut self, key: Arc<str>, value: Record) {
        self.insert(key, value);
    }
    fn take(&mut self, key: &str) {
        self.remove(key);
    }
}

/// Times every insert (with its removal under churn) into `map`.
fn run(map: &mut impl Map, n: u64, churn: bool) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let keys: Vec<Arc<str>> = (0..n).map(id).collect();
    for (i, key) in keys.iter().enumerate() {
        let record = Box::new([i as u8; 200]);
        let started = Instant::now();
        map.put(Arc::clone(key), record);
        if churn && i as u64 >= n / 2 {
            map.take(&keys[i - (n / 2) as usize]);
        }
        let _ = hist.record(started.elapsed().as_nanos() as u64);
    }
    hist
}

fn report(name: &str, hist: &Histogram<u64>) {
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "{name:>12}: inserts={} mean={:.2} us p99={:.2} us p99.9={:.2} us p99.99={:.2} us max={:.1} us",
        hist.len(),
        hist.mean() / 1000.0,
        us(hist.value_at_quantile(0.99)),
        us(hist.value_at_quantile(0.999)),
        us(hist.value_at_quantile(0.9999)),
        us(hist.max()),
    );
}

fn main() {
    let n = support::env_u64("DELAYD_BENCH_N", 1_000_000);
    let churn = support::env_u64("DELAYD_BENCH_CHURN", 0) == 1;
    println!("n={n} churn={churn}");
    let std_hist = run(&mut HashMap::new(), n, churn);
    report("std HashMap", &std_hist);
    let bounded_hist = run(&mut BoundedMap::default(), n, churn);
    report("BoundedMap", &bounded_hist);
    println!(
        "longest insert: BoundedMap / HashMap = {:.4}x; mean {:.2}x",
        bounded_hist.max() as f64 / std_hist.max() as f64,
        bounded_hist.mean() / std_hist.mean()
    );
}
