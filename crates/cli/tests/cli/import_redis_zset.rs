//! `delayd import redis-zset` against a real `redis-server` and a real
//! `delayd serve`: every member arrives with its payload and its score as
//! `deliver_at` to the millisecond, across batch boundaries; a re-run
//! creates nothing; `--dry-run` writes nothing; `--delete` removes from
//! Redis exactly what delayd acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayd_client::{Client, ClientError, MessageView, Payload};
use serde_json::Value;

use crate::common::redis::Redis;
use crate::common::{delayd_cli, local_serve_args, Server};

const QUEUE: &str = "imported";

/// A Redis, a `delayd serve` and a runtime for the client's checks.
struct Setup {
    redis: Redis,
    server: Server,
    _data: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
}

impl Setup {
    fn start() -> Setup {
        Setup::start_with(&[])
    }

    /// With `serve` options `extra`.
    fn start_with(extra: &[&str]) -> Setup {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().to_str().expect("utf-8 path");
        let server = Server::start_with(&local_serve_args(dir, extra), None, &[]);
        Setup {
            redis: Redis::start(),
            server,
            _data: data,
            runtime: tokio::runtime::Runtime::new().expect("runtime"),
        }
    }

    fn redis(&self, command: &mut redis::Cmd) -> redis::Value {
        let client = redis::Client::open(self.redis.url()).expect("redis client");
        let mut conn = client.get_connection().expect("redis connection");
        command.query(&mut conn).expect("redis command")
    }

    /// `delayd import redis-zset --url ... --queue imported --json ARGS`.
    fn import(&self, args: &[&str]) -> Output {
        let url = self.redis.url();
        let mut all = vec![
            "import",
            "redis-zset",
            "--url",
            &url,
            "--queue",
            QUEUE,
            "--json",
        ];
        all.extend_from_slice(args);
        delayd_cli(&self.server.url(""), &all)
    }

    fn client(&self) -> Client {
        Client::new(&self.server.url(""))
            .expect("client")
            .with_timeout(Duration::from_secs(30))
    }

    /// Every message of the queue by id (none is leased or dead here).
    fn messages(&self) -> BTreeMap<String, MessageView> {
        let client = self.client();
        let mut all = BTreeMap::new();
        for state in ["scheduled", "ready"] {
            let mut after: Option<String> = None;
            // Bounded: 10 pages of 1000 is more than any case here holds.
            for _ in 0..10 {
                let page = self
                    .runtime
                    .block_on(client.list_messages(QUEUE, state, Some(1000), after.as_deref()))
                    .expect("list messages");
                let Some(last) = page.last() else { break };
                after = Some(last.id.clone());
                all.extend(page.into_iter().map(|m| (m.id.clone(), m)));
            }
        }
        all
    }

    fn zset_members(&self, key: &str) -> BTreeSet<Vec<u8>> {
        let reply = self.redis(redis::cmd("ZRANGE").arg(key).arg(0).arg(-1));
        redis::from_redis_value::<Vec<Vec<u8>>>(reply)
            .expect("members")
            .into_iter()
            .collect()
    }

    fn hash_fields(&self, key: &str) -> BTreeSet<String> {
        let reply = self.redis(redis::cmd("HKEYS").arg(key));
        redis::from_redis_value::<Vec<String>>(reply)
            .expect("fields")
            .into_iter()
            .collect()
    }
}

/// The JSON report on stdout (printed whether the run failed or not).
fn report(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&text).unwrap_or_else(|err| {
        panic!(
            "no JSON report ({err}): stdout {text}, stderr {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn succeeded(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    report(output)
}

fn failed(output: &Output) -> Value {
    assert_eq!(
        output.status.code(),
        Some(1),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    report(output)
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Payload members with second scores (fractions, one in the past, one not
/// UTF-8), 2,503 of them, so three batches: dry run, import, re-run, then a
/// rescored member and `--delete`.
#[test]
fn payload_members_with_second_scores() {
    let setup = Setup::start();
    let base = now_s() + 3600;
    // member -> deliver_at expected, computed in integers from the score's
    // decimal text.
    let mut expected: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("delayed");
    let mut add = |member: Vec<u8>, seconds: u64, millis: u64| {
        zadd.arg(format!("{seconds}.{millis:03}")).arg(&member);
        expected.insert(member, seconds * 1000 + millis);
    };
    for i in 0..2500u64 {
        add(format!("job {i}").into_bytes(), base + i, i % 1000);
    }
    add(b"already due".to_vec(), base - 7200, 250);
    add(vec![0xff, 0xfe, 0x00, b'x'], base + 10, 5);
    add(b"quote \" and \n newline".to_vec(), base + 20, 999);
    setup.redis(&mut zadd);

    let dry = succeeded(&setup.import(&["--key", "delayed", "--dry-run"]));
    assert_eq!(
        (dry["read"].as_u64(), dry["sent"].as_u64()),
        (Some(2503), Some(2503))
    );
    assert_eq!(dry["created"], 0);
    let missing = setup.runtime.block_on(setup.client().get_queue(QUEUE));
    assert!(
        matches!(missing, Err(ClientError::Api { status: 404, .. })),
        "a dry run created the queue: {missing:?}"
    );

    let first = succeeded(&setup.import(&["--key", "delayed"]));
    assert_eq!(first["read"], 2503, "{first}");
    assert_eq!(first["created"], 2503, "{first}");
    assert_eq!(
        (first["errors"].as_u64(), first["deleted"].as_u64()),
        (Some(0), Some(0))
    );
    let messages = setup.messages();
    let mut arrived: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for message in messages.values() {
        assert!(message.id.starts_with("zset-"), "{}", message.id);
        arrived.insert(message.payload.as_bytes().to_vec(), message.deliver_at);
    }
    assert_eq!(arrived, expected, "payloads and deliver_at as in the ZSET");
    let binary = messages
        .values()
        .find(|m| m.payload.as_bytes() == [0xff, 0xfe, 0x00, b'x'])
        .expect("the binary payload");
    assert_eq!(
        binary.payload,
        Payload::Binary(vec![0xff, 0xfe, 0x00, b'x'])
    );
    let due = messages
        .values()
        .find(|m| m.payload.as_bytes() == b"already due")
        .expect("the past member");
    assert_eq!(due.state, "ready");

    let again = succeeded(&setup.import(&["--key", "delayed"]));
    assert_eq!(
        (again["created"].as_u64(), again["already_present"].as_u64()),
        (Some(0), Some(2503))
    );
    assert_eq!(setup.messages().len(), 2503, "a re-run doubled nothing");
    assert_eq!(
        setup.zset_members("delayed").len(),
        2503,
        "no --delete, nothing removed"
    );

    // Rescored in Redis after the import: delayd holds it with the old time,
    // so --delete leaves it in Redis and reports it.
    setup.redis(
        redis::cmd("ZADD")
            .arg("delayed")
            .arg("XX")
            .arg(base + 99)
            .arg("job 7"),
    );
    let output = setup.import(&["--key", "delayed", "--delete"]);
    let deleted = failed(&output);
    assert_eq!(
        (deleted["conflicts"].as_u64(), deleted["deleted"].as_u64()),
        (Some(1), Some(2502))
    );
    assert_eq!(
        setup.zset_members("delayed"),
        BTreeSet::from([b"job 7".to_vec()])
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"job 7\""));
    assert_eq!(setup.messages().len(), 2503);
}

/// Id members with millisecond scores and payloads in a hash: one id that
/// is not a delayd id, one binary payload, one missing from the hash, one
/// delayd refuses; `--delete` removes exactly the acknowledged ones.
#[test]
fn id_members_with_a_hash_and_delete() {
    let setup = Setup::start();
    let base_ms = (now_s() + 600) * 1000;
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("due");
    let mut hset = redis::cmd("HSET");
    hset.arg("bodies").arg("unrelated").arg("stays");
    for i in 0..20u64 {
        zadd.arg(base_ms + i * 7 + 1).arg(format!("order:{i}"));
        hset.arg(format!("order:{i}")).arg(format!("payload {i}"));
    }
    zadd.arg(base_ms + 1).arg("order:bin");
    hset.arg("order:bin").arg(vec![0x80u8, 0x81]);
    zadd.arg(base_ms + 2).arg("not an id!");
    hset.arg("not an id!").arg("odd id");
    zadd.arg(base_ms + 3).arg("order:missing");
    // 20 years ahead: beyond the server's default --max-delay (10 years).
    let too_late = base_ms + 20 * 365 * 24 * 3600 * 1000;
    zadd.arg(too_late).arg("order:toolate");
    hset.arg("order:toolate").arg("never");
    setup.redis(&mut zadd);
    setup.redis(&mut hset);

    let args = [
        "--key", "due", "--hash", "bodies", "--score", "ms", "--delete",
    ];
    let output = setup.import(&args);
    let first = failed(&output);
    assert_eq!(first["read"], 24, "{first}");
    assert_eq!(first["created"], 22, "{first}");
    assert_eq!(first["missing_from_hash"], 1, "{first}");
    assert_eq!(first["errors"], 1, "{first}");
    assert_eq!(first["deleted"], 22, "{first}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("order:missing") && stderr.contains("missing_from_hash"),
        "{stderr}"
    );
    assert!(stderr.contains("order:toolate"), "{stderr}");

    let left = BTreeSet::from([b"order:missing".to_vec(), b"order:toolate".to_vec()]);
    assert_eq!(setup.zset_members("due"), left);
    let fields = BTreeSet::from(["order:toolate".to_owned(), "unrelated".to_owned()]);
    assert_eq!(setup.hash_fields("bodies"), fields);

    let messages = setup.messages();
    assert_eq!(messages.len(), 22);
    for i in 0..20u64 {
        let message = &messages[&format!("order:{i}")];
        assert_eq!(message.deliver_at, base_ms + i * 7 + 1);
        assert_eq!(message.payload, Payload::Text(format!("payload {i}")));
    }
    assert_eq!(
        messages["order:bin"].payload,
        Payload::Binary(vec![0x80, 0x81])
    );
    assert_eq!(messages["order:bin"].deliver_at, base_ms + 1);
    let odd: Vec<&MessageView> = messages
        .values()
        .filter(|m| m.payload == Payload::Text("odd id".into()))
        .collect();
    assert_eq!(odd.len(), 1);
    assert!(odd[0].id.starts_with("zset-") && odd[0].deliver_at == base_ms + 2);

    let again = failed(&setup.import(&args));
    assert_eq!(
        (again["read"].as_u64(), again["created"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(
        (
            again["missing_from_hash"].as_u64(),
            again["deleted"].as_u64()
        ),
        (Some(1), Some(0))
    );
    assert_eq!(setup.zset_members("due"), left);
}

/// A batch the server refuses as a whole (here: the queue does not exist
/// and the server does not create queues) stops the import with the counts
/// so far, and `--delete` removes nothing it did not acknowledge.
#[test]
fn a_refused_batch_stops_and_deletes_nothing() {
    let setup = Setup::start_with(&["--no-auto-create"]);
    let due = (now_s() + 60).to_string();
    setup.redis(
        redis::cmd("ZADD")
            .arg("delayed")
            .arg(&due)
            .arg("a")
            .arg(&due)
            .arg("b"),
    );
    let output = setup.import(&["--key", "delayed", "--delete"]);
    let stopped = failed(&output);
    assert_eq!(
        (stopped["read"].as_u64(), stopped["sent"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(stopped["deleted"], 0);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("queue_not_found"), "{stderr}");
    assert_eq!(setup.zset_members("delayed").len(), 2);
}
