//! Queue state and dispatcher lifetime: paused queues push nothing, removing
//! the push config stops pushing, and a delivery lost with its dispatcher
//! (as in a crash) is redelivered once its lease expires.

use std::sync::Arc;
use std::time::Duration;

use delayd_core::testkit::support::run_case_virtual;
use delayd_core::testkit::ModelBroker;
use delayd_core::{LeaseRequest, MessageState, QueueConfigPatch, Schedule};

use crate::common::*;

/// The "nothing happened" checks run on paused tokio time (over the real
/// loopback sockets): the dispatcher's discovery and lease rounds are
/// timers, so the virtual wait surely holds those rounds, where a wall-clock
/// sleep on a loaded machine might hold none.
fn on_virtual_time<F, Fut>(test: F)
where
    F: FnOnce(Harness) -> Fut,
    Fut: std::future::Future<Output = Harness>,
{
    run_case_virtual(|clock| async move {
        let broker = Arc::new(ModelBroker::with_clock(clock.clone()));
        let options = delayd_push::PushOptions {
            clock,
            ..fast_options()
        };
        let h = Harness::on_broker(broker, policy(&["127.0.0.1/32"]), options);
        test(h).await.stop().await;
    });
}

#[test]
fn paused_queue_pushes_nothing_until_resumed() {
    on_virtual_time(|h| async move {
        let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
        h.push_queue("p", push(receiver.url(), 2_000, 2, None), 5, retry(50, 2.0))
            .await;
        h.broker.pause(&q("p"), None).await.unwrap();
        h.enqueue("p", "m", Schedule::Now, b"x", &[]).await;
        // Nothing can be awaited for "nothing happened": several discovery
        // (50 ms) and lease (200 ms) rounds in which to (wrongly) push.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert!(receiver.requests.try_recv().is_err(), "paused queue pushed");
        let m = h.broker.get(&q("p"), &id("m")).await.unwrap();
        assert_eq!(m.state, MessageState::Ready);
        h.broker.resume(&q("p")).await.unwrap();
        let r = receiver.next(Duration::from_secs(5)).await;
        assert_eq!(r.header("delayd-id"), "m");
        h
    });
}

#[test]
fn removing_the_push_config_stops_pushing() {
    on_virtual_time(|h| async move {
        let mut receiver = Receiver::start(|_, _| Reply::Status(200)).await;
        h.push_queue("r", push(receiver.url(), 2_000, 2, None), 5, retry(50, 2.0))
            .await;
        h.enqueue("r", "first", Schedule::Now, b"x", &[]).await;
        receiver.next(Duration::from_secs(5)).await;
        let patch = QueueConfigPatch {
            push: Some(None),
            ..Default::default()
        };
        h.broker.put_queue(&q("r"), patch).await.unwrap();
        // After discovery (50 ms) plus a lease wait (200 ms) the worker is
        // gone; virtual time makes "after" certain.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        h.enqueue("r", "second", Schedule::Now, b"x", &[]).await;
        // Rounds enough for a dispatcher still at work to push it.
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert!(
            receiver.requests.try_recv().is_err(),
            "pushed after removal"
        );
        // A pull consumer gets it: the dispatcher did not take it.
        let request = LeaseRequest {
            max: 1,
            wait_ms: 0,
            lease_ms: None,
        };
        let leased = h.broker.lease(&[q("r")], request).await.unwrap();
        assert_eq!(leased.len(), 1);
        assert_eq!(leased[0].id, id("second"));
        h
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_lost_with_its_dispatcher_is_redelivered_after_the_lease() {
    let mut receiver = Receiver::start(|n, _| {
        if n == 0 {
            Reply::Hang
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let (broker, _dir) = local_broker().await;
    let options = crashy_options();
    let first = Harness::on_broker(
        Arc::clone(&broker),
        policy(&["127.0.0.1/32"]),
        options.clone(),
    );
    // A long timeout: only the lease (timeout + margin) bounds the delivery.
    first
        .push_queue("c", push(receiver.url(), 600, 1, None), 5, retry(50, 2.0))
        .await;
    first.enqueue("c", "m", Schedule::Now, b"x", &[]).await;
    let lost = receiver.next(Duration::from_secs(5)).await;
    assert_eq!(lost.attempt(), 1);
    // "Crash": the dispatcher goes away with the request in flight and
    // never acks or nacks (a zero grace drops the request at once).
    first.stop().await;
    let second = Harness::on_broker(Arc::clone(&broker), policy(&["127.0.0.1/32"]), options);
    let again = receiver.next(Duration::from_secs(5)).await;
    assert_eq!((again.header("delayd-id"), again.attempt()), ("m", 2));
    // Not before the first lease (600 ms timeout + 300 ms margin) expired.
    assert!(
        again.at - lost.at >= Duration::from_millis(850),
        "{:?}",
        again.at - lost.at
    );
    eventually(5_000, "acked", || async {
        broker.get(&q("c"), &id("m")).await.is_err()
    })
    .await;
    second.stop().await;
}

/// Drops in-flight requests at once on shutdown, as a crash would.
fn crashy_options() -> delayd_push::PushOptions {
    delayd_push::PushOptions {
        shutdown_grace: Duration::ZERO,
        ..fast_options()
    }
}
