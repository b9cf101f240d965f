//! The checker on a 1,000,000-operation history of the reference model
//! (three queues with and without flow, ordered keys, a schedule,
//! crashes): `check` alone, and the file read plus `check` as
//! `delayd check-history` does it. Issue 40 asks for under 10 s.
//!
//! `cargo bench -p delayd-history --bench check_speed`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use delayd_history::model::Model;
use delayd_history::{check, History};

const OPS: usize = 1_000_000;

fn bench(c: &mut Criterion) {
    let history = Model::new(40).run(OPS);
    let mut file = Vec::new();
    history.write(&mut file).expect("write to memory");
    let report = check(&history);
    assert!(report.ok(), "the model's history must pass: {report}");
    println!(
        "history: {} ops, {} MiB as JSON lines; {} deliveries, {} redeliveries",
        history.ops.len(),
        file.len() >> 20,
        report.deliveries,
        report.redeliveries
    );
    let mut group = c.benchmark_group("history_1m");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(40));
    group.bench_function("check", |b| b.iter(|| check(&history)));
    group.bench_function("read_and_check", |b| {
        b.iter(|| check(&History::read(file.as_slice()).expect("read")))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
