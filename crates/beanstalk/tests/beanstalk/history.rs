//! The beanstalkd protocol in a message's history (api.md, "Message
//! history"): `reserve` and `reserve-job` are `leased` events via
//! `beanstalk`, `release` is `nacked` (its delay, no error text), `bury`
//! is `dead` with reason `buried`, `kick-job` is `redriven`. Over the
//! reference model and over LocalBroker.

use std::time::Duration;

use delayd_core::{DeathReason, EventKind, History, MessageId, QueueName, Via};

use crate::common::{start, start_local, Client, TestServer, REPLY_TIMEOUT};

/// The history of the job `seq` of tube `default`.
async fn history(server: &TestServer, seq: u64) -> History {
    let message = server.broker.get_by_seq(seq).await.unwrap().unwrap();
    let queue = QueueName::new("default").unwrap();
    let id: MessageId = message.id;
    server.broker.events(&queue, &id).await.unwrap()
}

/// Waits until `n` connections wait in a reserve (a `stats` poll, so the
/// put that follows finds the reserve waiting, whatever the machine's
/// speed).
async fn until_waiting(observer: &mut Client, n: u32) {
    let deadline = tokio::time::Instant::now() + REPLY_TIMEOUT;
    while observer.stat("stats", "current-waiting").await != n.to_string() {
        assert!(tokio::time::Instant::now() < deadline, "no reserve waiting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn via(history: &History, n: usize) -> Option<Via> {
    match history.events.get(n).map(|e| &e.kind) {
        Some(EventKind::Leased { via, .. }) => Some(*via),
        _ => None,
    }
}

/// A reserve that waits for its job, a release, a `reserve-job`, a bury,
/// a kick: each its event.
async fn reserve_release_bury_kick(server: TestServer) {
    let mut consumer = Client::connect(server.addr).await;
    let mut producer = Client::connect(server.addr).await;
    consumer.send(b"reserve-with-timeout 10\r\n").await;
    until_waiting(&mut producer, 1).await;
    let seq = producer.put(5, 0, 60, "job").await;
    assert_eq!(consumer.line().await, format!("RESERVED {seq} 3"));
    assert_eq!(consumer.body(3).await, b"job");
    let release = format!("release {seq} 5 0");
    assert_eq!(consumer.cmd(&release).await, "RELEASED");
    let (word, _, _) = consumer.job(&format!("reserve-job {seq}")).await.unwrap();
    assert_eq!(word, "RESERVED");
    assert_eq!(consumer.cmd(&format!("bury {seq} 5")).await, "BURIED");
    assert_eq!(consumer.cmd(&format!("kick-job {seq}")).await, "KICKED");

    let h = history(&server, seq).await;
    let names: Vec<&str> = h.events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        names,
        ["enqueued", "leased", "nacked", "leased", "dead", "redriven"],
        "{h:?}"
    );
    assert_eq!(via(&h, 1), Some(Via::Beanstalk), "reserve: {h:?}");
    assert_eq!(via(&h, 3), Some(Via::Beanstalk), "reserve-job: {h:?}");
    assert_eq!(
        h.events[2].kind,
        EventKind::Nacked {
            delay_ms: Some(0),
            error: None
        }
    );
    assert_eq!(
        h.events[4].kind,
        EventKind::Dead {
            reason: DeathReason::Buried
        }
    );
    let attempts: Vec<u32> = h.events.iter().map(|e| e.attempt).collect();
    assert_eq!((attempts[1], attempts[3], attempts[5]), (1, 2, 0), "{h:?}");
}

/// A reserve that finds its job ready (answered through the pipelined
/// path) is a beanstalk lease too.
async fn ready_reserve_is_via_beanstalk(server: TestServer) {
    let mut c = Client::connect(server.addr).await;
    let seq = c.put(5, 0, 60, "job").await;
    let (_, reserved, _) = c.job("reserve").await.unwrap();
    assert_eq!(reserved, seq);
    let h = history(&server, seq).await;
    assert_eq!(via(&h, 1), Some(Via::Beanstalk), "{h:?}");
}

mod model {
    #[tokio::test]
    async fn reserve_release_bury_kick() {
        super::reserve_release_bury_kick(super::start().await).await;
    }

    #[tokio::test]
    async fn ready_reserve_is_via_beanstalk() {
        super::ready_reserve_is_via_beanstalk(super::start().await).await;
    }
}

mod local {
    #[tokio::test]
    async fn reserve_release_bury_kick() {
        super::reserve_release_bury_kick(super::start_local().await).await;
    }

    #[tokio::test]
    async fn ready_reserve_is_via_beanstalk() {
        super::ready_reserve_is_via_beanstalk(super::start_local().await).await;
    }
}
