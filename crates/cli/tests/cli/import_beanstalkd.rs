//! `delayd import beanstalkd-binlog` against a real beanstalkd 1.12 (the
//! Debian package, installed by scripts/ensure-deps.sh): jobs put, delayed,
//! reserved, buried, deleted and released in several tubes; beanstalkd
//! stopped; the import compared job by job with what beanstalkd had; a
//! re-run that changes nothing; and the refusals while beanstalkd or
//! `delayd serve` holds a directory. Hand-built binlogs cover what a live
//! beanstalkd does not produce on demand: damage, a deadline that passed
//! while it was stopped, an interrupted import, two servers' overlapping
//! job ids.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayd_core::{Broker, ListQuery, Message, MessageState, QueueName};
use delayd_local::{LocalBroker, LocalConfig};
use serde_json::Value;

use crate::common::Proc;

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    since.as_millis() as u64
}

/// `beanstalkd -l 127.0.0.1 -p PORT -b DIR` on a port that was free a
/// moment ago.
fn start_beanstalkd(dir: &Path) -> (Proc, SocketAddr) {
    let which = Command::new("sh")
        .args(["-c", "command -v beanstalkd"])
        .output()
        .expect("sh");
    assert!(
        which.status.success(),
        "beanstalkd is not installed: run scripts/ensure-deps.sh (apt-get install beanstalkd)"
    );
    let port = delayd_core::testkit::net::free_port();
    let mut command = Command::new("beanstalkd");
    command
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-b"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    crate::common::die_with_parent(&mut command);
    let mut proc = Proc(command.spawn().expect("spawn beanstalkd"));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    // Polls until beanstalkd listens: a child's start-up has no other signal.
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        let exited = proc.0.try_wait().expect("try_wait");
        assert!(exited.is_none(), "beanstalkd exited at start: {exited:?}");
        assert!(
            Instant::now() < deadline,
            "beanstalkd did not listen on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (proc, addr)
}

/// A blocking beanstalkd protocol connection.
struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let writer = TcpStream::connect(addr).expect("connect");
        writer
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let reader = BufReader::new(writer.try_clone().expect("clone"));
        Conn { writer, reader }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a reply line");
        line.trim_end().to_string()
    }

    fn cmd(&mut self, command: &str, expect: &str) {
        self.writer
            .write_all(format!("{command}\r\n").as_bytes())
            .expect("write");
        assert_eq!(self.line(), expect, "reply to {command:?}");
    }

    fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        let mut frame = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        frame.extend_from_slice(body);
        frame.extend_from_slice(b"\r\n");
        self.writer.write_all(&frame).expect("write");
        let reply = self.line();
        let id = reply
            .strip_prefix("INSERTED ")
            .unwrap_or_else(|| panic!("{reply}"));
        id.parse().expect("a job id")
    }

    fn reserve_job(&mut self, id: u64) {
        self.writer
            .write_all(format!("reserve-job {id}\r\n").as_bytes())
            .expect("write");
        let reply = self.line();
        let len: usize = reply
            .strip_prefix(&format!("RESERVED {id} "))
            .unwrap_or_else(|| panic!("{reply}"))
            .parse()
            .expect("a length");
        let mut body = vec![0; len + 2];
        self.reader.read_exact(&mut body).expect("the body");
    }
}

/// What beanstalkd had for one job, and what delayd must have.
struct Expected {
    tube: &'static str,
    id: u64,
    pri: u32,
    ttr_s: u64,
    body: Vec<u8>,
    state: MessageState,
    /// For scheduled jobs: the window the deadline was set in (ms).
    due: Option<(u64, u64)>,
}

fn delayd(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayd"));
    command.args(args).stdin(Stdio::null());
    // The store options come from the arguments alone.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DELAYD_") {
            command.env_remove(name);
        }
    }
    command.output().expect("run delayd")
}

fn import(binlog: &Path, data: &Path) -> Output {
    delayd(&[
        "import",
        "beanstalkd-binlog",
        binlog.to_str().expect("utf-8"),
        "--data",
        data.to_str().expect("utf-8"),
        "--json",
    ])
}

fn report(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}

/// Every message of `queues` in the embedded store in `data`, by id.
fn snapshot(data: &Path, queues: &[&str]) -> Vec<Message> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let broker = LocalBroker::open(LocalConfig::new(data))
            .await
            .expect("open delayd's store");
        let all = messages(&broker, queues).await;
        broker.shutdown().await.expect("shutdown");
        all
    })
}

/// Every message of `queues`, by id.
async fn messages(broker: &dyn Broker, queues: &[&str]) -> Vec<Message> {
    let mut all = Vec::new();
    for queue in queues {
        let queue = QueueName::new(*queue).expect("queue");
        for state in [
            MessageState::Scheduled,
            MessageState::Ready,
            MessageState::Leased,
            MessageState::Dead,
        ] {
            let query = ListQuery {
                state,
                after: None,
                limit: 1000,
            };
            all.extend(broker.list(&queue, query).await.expect("list"));
        }
    }
    all.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    all
}

/// Puts the jobs; returns them with what delayd must make of them, the id
/// of the deleted job, and the connection holding a reservation.
fn populate(addr: SocketAddr) -> (Vec<Expected>, u64, Conn) {
    let mut producer = Conn::open(addr);
    let mut worker = Conn::open(addr);
    let mut jobs = Vec::new();
    let mut job = |tube, id, pri, ttr_s, body: &[u8], state, due| {
        jobs.push(Expected {
            tube,
            id,
            pri,
            ttr_s,
            body: body.to_vec(),
            state,
            due,
        });
    };

    producer.cmd("use emails", "USING emails");
    let id_ready = producer.put(10, 0, 30, b"hello");
    job(
        "emails",
        id_ready,
        10,
        30,
        b"hello",
        MessageState::Ready,
        None,
    );
    let big = vec![b'x'; 60_000];
    let id_big = producer.put(1024, 0, 300, &big);
    job("emails", id_big, 1024, 300, &big, MessageState::Ready, None);
    let before = now_ms();
    let id_delayed = producer.put(5, 3600, 60, b"later");
    let due = Some((before + 3_600_000, now_ms() + 3_600_000));
    job(
        "emails",
        id_delayed,
        5,
        60,
        b"later",
        MessageState::Scheduled,
        due,
    );

    producer.cmd("use reports", "USING reports");
    let binary: Vec<u8> = (0..=255u8).chain(*b"\r\n\r\nend").collect();
    let id_binary = producer.put(100, 0, 120, &binary);
    job(
        "reports",
        id_binary,
        100,
        120,
        &binary,
        MessageState::Ready,
        None,
    );
    // TTR 0: beanstalkd raises it to 1 s.
    let id_empty = producer.put(0, 0, 0, b"");
    job("reports", id_empty, 0, 1, b"", MessageState::Ready, None);
    let id_reserved = producer.put(2000, 0, 45, b"reserved");
    // beanstalkd 1.12 logs no record for a reserve (only its compaction
    // may copy a reserved job's state), so the binlog has it ready; the
    // reserved state itself is in the parser's unit tests.
    worker.reserve_job(id_reserved);
    job(
        "reports",
        id_reserved,
        2000,
        45,
        b"reserved",
        MessageState::Ready,
        None,
    );

    producer.cmd("use jobs.buried", "USING jobs.buried");
    let id_buried = producer.put(7, 0, 20, b"buried");
    producer.reserve_job(id_buried);
    producer.cmd(&format!("bury {id_buried} 42"), "BURIED");
    job(
        "jobs.buried",
        id_buried,
        42,
        20,
        b"buried",
        MessageState::Dead,
        None,
    );
    let id_deleted = producer.put(1, 0, 10, b"deleted");
    producer.cmd(&format!("delete {id_deleted}"), "DELETED");
    let id_released = producer.put(3, 0, 90, b"released");
    producer.reserve_job(id_released);
    let before = now_ms();
    producer.cmd(&format!("release {id_released} 4 600"), "RELEASED");
    let due = Some((before + 600_000, now_ms() + 600_000));
    job(
        "jobs.buried",
        id_released,
        4,
        90,
        b"released",
        MessageState::Scheduled,
        due,
    );
    (jobs, id_deleted, worker)
}

fn compare(messages: &[Message], expected: &[Expected], deleted: u64) {
    assert_eq!(messages.len(), expected.len(), "{messages:#?}");
    for want in expected {
        let id = format!("bs-{}", want.id);
        let got = messages
            .iter()
            .find(|m| m.id.as_str() == id)
            .unwrap_or_else(|| panic!("{id} was not imported"));
        assert_eq!(got.queue.as_str(), want.tube, "{id}");
        assert_eq!(got.state, want.state, "{id}");
        assert_eq!(got.priority, want.pri, "{id}");
        assert_eq!(got.lease_ms, Some(want.ttr_s * 1000), "{id}");
        assert_eq!(got.payload, want.body, "{id}");
        assert_eq!(got.max_attempts, Some(u32::MAX), "{id}");
        if let Some((from, to)) = want.due {
            assert!(
                (from..=to + 1).contains(&got.deliver_at),
                "{id}: deliver_at {} outside [{from}, {to}]",
                got.deliver_at
            );
        }
        if want.state == MessageState::Dead {
            assert_eq!(got.attempts, 1, "{id}: leased once to be buried");
        }
    }
    assert!(messages
        .iter()
        .all(|m| m.id.as_str() != format!("bs-{deleted}")));
}

#[test]
fn binlog_import_keeps_every_job_and_a_rerun_changes_nothing() {
    let binlog = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let (mut beanstalkd, addr) = start_beanstalkd(binlog.path());
    let (expected, deleted, worker) = populate(addr);

    // Refused while beanstalkd runs on the directory.
    let refused = import(binlog.path(), data.path());
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("a beanstalkd is running"), "{stderr}");

    // Stopped with the reservation still held, as in a real shutdown.
    let pid = beanstalkd.0.id().to_string();
    let term = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(term.success());
    beanstalkd.0.wait().expect("wait for beanstalkd");
    drop(worker);

    let first = report(&import(binlog.path(), data.path()));
    assert_eq!(first["jobs"], 8, "{first:#}");
    let tube = |report: &Value, t: &str, field: &str| report["tubes"][t][field].clone();
    assert_eq!(tube(&first, "emails", "ready"), 2, "{first:#}");
    assert_eq!(tube(&first, "emails", "scheduled"), 1, "{first:#}");
    assert_eq!(tube(&first, "reports", "ready"), 3, "{first:#}");
    assert_eq!(tube(&first, "jobs.buried", "dead"), 1, "{first:#}");
    assert_eq!(tube(&first, "jobs.buried", "scheduled"), 1, "{first:#}");
    for t in ["emails", "reports", "jobs.buried"] {
        assert_eq!(tube(&first, t, "already_present"), 0, "{first:#}");
        assert_eq!(tube(&first, t, "failed"), 0, "{first:#}");
    }

    let queues = ["emails", "reports", "jobs.buried"];
    let imported = snapshot(data.path(), &queues);
    compare(&imported, &expected, deleted);

    let second = report(&import(binlog.path(), data.path()));
    for (t, n) in [("emails", 3), ("reports", 3), ("jobs.buried", 2)] {
        assert_eq!(tube(&second, t, "already_present"), n, "{second:#}");
        for state in ["ready", "scheduled", "dead", "failed"] {
            assert_eq!(tube(&second, t, state), 0, "{second:#}");
        }
    }
    assert_eq!(
        snapshot(data.path(), &queues),
        imported,
        "the re-run changed the store"
    );

    // Refused while `delayd serve` has the store open.
    let server = crate::common::Server::start(data.path());
    let busy = import(binlog.path(), data.path());
    assert!(!busy.status.success());
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(stderr.contains("another process has it open"), "{stderr}");
    drop(server);
}

#[test]
fn a_damaged_binlog_is_refused_unless_asked_to_skip() {
    let binlog = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    // A version-7 file cut inside its first record's struct.
    let mut bytes = 7i32.to_le_bytes().to_vec();
    bytes.extend_from_slice(&1i32.to_le_bytes());
    bytes.extend_from_slice(b"t");
    bytes.extend_from_slice(&[1, 0, 0]);
    std::fs::write(binlog.path().join("binlog.1"), bytes).expect("write");
    let refused = import(binlog.path(), data.path());
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("binlog.1: at byte 4"), "{stderr}");
    assert!(stderr.contains("--skip-damaged"), "{stderr}");

    let skipped = delayd(&[
        "import",
        "beanstalkd-binlog",
        binlog.path().to_str().expect("utf-8"),
        "--data",
        data.path().to_str().expect("utf-8"),
        "--skip-damaged",
        "--json",
    ]);
    let report = report(&skipped);
    assert_eq!(report["jobs"], 0);
    assert_eq!(report["damage"].as_array().map(Vec::len), Some(1));
}

/// A version-7 binlog file of jobs `(id, tube, body, state)` (1 ready, 3
/// buried, 4 delayed), priority 100, TTR 60 s, deadline `deadline_ns`,
/// built by hand (the layout is in src/import/binlog.rs).
const PAST_DEADLINE_NS: i64 = 1_700_000_000_123_456_789;

fn hand_built_binlog(dir: &Path, deadline_ns: i64, jobs: &[(u64, &str, &[u8], u8)]) {
    let mut bytes = 7i32.to_le_bytes().to_vec();
    for (id, tube, body, state) in jobs {
        let stored = [*body, b"\r\n"].concat();
        bytes.extend_from_slice(&(tube.len() as i32).to_le_bytes());
        bytes.extend_from_slice(tube.as_bytes());
        let mut rec = [0u8; 80];
        rec[0..8].copy_from_slice(&id.to_le_bytes());
        rec[8..12].copy_from_slice(&100u32.to_le_bytes());
        rec[24..32].copy_from_slice(&60_000_000_000i64.to_le_bytes());
        rec[32..36].copy_from_slice(&(stored.len() as i32).to_le_bytes());
        rec[48..56].copy_from_slice(&deadline_ns.to_le_bytes());
        rec[76] = *state;
        bytes.extend_from_slice(&rec);
        bytes.extend_from_slice(&stored);
    }
    std::fs::write(dir.join("binlog.1"), bytes).expect("write");
}

#[test]
fn a_second_beanstalkds_overlapping_ids_need_their_own_prefix() {
    let first = tempfile::tempdir().expect("tempdir");
    let second = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    hand_built_binlog(
        first.path(),
        PAST_DEADLINE_NS,
        &[(1, "emails", b"from the first", 1)],
    );
    hand_built_binlog(
        second.path(),
        PAST_DEADLINE_NS,
        &[(1, "emails", b"from the second", 1)],
    );
    report(&import(first.path(), data.path()));

    let clash = import(second.path(), data.path());
    assert_eq!(clash.status.code(), Some(1), "{clash:?}");
    let stderr = String::from_utf8_lossy(&clash.stderr);
    assert!(stderr.contains("exists with another body"), "{stderr}");
    assert!(stderr.contains("--id-prefix"), "{stderr}");
    let clashed: Value = serde_json::from_slice(&clash.stdout).expect("a JSON report");
    assert_eq!(clashed["tubes"]["emails"]["failed"], 1, "{clashed:#}");

    let own = delayd(&[
        "import",
        "beanstalkd-binlog",
        second.path().to_str().expect("utf-8"),
        "--data",
        data.path().to_str().expect("utf-8"),
        "--id-prefix",
        "b2-",
        "--json",
    ]);
    let own = report(&own);
    assert_eq!(own["tubes"]["emails"]["ready"], 1, "{own:#}");
    let messages = snapshot(data.path(), &["emails"]);
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["b2-1", "bs-1"]);
    assert_eq!(messages[0].payload, b"from the second");
}

#[test]
fn a_rerun_finishes_a_bury_an_interrupted_import_left_undone() {
    let binlog = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    hand_built_binlog(
        binlog.path(),
        PAST_DEADLINE_NS,
        &[(5, "jobs", b"buried", 3)],
    );
    // What an import stopped between the enqueue and the bury leaves.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let broker = LocalBroker::open(LocalConfig::new(data.path()))
            .await
            .expect("open");
        let request = delayd_core::EnqueueRequest {
            id: Some(delayd_core::MessageId::new("bs-5").expect("id")),
            payload: b"buried".to_vec(),
            ..delayd_core::EnqueueRequest::default()
        };
        let queue = QueueName::new("jobs").expect("queue");
        let options = delayd_core::EnqueueOptions::default();
        broker
            .enqueue(&queue, vec![request], options)
            .await
            .expect("enqueue");
        broker.shutdown().await.expect("shutdown");
    });

    let rerun = report(&import(binlog.path(), data.path()));
    assert_eq!(rerun["tubes"]["jobs"]["already_present"], 1, "{rerun:#}");
    let messages = snapshot(data.path(), &["jobs"]);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].state, MessageState::Dead);
    assert_eq!(messages[0].priority, 100);
}

#[test]
fn a_deadline_that_passed_while_beanstalkd_was_stopped_is_due_at_once() {
    let binlog = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    hand_built_binlog(binlog.path(), PAST_DEADLINE_NS, &[(6, "late", b"late", 4)]);
    let imported = report(&import(binlog.path(), data.path()));
    assert_eq!(imported["tubes"]["late"]["ready"], 1, "{imported:#}");
    assert_eq!(imported["tubes"]["late"]["scheduled"], 0, "{imported:#}");
    let messages = snapshot(data.path(), &["late"]);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].state, MessageState::Ready);
    assert_eq!(messages[0].deliver_at, 1_700_000_000_123);
}

/// `redis-server` on a free port of 127.0.0.1, without persistence.
fn start_redis(dir: &Path) -> (Proc, u16) {
    use delayd_core::testkit::net::{free_port, redis_ping};
    let port = free_port();
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
        ])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    crate::common::die_with_parent(&mut command);
    let proc = Proc(command.spawn().expect("spawn redis-server"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis_ping(port) {
        assert!(
            Instant::now() < deadline,
            "redis-server did not start on {port}"
        );
        // Polls: a starting redis-server has no event this test can await.
        std::thread::sleep(Duration::from_millis(20));
    }
    (proc, port)
}

#[test]
fn the_redis_store_gets_the_same_messages() {
    let binlog = tempfile::tempdir().expect("tempdir");
    let redis_dir = tempfile::tempdir().expect("tempdir");
    let future_ns = (now_ms() as i64 + 3_600_000) * 1_000_000;
    hand_built_binlog(
        binlog.path(),
        future_ns,
        &[
            (1, "mixed", b"ready", 1),
            (2, "mixed", b"buried", 3),
            (3, "mixed", b"delayed", 4),
        ],
    );

    let (_redis, port) = start_redis(redis_dir.path());
    let url = format!("redis://127.0.0.1:{port}");
    let run = || {
        delayd(&[
            "import",
            "beanstalkd-binlog",
            binlog.path().to_str().expect("utf-8"),
            "--store",
            &url,
            "--json",
        ])
    };
    let first = report(&run());
    let tube = &first["tubes"]["mixed"];
    for state in ["ready", "dead", "scheduled"] {
        assert_eq!(tube[state], 1, "{first:#}");
    }
    let second = report(&run());
    assert_eq!(second["tubes"]["mixed"]["already_present"], 3, "{second:#}");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let found = runtime.block_on(async {
        let broker = delayd_redis::RedisBroker::connect(delayd_redis::RedisConfig::new(&url))
            .await
            .expect("connect");
        messages(&broker, &["mixed"]).await
    });
    let states: Vec<(&str, MessageState, u32, Option<u64>)> = found
        .iter()
        .map(|m| (m.id.as_str(), m.state, m.priority, m.lease_ms))
        .collect();
    assert_eq!(
        states,
        [
            ("bs-1", MessageState::Ready, 100, Some(60_000)),
            ("bs-2", MessageState::Dead, 100, Some(60_000)),
            ("bs-3", MessageState::Scheduled, 100, Some(60_000)),
        ]
    );
    assert_eq!(
        found[2].deliver_at,
        (future_ns as u64 + 500_000) / 1_000_000
    );
    assert_eq!(found[1].payload, b"buried");
}
