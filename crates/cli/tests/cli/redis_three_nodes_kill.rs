//! Multi-node: three `delayd serve` processes on one Redis; producers and
//! consumers spread over all three; one node is SIGKILLed mid-run. Every
//! enqueue acknowledged with 201 is delivered and acked, none is lost, and a
//! message is delivered again only after its previous lease expired (a
//! higher `attempt`, received after the earlier `lease_until`), never after
//! a successful ack, and never before its `deliver_at`. At the end the
//! surviving nodes report the queue empty.
//!
//! Every call the clients make is also recorded as a history (client
//! times around each call) and the one checker (`delayd_history`) proves
//! the same promises again by its own rules, and the rest of them
//! (attempts, backoff after an expiry). The kill is a `crash` that ends no
//! lease: a node is stateless, its leases live on Redis and end only at
//! their `lease_until` (or by an ack that may have reached Redis: an ack
//! cut off by the kill is `unknown`, a lease call cut off by it
//! `lease_failed`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::redis::Redis;
use crate::common::{die_with_parent, serve_command, Server};
use crate::history_ops::{lease_op, now_ms, outcome_of};
use delayd_client::{Client, LeaseOptions, NewMessage, QueuePut, QueueStats, Retry};
use delayd_history::{self as history, Op, Outcome};

const QUEUE: &str = "three-nodes";
const PER_PRODUCER: usize = 500;
const LEASE_MS: u64 = 2_000;
/// The node that is SIGKILLed (index into the three nodes).
const VICTIM: usize = 1;
/// A consumer's "work" per message before it acks: slower than the
/// producers, so consumers hold leases most of the time (a batch of 20 takes
/// 160 ms, well within the lease).
const WORK: Duration = Duration::from_millis(8);

/// A `delayd serve --store redis://...` process.
struct Node {
    server: Server,
}

impl Node {
    fn start(redis_port: u16, cwd: &Path) -> Node {
        let store = format!("redis://127.0.0.1:{redis_port}");
        let args = [
            "--http",
            "127.0.0.1:0",
            "--beanstalk",
            "off",
            "--store",
            &store,
        ];
        let mut command = serve_command(&args, Some(cwd), &[]);
        die_with_parent(&mut command);
        match Server::spawn(command) {
            Ok(server) => Node { server },
            Err(log) => panic!("no \"HTTP API listening\" line; log:\n{log}"),
        }
    }

    fn client(&self) -> Client {
        Client::new(&format!("http://{}", self.server.addr))
            .expect("client")
            .with_timeout(Duration::from_secs(10))
    }

    fn log(&self) -> String {
        self.server.log()
    }
}

/// One message as a consumer received it.
#[derive(Clone, Debug)]
struct Delivery {
    id: String,
    attempt: u32,
    node: usize,
    received_at: u64,
    deliver_at: u64,
    lease_until: u64,
    /// The ack answered 204.
    acked: bool,
    /// The ack was sent but the node died before answering: it may or may
    /// not have been applied.
    ack_unknown: bool,
}

#[derive(Default)]
struct Record {
    /// Enqueues answered 201: id -> deliver_at from the answer.
    created: HashMap<String, u64>,
    /// Enqueues that did not answer 201 (the node died mid-request).
    unknown: HashSet<String>,
    deliveries: Vec<Delivery>,
    /// Unexpected errors seen by producers and consumers on live nodes.
    errors: Vec<String>,
    /// Every call, for the checker.
    ops: Vec<Op>,
}

async fn producer(
    node: usize,
    client: Client,
    record: Arc<Mutex<Record>>,
    killed: Arc<[AtomicBool; 3]>,
) {
    for i in 0..PER_PRODUCER {
        let id = format!("n{node}-m{i}");
        let delay = rand::random_range(0..=2_000u64);
        let message = NewMessage::new(format!("payload of {id}"))
            .id(id.clone())
            .delay_ms(delay);
        let invoke = now_ms();
        let result = client.enqueue(QUEUE, &message).await;
        let mut op = history::Enqueue {
            invoke,
            complete: now_ms(),
            queue: QUEUE.into(),
            id: id.clone(),
            ..Default::default()
        };
        match &result {
            Ok(done) if done.id != id => op.outcome = Outcome::Unknown,
            Ok(done) if done.created => {
                (op.seq, op.deliver_at) = (Some(done.seq), Some(done.deliver_at));
            }
            Ok(_) => op.exists = true,
            Err(err) => op.outcome = outcome_of(err),
        }
        record.lock().unwrap().ops.push(Op::Enqueue(op));
        match result {
            Ok(done) if done.created && done.id == id => {
                record.lock().unwrap().created.insert(id, done.deliver_at);
            }
            Ok(done) => {
                let mut record = record.lock().unwrap();
                record
                    .errors
                    .push(format!("node {node}: enqueue {id} answered {done:?}"));
                record.unknown.insert(id);
            }
            Err(err) => {
                let mut record = record.lock().unwrap();
                record.unknown.insert(id.clone());
                if killed[node].load(Ordering::SeqCst) {
                    return; // this node is gone: the producer stops
                }
                record
                    .errors
                    .push(format!("node {node}: enqueue {id} failed: {err}"));
            }
        }
        // Paces the producer (real processes on real time); no verdict depends on it.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

async fn consumer(
    node: usize,
    client: Client,
    record: Arc<Mutex<Record>>,
    killed: Arc<[AtomicBool; 3]>,
    stop: Arc<AtomicBool>,
    acks: Arc<AtomicUsize>,
    held: Arc<[AtomicUsize; 3]>,
) {
    let options = LeaseOptions {
        max: 20,
        wait_ms: 1_000,
        lease_ms: None,
    };
    let give_up = Instant::now() + Duration::from_secs(120);
    while !stop.load(Ordering::SeqCst) && Instant::now() < give_up {
        let invoke = now_ms();
        let leased = match client.lease(QUEUE, options).await {
            Ok(leased) => leased,
            Err(err) => {
                // It may have handed out messages nobody saw.
                record
                    .lock()
                    .unwrap()
                    .ops
                    .push(Op::LeaseFailed(history::LeaseFailed {
                        invoke,
                        complete: now_ms(),
                        queue: QUEUE.into(),
                    }));
                if killed[node].load(Ordering::SeqCst) {
                    return;
                }
                record
                    .lock()
                    .unwrap()
                    .errors
                    .push(format!("node {node}: lease failed: {err}"));
                // Backs off after a failed lease while a node is down; no verdict depends on it.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let received_at = now_ms();
        held[node].fetch_add(leased.len(), Ordering::SeqCst);
        // Every message handed out is recorded as delivered at once, so the
        // ones the killed node's consumers never got to are counted too.
        let first = {
            let mut record = record.lock().unwrap();
            let first = record.deliveries.len();
            for message in &leased {
                record
                    .ops
                    .push(lease_op(QUEUE, message, invoke, received_at));
            }
            record
                .deliveries
                .extend(leased.iter().map(|message| Delivery {
                    id: message.id.clone(),
                    attempt: message.attempt,
                    node,
                    received_at,
                    deliver_at: message.deliver_at,
                    lease_until: message.lease_until,
                    acked: false,
                    ack_unknown: false,
                }));
            first
        };
        for (index, message) in leased.iter().enumerate() {
            tokio::time::sleep(WORK).await;
            let invoke = now_ms();
            let result = client.ack(QUEUE, &message.id, &message.lease_id).await;
            let complete = now_ms();
            held[node].fetch_sub(1, Ordering::SeqCst);
            let dead = killed[node].load(Ordering::SeqCst);
            let mut record = record.lock().unwrap();
            record.ops.push(Op::Ack(history::LeaseCall {
                invoke,
                complete,
                queue: QUEUE.into(),
                id: message.id.clone(),
                lease_id: message.lease_id.clone(),
                outcome: result.as_ref().err().map_or(Outcome::Ok, outcome_of),
            }));
            match result {
                Ok(()) => {
                    record.deliveries[first + index].acked = true;
                    acks.fetch_add(1, Ordering::SeqCst);
                }
                // lease_mismatch: the lease expired before the ack (a slow
                // consumer); the message comes back with a higher attempt.
                Err(err) if err.code() == Some("lease_mismatch") => {}
                Err(_) if dead => record.deliveries[first + index].ack_unknown = true,
                Err(err) => record
                    .errors
                    .push(format!("node {node}: ack {} failed: {err}", message.id)),
            }
            if dead {
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_three_nodes_kill() {
    let started = Instant::now();
    let redis = Redis::start();
    let cwd = tempfile::tempdir().expect("tempdir");
    let mut nodes: Vec<Node> = (0..3)
        .map(|_| Node::start(redis.port, cwd.path()))
        .collect();
    let clients: Vec<Client> = nodes.iter().map(Node::client).collect();

    let put_at = now_ms();
    let put = clients[0]
        .put_queue(
            QUEUE,
            &QueuePut {
                lease_ms: Some(LEASE_MS),
                max_attempts: Some(10),
                retry: Some(Retry {
                    initial_ms: 200,
                    max_ms: 1_000,
                    multiplier: 2.0,
                }),
                push: None,
                flow: None,
                retain_ms: None,
            },
        )
        .await
        .expect("PUT queue");
    assert!(put.created, "the queue was new");
    let queue_config = Op::QueueConfig(history::QueueConfig {
        invoke: put_at,
        complete: now_ms(),
        queue: QUEUE.into(),
        outcome: Outcome::Ok,
        max_attempts: Some(10),
        retry: Some(history::Retry {
            initial_ms: 200,
            max_ms: 1_000,
            multiplier: 2.0,
        }),
        flow: None,
    });
    for (n, client) in clients.iter().enumerate() {
        let queue = client.get_queue(QUEUE).await.expect("GET queue");
        assert_eq!(queue.config.lease_ms, LEASE_MS, "node {n} sees the config");
    }

    let record = Arc::new(Mutex::new(Record {
        ops: vec![queue_config],
        ..Record::default()
    }));
    let killed: Arc<[AtomicBool; 3]> = Arc::new(Default::default());
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicUsize::new(0));
    let held: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());

    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for (n, client) in clients.iter().enumerate() {
        producers.push(tokio::spawn(producer(
            n,
            client.clone(),
            record.clone(),
            killed.clone(),
        )));
        for _ in 0..2 {
            consumers.push(tokio::spawn(consumer(
                n,
                client.clone(),
                record.clone(),
                killed.clone(),
                stop.clone(),
                acks.clone(),
                held.clone(),
            )));
        }
    }

    // SIGKILL the victim after about a third of the deliveries, while its
    // consumers hold un-acked leases.
    let total = 3 * PER_PRODUCER;
    // A bound on progress generous enough for a loaded machine (it ends a
    // stuck run; it is not a speed verdict).
    let deadline = Instant::now() + Duration::from_secs(180);
    while acks.load(Ordering::SeqCst) < total / 3 || held[VICTIM].load(Ordering::SeqCst) < 5 {
        if Instant::now() >= deadline {
            // The record's lock is released before the panic (a panic
            // holding it would poison it for the consumers).
            let errors = format!("{:?}", record.lock().unwrap().errors);
            panic!(
                "only {} acks after 180 s; errors: {errors}",
                acks.load(Ordering::SeqCst)
            );
        }
        // Polls: the nodes' progress has no event this test can await.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    killed[VICTIM].store(true, Ordering::SeqCst);
    let kill_at = now_ms();
    nodes[VICTIM].server.kill9();
    // A stateless node died: what it leased stays leased on Redis until
    // its `lease_until`, so the crash ends no lease.
    let crash = Op::Crash(history::Crash {
        invoke: kill_at,
        complete: now_ms(),
        ends_leases: false,
        maybe: false,
    });
    record.lock().unwrap().ops.push(crash);
    let acks_at_kill = acks.load(Ordering::SeqCst);
    let held_at_kill = held[VICTIM].load(Ordering::SeqCst);
    let created_at_kill = record.lock().unwrap().created.len();

    for producer in producers {
        tokio::time::timeout(Duration::from_secs(30), producer)
            .await
            .expect("producers finish")
            .expect("producer task");
    }

    // Until every acknowledged enqueue was acked and the survivors report
    // an empty queue.
    let survivors: Vec<usize> = (0..3).filter(|&n| n != VICTIM).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_stats: BTreeMap<usize, QueueStats> = BTreeMap::new();
    loop {
        let missing: Vec<String> = {
            let record = record.lock().unwrap();
            let acked: HashSet<&str> = record
                .deliveries
                .iter()
                .filter(|d| d.acked || d.ack_unknown)
                .map(|d| d.id.as_str())
                .collect();
            let mut missing: Vec<String> = record
                .created
                .keys()
                .filter(|id| !acked.contains(id.as_str()))
                .cloned()
                .collect();
            missing.sort();
            missing
        };
        let mut empty = true;
        for &n in &survivors {
            match clients[n].get_queue(QUEUE).await {
                Ok(queue) => {
                    empty &= queue.stats == QueueStats::default();
                    last_stats.insert(n, queue.stats);
                }
                Err(err) => panic!("GET queue on surviving node {n}: {err}"),
            }
        }
        if missing.is_empty() && empty {
            break;
        }
        if Instant::now() > deadline {
            stop.store(true, Ordering::SeqCst);
            let message = format!(
                "after 60 s: {} acknowledged enqueues never acked (first: {:?}); stats on \
                 survivors: {last_stats:?}; errors: {:?}\nsurvivor log:\n{}",
                missing.len(),
                &missing[..missing.len().min(10)],
                record.lock().unwrap().errors,
                nodes[survivors[0]].log()
            );
            panic!("{message}");
        }
        // Polls: the survivors' redelivery has no event this test can await.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for consumer in consumers {
        tokio::time::timeout(Duration::from_secs(15), consumer)
            .await
            .expect("consumers stop")
            .expect("consumer task");
    }

    let mut record = record.lock().unwrap();
    // Drained: every acknowledged enqueue was acked and the survivors
    // report the queue empty.
    let stop = Op::Stop(history::Stop {
        at: now_ms(),
        drained: true,
    });
    record.ops.push(stop);
    let checked = history::check(&history::History {
        ops: std::mem::take(&mut record.ops),
    });
    assert!(
        record.errors.is_empty(),
        "unexpected errors: {:?}",
        record.errors
    );
    assert!(
        created_at_kill > 0 && created_at_kill < total,
        "the kill came mid-run ({created_at_kill} of {total} enqueued)"
    );
    let victim_created = record
        .created
        .keys()
        .filter(|id| id.starts_with(&format!("n{VICTIM}-")))
        .count();
    assert!(
        victim_created < PER_PRODUCER,
        "the victim's producer was stopped by the kill"
    );
    for n in survivors.iter() {
        let created = record
            .created
            .keys()
            .filter(|id| id.starts_with(&format!("n{n}-")))
            .count();
        assert_eq!(created, PER_PRODUCER, "node {n} accepted every enqueue");
    }

    // Per id, in attempt order.
    let mut by_id: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for delivery in &record.deliveries {
        by_id.entry(&delivery.id).or_default().push(delivery);
    }
    let mut redelivered = 0;
    let mut redelivered_from_victim = 0;
    for (id, deliveries) in by_id.iter_mut() {
        assert!(
            record.created.contains_key(*id) || record.unknown.contains(*id),
            "{id} was delivered but never enqueued"
        );
        deliveries.sort_by_key(|d| d.attempt);
        for d in deliveries.iter() {
            assert!(d.attempt >= 1, "{id}: attempt {} ({d:?})", d.attempt);
            assert!(
                d.received_at >= d.deliver_at,
                "{id} received early: at {} before deliver_at {} ({d:?})",
                d.received_at,
                d.deliver_at
            );
            // A redelivery is rescheduled (backoff from the expiry), so only
            // the first delivery carries the enqueue's deliver_at.
            if let (1, Some(&promised)) = (d.attempt, record.created.get(*id)) {
                assert_eq!(
                    d.deliver_at, promised,
                    "{id}: deliver_at differs from the enqueue answer ({d:?})"
                );
            }
        }
        for pair in deliveries.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            assert!(
                second.attempt > first.attempt,
                "{id}: (id, attempt) delivered twice: {first:?} and {second:?}"
            );
            assert!(
                !first.acked,
                "{id} delivered again after a successful ack: {first:?} then {second:?}"
            );
            assert!(
                second.deliver_at >= first.lease_until,
                "{id} rescheduled before the previous lease expired: {first:?} then {second:?}"
            );
            assert!(
                second.received_at >= first.lease_until,
                "{id} delivered again before the previous lease expired: {first:?} then {second:?}"
            );
        }
        let acked = deliveries.iter().filter(|d| d.acked).count();
        assert!(acked <= 1, "{id} acked {acked} times: {deliveries:?}");
        if let Some(last) = deliveries.last() {
            if record.created.contains_key(*id) {
                // Lost: the last delivery was neither acked nor possibly acked
                // (an ack in flight when its node was killed).
                assert!(
                    last.acked || last.ack_unknown,
                    "{id}: last delivery not acked: {deliveries:?}"
                );
            }
        }
        if deliveries.len() > 1 || deliveries.first().is_some_and(|d| d.attempt > 1) {
            redelivered += 1;
            if deliveries
                .first()
                .is_some_and(|d| d.node == VICTIM && !d.acked)
            {
                redelivered_from_victim += 1;
            }
        }
    }
    for id in record.created.keys() {
        assert!(by_id.contains_key(id.as_str()), "{id} was never delivered");
    }
    assert!(
        redelivered_from_victim > 0,
        "the killed node's consumers held {held_at_kill} leases, yet no message they held \
         was redelivered"
    );
    assert!(checked.violations.is_empty(), "the checker: {checked}");
    assert_eq!(checked.acknowledged, record.created.len(), "{checked}");
    eprintln!(
        "redis_three_nodes_kill: {} enqueued (201), {} unknown, {} deliveries, {} acks at \
         kill ({held_at_kill} leases held by the killed node), {redelivered} redelivered ({redelivered_from_victim} first leased via the \
         killed node), {:?}; the checker: {checked}",
        record.created.len(),
        record.unknown.len(),
        record.deliveries.len(),
        acks_at_kill,
        started.elapsed()
    );
}
