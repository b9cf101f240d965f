//! Push delivery across a SIGKILL: with deliveries in flight to a slow
//! receiver, `delayd serve` is killed and restarted on the same data
//! directory; every message is still delivered (at least once, with a 2xx
//! answer), those in flight at the kill are delivered again (with their
//! attempt counted when their lease was durable at the kill; a lease does
//! not wait for its own fsync, so a crash may take it: README,
//! "Durability"), and the queue ends empty.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use crate::common::{wait_healthy, Server};

/// Every push request the receiver got, and those it answered 200.
#[derive(Default)]
struct Receiver {
    /// (delayd-id, delayd-attempt) on arrival.
    received: Mutex<Vec<(String, u64)>>,
    /// (delayd-id, delayd-attempt), recorded just before answering 200.
    answered: Mutex<Vec<(String, u64)>>,
    /// Bumped just before the server is killed: a request that arrived
    /// before is never answered 200 (its server is gone), so "received but
    /// not answered" after the kill is exactly what was in flight, however
    /// long the kill takes on a loaded machine.
    epoch: std::sync::atomic::AtomicU64,
}

async fn hook(State(receiver): State<Arc<Receiver>>, headers: HeaderMap) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (Some(id), Some(attempt)) = (header("delayd-id"), header("delayd-attempt")) else {
        return StatusCode::BAD_REQUEST;
    };
    let Ok(attempt) = attempt.parse::<u64>() else {
        return StatusCode::BAD_REQUEST;
    };
    let epoch = receiver.epoch.load(std::sync::atomic::Ordering::SeqCst);
    receiver
        .received
        .lock()
        .unwrap()
        .push((id.clone(), attempt));
    // Slow, so that deliveries are in flight when the server is killed.
    tokio::time::sleep(Duration::from_millis(150)).await;
    if receiver.epoch.load(std::sync::atomic::Ordering::SeqCst) != epoch {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    receiver.answered.lock().unwrap().push((id, attempt));
    StatusCode::OK
}

async fn queue_stats(http: &reqwest::Client, server: &Server) -> Value {
    let response = http
        .get(server.url("/v1/queues/p"))
        .send()
        .await
        .expect("GET queue");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["stats"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_deliveries_in_flight_at_sigkill_are_redelivered() {
    let receiver = Arc::new(Receiver::default());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let data = tempfile::tempdir().unwrap();
    let data_arg = data.path().to_str().unwrap();
    // Loopback targets are refused unless a CIDR entry covers them
    // (docs/push.md); the URL uses the IP literal, so the CIDR suffices.
    let args = [
        "--http",
        "127.0.0.1:0",
        "--beanstalk",
        "off",
        "--data",
        data_arg,
        "--push-allow",
        "127.0.0.0/8",
    ];
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut server = Server::start_with(&args, None, &[]);
    wait_healthy(&http, &server).await;

    let response = http
        .put(server.url("/v1/queues/p"))
        .json(&json!({
            "push": {"url": hook_url, "timeout_ms": 2000, "concurrency": 16},
            "retry": {"initial_ms": 100, "max_ms": 1000, "multiplier": 2.0},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());

    let ids: Vec<String> = (0..200).map(|i| format!("p-{i}")).collect();
    let messages: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| json!({"id": id, "payload": format!("message {i}"), "delay_ms": (i % 10) * 50}))
        .collect();
    let response = http
        .post(server.url("/v1/queues/p/batch"))
        .json(&json!({ "messages": messages }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 200);
    for result in results {
        assert_eq!(result["created"], true, "{result}");
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    // Kill once 30 deliveries were answered and some are in flight (the
    // dispatcher sends in waves of up to `concurrency`, so there are short
    // moments with none in flight).
    while receiver.answered.lock().unwrap().len() < 30
        || receiver.received.lock().unwrap().len() <= receiver.answered.lock().unwrap().len()
    {
        assert!(
            Instant::now() < deadline,
            "push made no progress; log:\n{}",
            server.log()
        );
        // Polls: a real server process's progress has no event this test can await.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    receiver
        .epoch
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    server.kill9();
    // Taken after the process is gone: an entry received but not answered
    // now was never answered to the killed server, so it cannot have been
    // acked and must be delivered again.
    let in_flight: HashSet<String> = {
        let answered: HashSet<(String, u64)> =
            receiver.answered.lock().unwrap().iter().cloned().collect();
        receiver
            .received
            .lock()
            .unwrap()
            .iter()
            .filter(|delivery| !answered.contains(delivery))
            .map(|(id, _)| id.clone())
            .collect()
    };
    let killed_at = receiver.received.lock().unwrap().len();
    assert!(
        !in_flight.is_empty(),
        "no delivery was in flight at the kill"
    );

    let server = Server::start_with(&args, None, &[]);
    wait_healthy(&http, &server).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answered: HashSet<String> = receiver
            .answered
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect();
        let missing = ids.iter().filter(|id| !answered.contains(*id)).count();
        let stats = queue_stats(&http, &server).await;
        let empty = ["scheduled", "ready", "leased", "dead"]
            .iter()
            .all(|k| stats[k] == 0);
        if missing == 0 && empty {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s: {missing} messages never delivered, stats {stats}; log:\n{}",
            server.log()
        );
        // Polls: the restarted server's redelivery has no event this test can await.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Those in flight at the kill were delivered again. A lease does not
    // wait for its own fsync (README, "Durability"): when the kill came
    // before the lease's group was durable, the crash took the lease and
    // the redelivery is attempt 1 again; otherwise the expired lease was
    // a failed attempt and the redelivery is attempt 2 or later.
    let mut after_restart: HashMap<String, u64> = HashMap::new();
    for (id, attempt) in receiver.received.lock().unwrap()[killed_at..].iter() {
        let entry = after_restart.entry(id.clone()).or_insert(*attempt);
        *entry = (*entry).max(*attempt);
    }
    for id in &in_flight {
        let attempt = after_restart.get(id).copied();
        assert!(
            attempt.is_some(),
            "{id} was in flight at the kill but not delivered again after the restart"
        );
    }
    for id in &ids {
        let response = http
            .get(server.url(&format!("/v1/queues/p/messages/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{id} should be acked and gone");
    }
    let received = receiver.received.lock().unwrap().len();
    eprintln!(
        "{received} deliveries for 200 messages, {} in flight at the kill",
        in_flight.len()
    );
}
