//! Redis (AOF, `appendfsync always`) is down for a few fire times of a
//! schedule: nothing fires meanwhile, and once Redis is back the node's
//! sweep plans again at its `now`, so with `catchup: all` every fire time
//! of the outage is enqueued (once) and the schedule goes on.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::support::{broker, every_second, unique_prefix, RedisServer};
use delayd_core::testkit::support::eventually;
use delayd_core::{
    Broker, Clock, EnqueueOptions, ListQuery, MessageState, Overlap, QueueName, ScheduleId,
    SystemClock,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_times_of_an_outage_are_caught_up() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let node = broker(vec![server.url()], 1, &unique_prefix()).await;
    let q = QueueName::new("outage").unwrap();
    let id = ScheduleId::new("every-second").unwrap();
    let start = SystemClock.now_ms() + 300;
    let def = every_second(start, Overlap::Allow);
    node.put_schedule(&q, &id, def, EnqueueOptions::default())
        .await
        .unwrap();
    // Firing before the outage (a count, not a wall-clock guess: a loaded
    // machine may take longer to get there).
    eventually(10_000, "two fires before the outage", || async {
        node.get_schedule(&q, &id).await.unwrap().fires >= 2
    })
    .await;

    server.kill();
    let killed_at = SystemClock.now_ms();
    // Kept: Redis stays down across two fire times (every second) of real time; that outage is the scenario.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while node.ready().await.is_err() {
        assert!(Instant::now() < deadline, "broker never reconnected");
        // Polls: the broker's reconnection has no event this test can await.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The sweep after the restart has planned past every fire time of the
    // outage (waited for, however loaded the machine).
    eventually(20_000, "the outage's fire times caught up", || async {
        let record = node.get_schedule(&q, &id).await.unwrap();
        record.next_fire_at.is_some_and(|t| t >= killed_at + 2_500)
    })
    .await;

    let record = node.get_schedule(&q, &id).await.unwrap();
    let query = ListQuery {
        state: MessageState::Ready,
        after: None,
        limit: 100,
    };
    let enqueued: BTreeSet<String> = node
        .list(&q, query)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id.to_string())
        .collect();
    let expected: BTreeSet<String> = (0..record.fires)
        .map(|k| format!("{id}:{}", start + k * 1_000))
        .collect();
    assert_eq!(enqueued, expected);
    let outage_fires = (0..record.fires)
        .map(|k| start + k * 1_000)
        .filter(|t| *t > killed_at && *t < killed_at + 2_500)
        .count();
    assert!(outage_fires >= 2, "{record:?}, killed at {killed_at}");
}
