//! Partitions, Jepsen style: Redis and two `delayd serve` nodes, each in
//! its own network namespace on its own addresses (`netns`), producers and
//! consumers on both nodes from the test's namespace, and a schedule firing
//! every second. While they run, node A's link to Redis is cut (a silent
//! drop, as a pulled cable) and healed, then node B's link is slowed to a
//! trickle and restored. Checked from the clients' own records:
//! - a node cut off from Redis hands out no lease while cut (it cannot
//!   confirm one), and works again once healed;
//! - every enqueue acknowledged with 201 is delivered;
//! - each message's deliveries are explainable by at-least-once delivery:
//!   attempts increase, a redelivery comes only after the previous lease
//!   expired, nothing is delivered after an acknowledged ack;
//! - no schedule fire time is enqueued twice (two first deliveries), and
//!   none due before the end is missing.
//!
//! Every client call is also recorded as a history (client times around
//! each call; a call cut off by the partition is `unknown`, a lease call
//! `lease_failed`) and the one checker (`delayd_history`) verifies every
//! promise on it by its own rules. Redis never goes down, so the history
//! holds no crash; the run is not drained (a late ack leaves a lease to
//! expire), so each acknowledged enqueue not acked is read at the end.
//!
//! Needs root and `ip netns` (CI and `scripts/test` run as root); without
//! them it fails and says why, never passes unrun.

mod netns;
mod partition_check;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayd_client::{Client, LeaseOptions, NewMessage};
use delayd_history::{self as history, Op, Outcome};

use crate::common::{die_with_parent, Proc, Server};
use crate::history_ops::{lease_op, now_ms, outcome_of};
use netns::{Net, HTTP_PORT, REDIS_PORT};

const QUEUE: &str = "partitioned";
const SCHEDULE: &str = "tick";
const LEASE_MS: u64 = 3_000;
const NODES: [&str; 2] = ["A", "B"];

/// Redis in namespace R, listening on its end of both nodes' links.
fn start_redis(net: &Net, dir: &std::path::Path) -> Proc {
    let mut command = net.command("R", "redis-server");
    command
        .args(["--port", &REDIS_PORT.to_string(), "--bind"])
        .args([net.addr(1, 1), net.addr(2, 1)])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--protected-mode", "no", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    die_with_parent(&mut command);
    let proc = Proc(command.spawn().expect("spawn redis-server"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pong = net
            .command("R", "redis-cli")
            .args(["-h", &net.addr(1, 1), "-p", &REDIS_PORT.to_string(), "ping"])
            .output()
            .expect("redis-cli");
        if String::from_utf8_lossy(&pong.stdout).contains("PONG") {
            return proc;
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        // Polls: a starting redis-server has no event this test can await.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `delayd serve` in `role`'s namespace, on Redis over its own link.
fn start_node(net: &Net, role: &str, cwd: &std::path::Path) -> Server {
    let (redis_subnet, http_subnet) = if role == "A" { (1, 3) } else { (2, 4) };
    let mut command = net.command(role, env!("CARGO_BIN_EXE_delayd"));
    command
        .arg("serve")
        .args([
            "--http",
            &format!("{}:{HTTP_PORT}", net.addr(http_subnet, 2)),
        ])
        .args(["--beanstalk", "off", "--store"])
        .arg(format!(
            "redis://{}:{REDIS_PORT}",
            net.addr(redis_subnet, 1)
        ))
        .current_dir(cwd)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DELAYD_") {
            command.env_remove(name);
        }
    }
    die_with_parent(&mut command);
    Server::spawn(command).unwrap_or_else(|log| panic!("node {role} did not start:\n{log}"))
}

/// One delivery as a consumer saw it.
#[derive(Clone, Debug)]
struct Delivery {
    node: usize,
    attempt: u32,
    requested_at: u64,
    received_at: u64,
    lease_until: u64,
    /// The ack answered 204.
    acked: bool,
}

#[derive(Default)]
struct Record {
    /// Enqueues answered 201.
    created: BTreeSet<String>,
    deliveries: BTreeMap<String, Vec<Delivery>>,
    /// Enqueues that failed (unknown: maybe applied).
    enqueue_failures: usize,
    /// Failed lease calls per node, with the time the call started.
    lease_failures: Vec<(usize, u64)>,
    /// Every call, for the history checker.
    ops: Vec<Op>,
}

async fn producer(node: usize, client: Client, record: Arc<Mutex<Record>>, stop: Arc<AtomicBool>) {
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        let id = format!("n{node}-m{i}");
        i += 1;
        let message = NewMessage::new("job")
            .id(id.clone())
            .delay_ms(rand::random_range(0..1_000));
        let invoke = now_ms();
        let result = client.enqueue(QUEUE, &message).await;
        let mut op = history::Enqueue {
            invoke,
            complete: now_ms(),
            queue: QUEUE.into(),
            id: id.clone(),
            ..Default::default()
        };
        // An error leaves it unknown (maybe applied): no claim either way.
        let answered = match result {
            Ok(done) => {
                assert_eq!(done.id, id);
                op.exists = !done.created;
                if done.created {
                    (op.seq, op.deliver_at) = (Some(done.seq), Some(done.deliver_at));
                }
                true
            }
            Err(err) => {
                op.outcome = outcome_of(&err);
                false
            }
        };
        {
            let mut record = record.lock().expect("record");
            if answered {
                record.created.insert(id);
            } else {
                record.enqueue_failures += 1;
            }
            record.ops.push(Op::Enqueue(op));
        }
        // Paces the producer (real processes on real time); no verdict depends on it.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const LEASE: LeaseOptions = LeaseOptions {
    max: 10,
    wait_ms: 500,
    lease_ms: Some(LEASE_MS),
};

/// One lease call on `node`, recorded: its messages (as history lines) and
/// the call's start and end, or a failed call (None).
async fn lease_once(
    node: usize,
    client: &Client,
    record: &Mutex<Record>,
) -> Option<(Vec<delayd_client::Leased>, (u64, u64))> {
    let requested_at = now_ms();
    let result = client.lease(QUEUE, LEASE).await;
    let received_at = now_ms();
    let mut record = record.lock().expect("record");
    match result {
        Ok(leased) => {
            for message in &leased {
                record_lease(&mut record.ops, message, (requested_at, received_at));
            }
            Some((leased, (requested_at, received_at)))
        }
        Err(_) => {
            record.lease_failures.push((node, requested_at));
            // It may have handed out messages nobody saw.
            record.ops.push(Op::LeaseFailed(history::LeaseFailed {
                invoke: requested_at,
                complete: received_at,
                queue: QUEUE.into(),
            }));
            None
        }
    }
}

async fn consumer(node: usize, client: Client, record: Arc<Mutex<Record>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let Some((leased, times)) = lease_once(node, &client, &record).await else {
            // Backs off after a failed lease while the link is cut; no verdict depends on it.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for message in leased {
            let invoke = now_ms();
            let result = client.ack(QUEUE, &message.id, &message.lease_id).await;
            let ack = Op::Ack(history::LeaseCall {
                invoke,
                complete: now_ms(),
                queue: QUEUE.into(),
                id: message.id.clone(),
                lease_id: message.lease_id.clone(),
                outcome: result.as_ref().err().map_or(Outcome::Ok, outcome_of),
            });
            let mut record = record.lock().expect("record");
            record.ops.push(ack);
            record_delivery(&mut record, node, message, times, result.is_ok());
        }
    }
}

/// A delivery the consumer saw, and whether its ack was answered.
fn record_delivery(
    record: &mut Record,
    node: usize,
    message: delayd_client::Leased,
    (requested_at, received_at): (u64, u64),
    acked: bool,
) {
    let delivery = Delivery {
        node,
        attempt: message.attempt,
        requested_at,
        received_at,
        lease_until: message.lease_until,
        acked,
    };
    record
        .deliveries
        .entry(message.id)
        .or_default()
        .push(delivery);
}

/// One message handed out, and the fire time of the schedule's messages
/// (`tick:<fire time>`).
fn record_lease(
    ops: &mut Vec<Op>,
    message: &delayd_client::Leased,
    (invoke, complete): (u64, u64),
) {
    ops.push(lease_op(QUEUE, message, invoke, complete));
    let fire_at = message.id.strip_prefix(&format!("{SCHEDULE}:"));
    if let Some(fire_at) = fire_at.and_then(|t| t.parse().ok()) {
        ops.push(Op::Fire(history::Fire {
            invoke,
            complete,
            queue: QUEUE.into(),
            schedule: SCHEDULE.into(),
            fire_at,
            seq: message.seq,
        }));
    }
}

/// Reads each acknowledged enqueue no ack was answered for (a late or cut
/// off ack leaves it leased until its lease ends): the history's proof
/// that it is still there, as the run stops undrained.
async fn observe_unacked(client: &Client, record: &mut Record) {
    let acked: BTreeSet<&String> = record
        .deliveries
        .iter()
        .filter(|(_, ds)| ds.iter().any(|d| d.acked))
        .map(|(id, _)| id)
        .collect();
    let unacked: Vec<String> = record
        .created
        .iter()
        .filter(|id| !acked.contains(id))
        .cloned()
        .collect();
    for id in unacked {
        let invoke = now_ms();
        let (state, seq) = match client.get_message(QUEUE, &id).await {
            Ok(m) if m.ended_at.is_some() => (history::Observed::Absent, None),
            Ok(m) if m.state == "dead" => (history::Observed::Dead, Some(m.seq)),
            Ok(m) => (history::Observed::Live, Some(m.seq)),
            Err(err) if err.status() == Some(404) => (history::Observed::Absent, None),
            Err(err) => panic!("GET message {id} after the run: {err}"),
        };
        record.ops.push(Op::Observe(history::Observe {
            invoke,
            complete: now_ms(),
            queue: QUEUE.into(),
            id,
            state,
            seq,
        }));
    }
}

/// Creates the schedule on the node at `base`: its first fire time, and
/// the history's line for the call.
async fn put_schedule(base: &str) -> (u64, Op) {
    let invoke = now_ms();
    let answer: serde_json::Value = reqwest::Client::new()
        .put(format!("{base}/v1/queues/{QUEUE}/schedules/{SCHEDULE}"))
        .json(&serde_json::json!({
            "every_ms": 1000,
            "catchup": "all",
            "message": {"payload": "tick"}
        }))
        .send()
        .await
        .expect("PUT schedule")
        .json()
        .await
        .expect("schedule object");
    // From the cursor the answer reports: with the default `start_at` (the
    // request's time) the fire at `start_at` itself is skipped when the
    // broker's clock has moved on by the time it stores the schedule.
    let first = answer["next_fire_at"].as_u64();
    let first = first.unwrap_or_else(|| panic!("PUT schedule answered {answer}"));
    let every = partition_check::every(&answer);
    assert!(every.is_some(), "fire times not checkable: {answer}");
    let op = Op::Schedule(history::ScheduleChange {
        invoke,
        complete: now_ms(),
        queue: QUEUE.into(),
        schedule: SCHEDULE.into(),
        action: history::ScheduleAction::Put,
        outcome: Outcome::Ok,
        every,
    });
    (first, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_keep_at_least_once_and_fire_each_time_once() {
    let net = match Net::create() {
        Ok(net) => net,
        Err(why) => panic!(
            "redis_partitions cannot run: it needs root and `ip netns` \
             (scripts/test runs as root in CI): {why}"
        ),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let _redis = start_redis(&net, dir.path());
    let nodes: Vec<Server> = NODES
        .iter()
        .map(|role| start_node(&net, role, dir.path()))
        .collect();
    let clients: Vec<Client> = nodes
        .iter()
        .map(|n| {
            Client::new(&format!("http://{}", n.addr))
                .expect("client")
                .with_timeout(Duration::from_secs(5))
        })
        .collect();
    let (first_fire, put) = put_schedule(&format!("http://{}", nodes[1].addr)).await;

    let record = Arc::new(Mutex::new(Record {
        ops: vec![put],
        ..Record::default()
    }));
    let (stop_producers, stop_consumers) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for (node, client) in clients.iter().enumerate() {
        let (r, s) = (record.clone(), stop_producers.clone());
        producers.push(tokio::spawn(producer(node, client.clone(), r, s)));
        let (r, s) = (record.clone(), stop_consumers.clone());
        consumers.push(tokio::spawn(consumer(node, client.clone(), r, s)));
    }

    // Real time is the scenario: each phase (load, cut, heal, slow link) lasts seconds of wall time between real processes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The window is the time the link is surely down: from the moment the
    // command that takes it down returned to the one that brings it up.
    net.set_redis_link("A", false);
    let cut_at = now_ms();
    // Node A's consumer may spend the whole cut in acks that time out (one
    // per message of its last lease), so the test asks A for a lease itself
    // while the link is surely down: the call must fail.
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let Some((leased, times)) = lease_once(0, &clients[0], &record).await {
        let mut record = record.lock().expect("record");
        for message in leased {
            record_delivery(&mut record, 0, message, times, false);
        }
    }
    let cut_for = Duration::from_millis(now_ms().saturating_sub(cut_at));
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(cut_for)).await;
    let ready_while_cut = clients[0].readyz().await.is_ok();
    let healed_at = now_ms();
    net.set_redis_link("A", true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    net.slow_redis_link("B", Some("2kbit"));
    tokio::time::sleep(Duration::from_secs(4)).await;
    net.slow_redis_link("B", None);
    let links_whole_at = now_ms();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_producers.store(true, Ordering::SeqCst);
    for p in producers {
        p.await.expect("producer");
    }
    // Drain: until every acknowledged enqueue was delivered (or 30 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline
        && !partition_check::all_delivered(&record.lock().expect("record"))
    {
        // Polls: the clients' record of deliveries has no event this test can await.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Lets the consumers ack what the drain handed them; a late ack only makes a redelivery, which the check explains.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop_consumers.store(true, Ordering::SeqCst);
    for c in consumers {
        c.await.expect("consumer");
    }
    let end = now_ms();

    // Every client task has ended: the record is complete.
    let mut record = std::mem::take(&mut *record.lock().expect("record"));
    // Node B: its link to Redis is whole again.
    observe_unacked(&clients[1], &mut record).await;
    let logs = || {
        nodes
            .iter()
            .map(Server::log)
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    assert!(
        !ready_while_cut,
        "node A reported ready while cut off from Redis"
    );
    let window = partition_check::Window { cut_at, healed_at };
    eprintln!("{}", partition_check::summary(&record, window));
    eprintln!(
        "cut at first fire + {} ms, healed at + {} ms",
        cut_at.saturating_sub(first_fire),
        healed_at.saturating_sub(first_fire)
    );
    let violations = partition_check::history(&record, window, first_fire, end);
    // A lease call that failed while a link was cut or slow may still take
    // effect later: its command can sit in the node's socket and reach
    // Redis when the link is back (TCP retransmits it), handing out a
    // message nobody sees. Its effect may land until the links are whole
    // again (plus the retransmission's back-off), not only within the
    // call as the client saw it.
    let mut ops = std::mem::take(&mut record.ops);
    for op in &mut ops {
        if let Op::LeaseFailed(failed) = op {
            if failed.invoke < links_whole_at {
                failed.complete = failed.complete.max(links_whole_at + 3_000);
            }
        }
    }
    let checked = partition_check::checker(ops, end);
    eprintln!("the checker: {checked}");
    assert!(violations.is_empty(), "{violations:#?}\nlogs:\n{}", logs());
    assert!(
        checked.violations.is_empty(),
        "the checker: {checked}\nlogs:\n{}",
        logs()
    );
    drop(nodes);
    drop(net);
}
