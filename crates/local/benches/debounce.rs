//! Debounce storm (issue 39): `DELAYD_BENCH_EVENTS` events (default
//! 100,000) over `DELAYD_BENCH_IDS` ids (default 1,000) at
//! `DELAYD_BENCH_RATE` events a second (default 20,000), each an enqueue
//! of its id with `on_conflict: debounce`, `delay_ms` 1,000 and
//! `debounce_max_ms` `DELAYD_BENCH_MAX_MS` (default 10,000: longer than
//! the storm), from 8 producers in batches of 20, while 4 consumers
//! lease and ack. Each id's stream of events (one every 50 ms by default)
//! keeps moving its message's due time, so each id is delivered once,
//! after the stream pauses; with a cap shorter than the storm, also each
//! time the cap comes (an id acked is free: its next event creates a new
//! message). An event whose message is leased becomes its successor.
//!
//! Checked: every id's last delivery carries its last event's payload,
//! and the deliveries are one per message created plus at most one per
//! successor answered (`after_lease`): with the default cap exactly one
//! per id plus the successors. The baseline, in the same run: the same
//! events as plain enqueues of new ids (ids = events). Printed: the events a second
//! reached, the deliveries, the process's CPU time per event (from
//! /proc/self/stat: the broker and the load in one process), on durability
//! `always` (the server's default) and `never`.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, OnConflict, QueueName,
    Schedule,
};
use delayd_local::{Durability, LocalBroker, LocalConfig};

use support::env_u64;

const TICK_EVENTS: u64 = 20;
const PRODUCERS: u64 = 8;

/// The process's user + system CPU time (/proc/self/stat, in clock ticks
/// of 10 ms).
fn cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime is the
    // 14th field of the line, the 12th after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    (fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)) * 10
}

fn event(id: u64, n: u64, debounce: bool) -> EnqueueRequest {
    let plain = EnqueueRequest {
        id: Some(MessageId::new(format!("id-{id}")).expect("id")),
        schedule: Schedule::Delay(1_000),
        payload: format!("event {n}").into_bytes(),
        ..EnqueueRequest::default()
    };
    if !debounce {
        return plain;
    }
    EnqueueRequest {
        on_conflict: OnConflict::Debounce,
        debounce_max_ms: Some(env_u64("DELAYD_BENCH_MAX_MS", 10_000)),
        ..plain
    }
}

/// Last delivered payload per id, and the deliveries.
type Delivered = Arc<Mutex<(BTreeMap<String, String>, u64)>>;

async fn consume(
    broker: Arc<LocalBroker>,
    queue: QueueName,
    out: Delivered,
    stop: Arc<AtomicBool>,
) {
    let request = LeaseRequest {
        max: 100,
        wait_ms: 100,
        lease_ms: None,
    };
    loop {
        let leased = broker
            .lease(std::slice::from_ref(&queue), request.clone())
            .await
            .expect("lease");
        if leased.is_empty() && stop.load(Ordering::SeqCst) {
            return;
        }
        for d in leased {
            broker.ack(&queue, &d.id, &d.lease_id).await.expect("ack");
            let mut out = out.lock().expect("delivered");
            out.0
                .insert(d.id.to_string(), String::from_utf8_lossy(&d.payload).into());
            out.1 += 1;
        }
    }
}

/// One producer's events (see [`storm`]), paced at one batch per `tick`:
/// each id's last payload, the messages created and the successors.
async fn produce(
    broker: Arc<LocalBroker>,
    queue: QueueName,
    p: u64,
    events: u64,
    ids: u64,
    tick: Duration,
    debounce: bool,
) -> (BTreeMap<String, String>, u64, u64) {
    let (mut last, mut created, mut after_lease) = (BTreeMap::new(), 0u64, 0u64);
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mine: Vec<u64> = (p..events).step_by(PRODUCERS as usize).collect();
    for batch in mine.chunks(TICK_EVENTS as usize) {
        ticker.tick().await;
        let requests = batch.iter().map(|&n| event(n % ids, n, debounce)).collect();
        let results = broker
            .enqueue(&queue, requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
        for (result, &n) in results.into_iter().zip(batch) {
            let out = result.expect("debounce");
            after_lease += u64::from(out.after_lease);
            created += u64::from(out.created);
            last.insert(format!("id-{}", n % ids), format!("event {n}"));
        }
    }
    (last, created, after_lease)
}

/// The storm on `durability`; with `debounce` false the baseline: the
/// same events as plain enqueues of new ids (each a message delivered).
async fn storm(durability: Durability, debounce: bool) {
    let (events, rate) = (
        env_u64("DELAYD_BENCH_EVENTS", 100_000),
        env_u64("DELAYD_BENCH_RATE", 20_000),
    );
    let ids = if debounce {
        env_u64("DELAYD_BENCH_IDS", 1_000)
    } else {
        events
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = LocalConfig::new(dir.path());
    config.durability = durability;
    let broker = Arc::new(LocalBroker::open(config).await.expect("open"));
    let queue = QueueName::new("storm").expect("queue");
    let delivered: Delivered = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(consume(
                broker.clone(),
                queue.clone(),
                delivered.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let (cpu0, started) = (cpu_ms(), Instant::now());
    // Producer p sends the events n with n % PRODUCERS == p: its ids are
    // its own (ids is a multiple of PRODUCERS), so each id's events are
    // applied in their order, and the calls overlap as a server's clients'.
    let tick = Duration::from_micros(1_000_000 * TICK_EVENTS * PRODUCERS / rate);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (broker, queue) = (broker.clone(), queue.clone());
            tokio::spawn(produce(broker, queue, p, events, ids, tick, debounce))
        })
        .collect();
    let (mut last, mut created, mut after_lease) = (BTreeMap::new(), 0u64, 0u64);
    for p in producers {
        let (l, c, a) = p.await.expect("producer");
        last.extend(l);
        created += c;
        after_lease += a;
    }
    let produced = started.elapsed();
    let cpu_storm = cpu_ms() - cpu0;
    // The last due times are at most 1 s after the last event.
    while delivered.lock().expect("delivered").0 != last {
        assert!(
            started.elapsed() < produced + Duration::from_secs(30),
            "the last events were not all delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for c in consumers {
        c.await.expect("consumer");
    }
    let deliveries = delivered.lock().expect("delivered").1;
    assert!(
        deliveries >= created && deliveries <= created + after_lease,
        "{deliveries} deliveries for {created} messages created and {after_lease} successors"
    );
    let how = if debounce {
        "debounce"
    } else {
        "plain (baseline)"
    };
    println!(
        "{durability:?}, {how}: {events} events over {ids} ids in {:.2} s = {:.0}/s; \
         {deliveries} deliveries ({created} created, {after_lease} answered after_lease), \
         each id's last with its last event; CPU {:.1} us per event during the storm",
        produced.as_secs_f64(),
        events as f64 / produced.as_secs_f64(),
        cpu_storm as f64 * 1_000.0 / events as f64,
    );
    Arc::into_inner(broker)
        .expect("one broker")
        .shutdown()
        .await
        .expect("shutdown");
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for durability in [Durability::Always, Durability::Never] {
            storm(durability, false).await;
            storm(durability, true).await;
        }
    });
}
