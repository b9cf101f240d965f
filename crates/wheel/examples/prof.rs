//! Profiling driver: `prof N [cancel]` inserts N random deadlines (0..60 000)
//! into a fresh wheel, then fires all of them (or cancels all, in insertion
//! order), and prints the best per-entry on-CPU time of 7 rounds. Meant for
//! `perf record`; the `cputime` bench is the reference measurement.
use delayd_wheel::Wheel;
use std::hint::black_box;

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux only)")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(1_000_000, |s| s.parse().expect("N"));
    let mode = args.next().unwrap_or_default();
    let cancel = mode == "cancel";
    let mut state = 42u64;
    let ds: Vec<u64> = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % 60_000
        })
        .collect();
    if mode == "steady" {
        // N pending; each op inserts one at now + rand and fires the earliest.
        let mut w = Wheel::new();
        for (k, &d) in ds.iter().enumerate() {
            w.insert(d, k as u64);
        }
        let mut best = f64::INFINITY;
        for round in 0..5 {
            let t0 = cpu_ns();
            for i in 0..1_000_000usize {
                let now = w.now();
                let x = ds[(i * 7 + round) % n];
                w.insert(now + x, i as u64);
                let due = w.next_deadline().unwrap_or(now);
                black_box(w.poll_expired(due));
            }
            best = best.min((cpu_ns() - t0) as f64 / 1e6);
        }
        println!("best steady {best:.1} ns/op");
        return;
    }
    let reps = (3_000_000 / n).max(1);
    let mut best = f64::INFINITY;
    let mut handles = Vec::with_capacity(n);
    for _ in 0..7 {
        let t0 = cpu_ns();
        for _ in 0..reps {
            let mut w = Wheel::new();
            handles.clear();
            for (k, &d) in ds.iter().enumerate() {
                let h = w.insert(d, k as u64);
                if cancel {
                    handles.push(h);
                }
            }
            let mut sum = 0;
            for &h in &handles {
                sum += w.cancel(h).unwrap_or(0);
            }
            while let Some(e) = w.poll_expired(60_000) {
                sum += e.value;
            }
            black_box(sum);
        }
        best = best.min((cpu_ns() - t0) as f64 / (n * reps) as f64);
    }
    let what = if cancel {
        "insert+cancel"
    } else {
        "insert+fire"
    };
    println!("best {what} {best:.1} ns/op");
}
