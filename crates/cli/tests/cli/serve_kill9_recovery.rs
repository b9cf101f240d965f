//! `delayd serve` on the embedded store, killed with SIGKILL three times
//! while enqueues are in flight: after each restart on the same data
//! directory every acknowledged enqueue is still there, no acknowledged ack
//! comes back, and messages that were leased (not acked) at the kill come
//! back as expired leases with the attempt counted.
//!
//! Every call the test makes is also recorded as a history (client times
//! around each call) for the one checker (`delayd_history`): each kill is
//! a `crash` that ends the leases (the embedded store forgets them on
//! reopen), each start after one a `restart` (to its health answer), the
//! reads after each restart `observe` lines. The run is not drained (the
//! `imm` queue has no consumer), so the last reads are what prove each
//! acknowledged enqueue still there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayd_history::{self as history, Op, Outcome};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{wait_healthy, Server};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// What a status says the call did (no answer, a 5xx: maybe applied).
fn outcome_of(status: Option<StatusCode>) -> Outcome {
    match status {
        Some(s) if s.is_success() => Outcome::Ok,
        Some(StatusCode::NOT_FOUND) => Outcome::NotFound,
        Some(StatusCode::CONFLICT) => Outcome::LeaseMismatch,
        Some(s) if s.is_client_error() => Outcome::Error,
        _ => Outcome::Unknown,
    }
}

/// What the test knows about one message (queue, id).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Known {
    /// Enqueue answered 201; not consumed.
    Live,
    /// Ack answered 204.
    Acked,
    /// Leased (not acked) when the server was killed, at this attempt.
    LeasedAtKill(u64),
}

#[derive(Default)]
struct Book {
    /// What the test knows about each message (queue, id).
    known: HashMap<(String, String), Known>,
    /// Every call, for the history checker.
    ops: Vec<Op>,
}

type Ledger = Arc<Mutex<Book>>;

/// POSTs one enqueue; records it as `Live` when the answer is 201.
async fn enqueue(http: &reqwest::Client, base: &str, ledger: &Ledger, queue: &str, body: Value) {
    let invoke = now_ms();
    let sent = http
        .post(format!("{base}/v1/queues/{queue}/messages"))
        .json(&body)
        .send()
        .await;
    let (status, answer) = match sent {
        Ok(response) => (Some(response.status()), response.json::<Value>().await.ok()),
        Err(_) => (None, None),
    };
    let complete = now_ms();
    let answered = answer
        .as_ref()
        .filter(|_| status == Some(StatusCode::CREATED));
    // An enqueue without a client id whose answer was lost names no id:
    // no later call can meet its message (nobody consumes `imm` or `far`,
    // reads go by known ids), so the history leaves it out.
    let id = answered.map_or(body["id"].as_str(), |a| a["id"].as_str());
    if let Some(id) = id {
        let outcome = match (status, answered) {
            (_, Some(_)) => Outcome::Ok,
            // 201 without a readable answer: no seq, maybe created.
            (Some(StatusCode::CREATED), None) => Outcome::Unknown,
            (status, None) => outcome_of(status),
        };
        let enqueue = history::Enqueue {
            invoke,
            complete,
            queue: queue.to_owned(),
            id: id.to_owned(),
            outcome,
            exists: status == Some(StatusCode::OK),
            seq: answered.and_then(|a| a["seq"].as_u64()),
            deliver_at: answered.and_then(|a| a["deliver_at"].as_u64()),
            ..Default::default()
        };
        ledger.lock().unwrap().ops.push(Op::Enqueue(enqueue));
    }
    let Some(answer) = answered else {
        return;
    };
    let id = answer["id"].as_str().expect("id in 201 answer").to_owned();
    let previous = ledger
        .lock()
        .unwrap()
        .known
        .insert((queue.to_owned(), id.clone()), Known::Live);
    assert_eq!(previous, None, "201 for an id seen before: {queue}/{id}");
}

/// Enqueues `count` messages from `tasks` concurrent tasks: delay 0 (queue
/// `imm`), one hour (queue `far`), half of them with client ids.
async fn enqueue_many(
    http: &reqwest::Client,
    base: &str,
    ledger: &Ledger,
    prefix: &str,
    count: usize,
    tasks: usize,
) {
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (http, base, ledger, prefix) = (
            http.clone(),
            base.to_owned(),
            ledger.clone(),
            prefix.to_owned(),
        );
        handles.push(tokio::spawn(async move {
            for i in (task..count).step_by(tasks) {
                let queue = if i % 2 == 0 { "imm" } else { "far" };
                let mut body = json!({"payload": format!("{prefix} message {i}")});
                if queue == "far" {
                    body["delay_ms"] = json!(3_600_000);
                } else if i % 4 == 0 {
                    body["delay_ms"] = json!(0);
                }
                if i % 3 == 0 {
                    body["id"] = json!(format!("{prefix}-{i}"));
                }
                enqueue(&http, &base, &ledger, queue, body).await;
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
}

/// Checks every ledger entry against the restarted server.
async fn verify(http: &reqwest::Client, server: &Server, ledger: &Ledger) {
    let base = server.url("");
    let entries: Vec<_> = ledger
        .lock()
        .unwrap()
        .known
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let entries = Arc::new(Mutex::new(entries));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut handles = Vec::new();
    for _ in 0..8 {
        let (http, base, entries, failures, ledger) = (
            http.clone(),
            base.clone(),
            entries.clone(),
            failures.clone(),
            ledger.clone(),
        );
        handles.push(tokio::spawn(async move {
            loop {
                let Some(((queue, id), known)) = entries.lock().unwrap().pop() else {
                    return;
                };
                let invoke = now_ms();
                let response = http
                    .get(format!("{base}/v1/queues/{queue}/messages/{id}"))
                    .send()
                    .await
                    .expect("GET message");
                let status = response.status();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                if let Some(observe) = observed(&queue, &id, (invoke, now_ms()), status, &body) {
                    ledger.lock().unwrap().ops.push(observe);
                }
                let problem = match known {
                    Known::Live => {
                        let want = if queue == "far" { "scheduled" } else { "ready" };
                        (status != 200 || body["state"] != want || body["attempts"] != 0)
                            .then(|| format!("acknowledged enqueue {queue}/{id}: {status} {body}"))
                    }
                    Known::Acked => (status != 404)
                        .then(|| format!("acked message {queue}/{id} came back: {status} {body}")),
                    // Either still leased-expired (scheduled for retry) or
                    // ready again; never gone.
                    Known::LeasedAtKill(_) => (status != 200 || body["state"] == "dead")
                        .then(|| format!("leased message {queue}/{id}: {status} {body}")),
                };
                if let Some(problem) = problem {
                    failures.lock().unwrap().push(problem);
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} checks failed, e.g.:\n{}\nlog:\n{}",
        failures.len(),
        ledger.lock().unwrap().known.len(),
        failures[..failures.len().min(10)].join("\n"),
        server.log()
    );
}

/// A read of one message as the history's `observe` line (none for an
/// answer that says neither: the check above reports it).
fn observed(
    queue: &str,
    id: &str,
    (invoke, complete): (u64, u64),
    status: StatusCode,
    body: &Value,
) -> Option<Op> {
    let state = match status {
        StatusCode::NOT_FOUND => history::Observed::Absent,
        StatusCode::OK if body["state"] == "dead" => history::Observed::Dead,
        StatusCode::OK => history::Observed::Live,
        _ => return None,
    };
    Some(Op::Observe(history::Observe {
        invoke,
        complete,
        queue: queue.to_owned(),
        id: id.to_owned(),
        state,
        seq: body["seq"].as_u64(),
    }))
}

/// Leases from `lq` until every message leased at the kill came back, and
/// checks each came back with its attempt counted; acks them all.
async fn verify_leased(http: &reqwest::Client, server: &Server, ledger: &Ledger) {
    let mut waiting: HashMap<String, u64> = ledger
        .lock()
        .unwrap()
        .known
        .iter()
        .filter_map(|((queue, id), known)| match known {
            Known::LeasedAtKill(attempt) if queue == "lq" => Some((id.clone(), *attempt)),
            _ => None,
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !waiting.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} messages leased at the kill never came back, e.g. {:?}",
            waiting.len(),
            waiting.iter().next()
        );
        let leased = lease(http, server, ledger, "lq", (1000, 1000)).await;
        for message in leased {
            let id = message["id"].as_str().unwrap().to_owned();
            let attempt = message["attempt"].as_u64().unwrap();
            let Some(before) = waiting.remove(&id) else {
                panic!("lq handed out a message that was not leased at the kill: {message}");
            };
            assert!(
                attempt > before && attempt >= 2,
                "{id} was leased at attempt {before} at the kill, came back at attempt {attempt}"
            );
            ack(http, server, ledger, "lq", &message).await;
        }
    }
}

async fn lease(
    http: &reqwest::Client,
    server: &Server,
    ledger: &Ledger,
    queue: &str,
    (max, wait_ms): (u32, u64),
) -> Vec<Value> {
    let invoke = now_ms();
    let response = http
        .post(server.url(&format!("/v1/queues/{queue}/leases")))
        .json(&json!({"max": max, "wait_ms": wait_ms, "lease_ms": 600_000}))
        .send()
        .await
        .expect("lease");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let complete = now_ms();
    let messages = body["messages"].as_array().unwrap().clone();
    let mut book = ledger.lock().unwrap();
    for m in &messages {
        let number = |field: &str| m[field].as_u64().unwrap_or_else(|| panic!("{field}: {m}"));
        book.ops.push(Op::Lease(history::Lease {
            invoke,
            complete,
            queue: queue.to_owned(),
            id: m["id"].as_str().unwrap().to_owned(),
            seq: number("seq"),
            attempt: number("attempt") as u32,
            lease_id: m["lease_id"].as_str().unwrap().to_owned(),
            lease_until: number("lease_until"),
            deliver_at: number("deliver_at"),
            key: m["key"].as_str().map(str::to_owned),
            // The server's clock at the grant is not in the answer.
            granted_at: None,
        }));
    }
    messages
}

async fn ack(http: &reqwest::Client, server: &Server, ledger: &Ledger, queue: &str, m: &Value) {
    let id = m["id"].as_str().unwrap();
    let invoke = now_ms();
    let response = http
        .post(server.url(&format!("/v1/queues/{queue}/messages/{id}/ack")))
        .json(&json!({"lease_id": m["lease_id"]}))
        .send()
        .await
        .expect("ack");
    let mut book = ledger.lock().unwrap();
    book.ops.push(Op::Ack(history::LeaseCall {
        invoke,
        complete: now_ms(),
        queue: queue.to_owned(),
        id: id.to_owned(),
        lease_id: m["lease_id"].as_str().unwrap().to_owned(),
        outcome: outcome_of(Some(response.status())),
    }));
    assert_eq!(response.status(), 204, "ack {queue}/{id}");
    book.known
        .insert((queue.to_owned(), id.to_owned()), Known::Acked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_three_sigkills() {
    let data = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let ledger: Ledger = Arc::default();
    let started = Instant::now();

    for round in 0..3 {
        let mut server = start(&http, &ledger, data.path()).await;
        if round > 0 {
            verify(&http, &server, &ledger).await;
            verify_leased(&http, &server, &ledger).await;
        }
        let base = server.url("");

        // Fast retries, so the leases lost at the kill come back quickly.
        let put_at = now_ms();
        let response = http
            .put(server.url("/v1/queues/lq"))
            .json(&json!({"retry": {"initial_ms": 100, "max_ms": 1000, "multiplier": 2.0}}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let config = Op::QueueConfig(history::QueueConfig {
            invoke: put_at,
            complete: now_ms(),
            queue: "lq".into(),
            outcome: Outcome::Ok,
            max_attempts: None,
            retry: Some(history::Retry {
                initial_ms: 100,
                max_ms: 1000,
                multiplier: 2.0,
            }),
            flow: None,
        });
        ledger.lock().unwrap().ops.push(config);

        let prefix = format!("r{round}");
        enqueue_many(&http, &base, &ledger, &prefix, 500, 8).await;

        // Lease 60 messages of `lq`; ack the even ones, keep the rest leased.
        for i in 0..60 {
            let body = json!({"payload": "lease me", "id": format!("{prefix}-lq-{i}")});
            enqueue(&http, &base, &ledger, "lq", body).await;
        }
        let mut leased = Vec::new();
        for _ in 0..10 {
            leased.extend(lease(&http, &server, &ledger, "lq", (1000, 0)).await);
            if leased.len() >= 60 {
                break;
            }
        }
        assert_eq!(leased.len(), 60, "lq should hand out all 60 messages");
        for (i, message) in leased.iter().enumerate() {
            if i % 2 == 0 {
                ack(&http, &server, &ledger, "lq", message).await;
            } else {
                let id = message["id"].as_str().unwrap().to_owned();
                let attempt = message["attempt"].as_u64().unwrap();
                assert_eq!(attempt, 1, "{message}");
                ledger
                    .lock()
                    .unwrap()
                    .known
                    .insert(("lq".to_owned(), id), Known::LeasedAtKill(attempt));
            }
        }

        // A burst of enqueues, SIGKILL in the middle of it.
        let before = ledger.lock().unwrap().known.len();
        let burst = {
            let (http, base, ledger) = (http.clone(), base.clone(), ledger.clone());
            let prefix = format!("{prefix}-burst");
            tokio::spawn(async move { enqueue_many(&http, &base, &ledger, &prefix, 4000, 8).await })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while ledger.lock().unwrap().known.len() < before + 100 {
            assert!(Instant::now() < deadline, "burst made no progress");
            // Polls: a real server process's progress has no event this test can await.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let kill_at = now_ms();
        server.kill9();
        // The embedded store: its leases end with the process.
        let crash = Op::Crash(history::Crash {
            invoke: kill_at,
            complete: now_ms(),
            ends_leases: true,
            maybe: false,
        });
        ledger.lock().unwrap().ops.push(crash);
        burst.await.unwrap();
        let acknowledged = ledger.lock().unwrap().known.len() - before;
        assert!(
            acknowledged < 4000,
            "the kill should have interrupted the burst"
        );
        eprintln!("round {round}: {acknowledged} burst enqueues acknowledged before the kill");
    }

    let server = start(&http, &ledger, data.path()).await;
    verify(&http, &server, &ledger).await;
    verify_leased(&http, &server, &ledger).await;
    let mut book = ledger.lock().unwrap();
    // Not drained: nobody consumes `imm`; the reads above show every
    // acknowledged enqueue there.
    book.ops.push(Op::Stop(history::Stop {
        at: now_ms(),
        drained: false,
    }));
    let checked = history::check(&history::History {
        ops: std::mem::take(&mut book.ops),
    });
    assert!(checked.violations.is_empty(), "the checker: {checked}");
    assert!(checked.pending_at_stop > 0, "{checked}");
    eprintln!(
        "checked {} messages in {:?}; the checker: {checked}",
        book.known.len(),
        started.elapsed()
    );
}

/// Starts the server on `data`: a `restart` line after a crash (the first
/// start has none to follow).
async fn start(http: &reqwest::Client, ledger: &Ledger, data: &std::path::Path) -> Server {
    let invoke = now_ms();
    let server = Server::start(data);
    wait_healthy(http, &server).await;
    let mut book = ledger.lock().unwrap();
    if book.ops.iter().any(|op| matches!(op, Op::Crash(_))) {
        book.ops.push(Op::Restart(history::Span {
            invoke,
            complete: now_ms(),
        }));
    }
    server
}
