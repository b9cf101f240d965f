//! Shutdown: waiting lease calls return empty lists promptly, in-flight
//! requests finish first, and the server returns Ok within 10 seconds.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_core::testkit::hooked::Hooked;
use delayd_core::testkit::ModelBroker;
use delayd_server::ServerOptions;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

/// What the test controls of the broker: its enqueue, once entered, holds
/// until released (an in-flight request); lease calls announce themselves.
struct Gate {
    enqueue_entered: Notify,
    release_enqueue: Semaphore,
    lease_entered: Notify,
}

/// A ModelBroker behind `gate`.
fn gated(gate: &Arc<Gate>) -> Hooked<ModelBroker> {
    let gate = Arc::clone(gate);
    Hooked::new(
        ModelBroker::new(),
        Box::new(move |call| {
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                match call {
                    "enqueue" => {
                        gate.enqueue_entered.notify_one();
                        let _permit = gate.release_enqueue.acquire().await;
                    }
                    "lease" => gate.lease_entered.notify_one(),
                    _ => {}
                }
            })
        }),
    )
}

#[tokio::test]
async fn waiting_lease_returns_empty_and_in_flight_requests_finish() {
    let gate = Arc::new(Gate {
        enqueue_entered: Notify::new(),
        release_enqueue: Semaphore::new(0),
        lease_entered: Notify::new(),
    });
    let mut s = common::start(Arc::new(gated(&gate)), ServerOptions::default()).await;
    let client = s.client.clone();
    let base = s.base.clone();

    let lease_call = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            let started = Instant::now();
            let r = client
                .post(format!("{base}/v1/queues/idle/leases"))
                .json(&json!({"wait_ms": 60000}))
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
                started.elapsed(),
            )
        }
    });
    gate.lease_entered.notified().await;
    let enqueue_call = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            let r = client
                .post(format!("{base}/v1/queues/busy/messages"))
                .json(&json!({"id": "kept", "payload": "p"}))
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    });
    gate.enqueue_entered.notified().await;

    let stopping = Instant::now();
    s.trigger_stop();
    // The in-flight enqueue holds the broker shutdown back; let it go only
    // once shutdown has begun, to prove it still completes.
    tokio::task::yield_now().await;
    gate.release_enqueue.add_permits(1);
    assert_eq!(
        enqueue_call.await.unwrap(),
        201,
        "in-flight request must finish"
    );

    let (status, body, waited) = lease_call.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, json!({"messages": []}));
    assert!(waited < Duration::from_secs(10), "lease waited {waited:?}");

    let result = s.task.take().unwrap().await.unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(stopping.elapsed() < Duration::from_secs(10));
    // (A 201 above also proves the order: after the broker shut down the
    // enqueue would have failed with 503 unavailable.)
}

#[tokio::test]
async fn no_new_connections_after_shutdown() {
    let s = common::start_default().await;
    let addr = s.addr;
    let started = Instant::now();
    s.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener must be closed"
    );
}
