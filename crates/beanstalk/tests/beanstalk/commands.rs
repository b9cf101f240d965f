//! Every command of protocol.txt over TCP, with each of its replies.

use std::time::{Duration, Instant};

use super::start;
use crate::common::Client;

#[tokio::test]
async fn put_reserve_delete_first_id_is_one() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.put(10, 0, 60, "hello").await, 1);
    assert_eq!(c.put(10, 0, 60, "world").await, 2);
    let (word, id, body) = c.job("reserve").await.unwrap();
    assert_eq!(
        (word.as_str(), id, body.as_slice()),
        ("RESERVED", 1, &b"hello"[..])
    );
    assert_eq!(c.cmd("delete 1").await, "DELETED");
    assert_eq!(c.cmd("delete 1").await, "NOT_FOUND");
    // Ready, unreserved jobs may be deleted by anyone.
    assert_eq!(c.cmd("delete 2").await, "DELETED");
    assert_eq!(c.cmd("delete 99").await, "NOT_FOUND");
}

#[tokio::test]
async fn jobs_are_broker_messages() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("use mapped").await, "USING mapped");
    c.put(7, 30, 45, "body").await;
    let message = server.broker.get_by_seq(1).await.unwrap().unwrap();
    assert_eq!(message.queue.as_str(), "mapped");
    assert_eq!(message.priority, 7);
    assert_eq!(message.lease_ms, Some(45_000));
    assert_eq!(message.deliver_at - message.enqueued_at, 30_000);
    assert_eq!(message.payload, b"body");
    // Queues the listener creates never dead-letter on their own.
    let queue = server.broker.get_queue(&message.queue).await.unwrap();
    assert_eq!(queue.config.max_attempts, 0);
}

#[tokio::test]
async fn reserve_order_is_priority_then_fifo() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(5, 0, 60, "b").await;
    c.put(1, 0, 60, "a").await;
    c.put(5, 0, 60, "c").await;
    for expected in ["a", "b", "c"] {
        let (_, _, body) = c.job("reserve-with-timeout 0").await.unwrap();
        assert_eq!(body, expected.as_bytes());
    }
}

#[tokio::test]
async fn use_watch_ignore_and_listing() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("list-tube-used").await, "USING default");
    assert_eq!(c.cmd("use jobs.a").await, "USING jobs.a");
    assert_eq!(c.cmd("list-tube-used").await, "USING jobs.a");
    assert_eq!(c.cmd("ignore default").await, "NOT_IGNORED");
    assert_eq!(c.cmd("watch jobs.a").await, "WATCHING 2");
    assert_eq!(c.cmd("watch jobs.a").await, "WATCHING 2");
    assert_eq!(
        c.yaml("list-tubes-watched").await,
        "---\n- default\n- jobs.a\n"
    );
    assert_eq!(c.cmd("ignore default").await, "WATCHING 1");
    assert_eq!(c.cmd("ignore jobs.a").await, "NOT_IGNORED");
    assert_eq!(c.yaml("list-tubes-watched").await, "---\n- jobs.a\n");
    c.put(1, 0, 60, "x").await;
    let (_, id, _) = c.job("reserve-with-timeout 0").await.unwrap();
    assert_eq!(id, 1);
}

#[tokio::test]
async fn tubes_exist_while_referenced_or_holding_jobs() {
    let server = start().await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    assert_eq!(a.cmd("use keep").await, "USING keep");
    assert_eq!(a.cmd("watch gone").await, "WATCHING 2");
    a.put(1, 0, 60, "x").await;
    assert_eq!(
        b.yaml("list-tubes").await,
        "---\n- default\n- gone\n- keep\n"
    );
    assert_eq!(a.cmd("use default").await, "USING default");
    assert_eq!(a.cmd("ignore gone").await, "WATCHING 1");
    // "keep" still holds a job; "gone" has nothing and nobody.
    assert_eq!(b.yaml("list-tubes").await, "---\n- default\n- keep\n");
    assert_eq!(b.cmd("stats-tube gone").await, "NOT_FOUND");
    assert_eq!(b.stat("stats-tube keep", "current-jobs-ready").await, "1");
    assert_eq!(b.stat("stats", "current-tubes").await, "2");
}

#[tokio::test]
async fn reserve_blocks_until_a_put() {
    let server = start().await;
    let mut worker = Client::connect(server.addr).await;
    let mut producer = Client::connect(server.addr).await;
    worker.send(b"reserve\r\n").await;
    // The worker is waiting once stats says so: an event, not a sleep.
    let deadline = Instant::now() + Duration::from_secs(5);
    while producer.stat("stats", "current-waiting").await != "1" {
        assert!(Instant::now() < deadline, "worker never started waiting");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        producer.stat("stats-tube default", "current-waiting").await,
        "1"
    );
    producer.put(1, 0, 60, "job").await;
    assert_eq!(worker.line().await, "RESERVED 1 3");
    assert_eq!(worker.body(3).await, b"job");
}

#[tokio::test]
async fn reserve_with_timeout_times_out() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    let started = Instant::now();
    assert_eq!(c.cmd("reserve-with-timeout 1").await, "TIMED_OUT");
    assert!(
        started.elapsed() >= Duration::from_millis(990),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn reserve_on_a_half_closed_connection_times_out() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"reserve\r\n").await;
    c.half_close().await;
    assert_eq!(c.line().await, "TIMED_OUT");
    assert!(c.read_to_end().await.is_empty());
}

#[tokio::test]
async fn release_with_and_without_delay() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 0, 60, "r").await;
    c.job("reserve").await.unwrap();
    assert_eq!(c.cmd("release 1 7 100").await, "RELEASED");
    assert_eq!(c.stat("stats-job 1", "state").await, "delayed");
    assert_eq!(c.stat("stats-job 1", "pri").await, "7");
    assert_eq!(c.cmd("release 1 7 0").await, "NOT_FOUND");
    assert_eq!(c.cmd("kick-job 1").await, "KICKED");
    c.job("reserve-with-timeout 0").await.unwrap();
    assert_eq!(c.cmd("release 1 3 0").await, "RELEASED");
    let job = c.dict("stats-job 1").await;
    let get = |k: &str| job.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(get("state"), "ready");
    assert_eq!(get("releases"), "2");
    assert_eq!(get("reserves"), "2");
}

#[tokio::test]
async fn bury_peek_buried_kick() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 0, 60, "one").await;
    c.put(1, 0, 60, "two").await;
    c.put(1, 100, 60, "later").await;
    assert_eq!(c.job("peek-buried").await.unwrap_err(), "NOT_FOUND");
    c.job("reserve").await.unwrap();
    assert_eq!(c.cmd("bury 1 9").await, "BURIED");
    assert_eq!(c.cmd("bury 1 9").await, "NOT_FOUND");
    let (word, id, body) = c.job("peek-buried").await.unwrap();
    assert_eq!(
        (word.as_str(), id, body.as_slice()),
        ("FOUND", 1, &b"one"[..])
    );
    assert_eq!(c.stat("stats-job 1", "state").await, "buried");
    assert_eq!(c.stat("stats-job 1", "pri").await, "9");
    assert_eq!(
        c.stat("stats-tube default", "current-jobs-buried").await,
        "1"
    );
    // Buried jobs first; only then delayed ones.
    assert_eq!(c.cmd("kick 10").await, "KICKED 1");
    assert_eq!(c.stat("stats-job 1", "state").await, "ready");
    assert_eq!(c.cmd("kick 10").await, "KICKED 1");
    assert_eq!(c.stat("stats-job 3", "state").await, "ready");
    assert_eq!(c.cmd("kick 10").await, "KICKED 0");
}

#[tokio::test]
async fn kick_job_buried_delayed_and_not_kickable() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 100, 60, "delayed").await;
    c.put(1, 0, 60, "ready").await;
    assert_eq!(c.cmd("kick-job 1").await, "KICKED");
    assert_eq!(c.cmd("kick-job 1").await, "NOT_FOUND");
    assert_eq!(c.cmd("kick-job 42").await, "NOT_FOUND");
    let (_, id, _) = c.job("reserve-job 2").await.unwrap();
    assert_eq!(id, 2);
    assert_eq!(c.cmd("bury 2 1").await, "BURIED");
    assert_eq!(c.cmd("kick-job 2").await, "KICKED");
    assert_eq!(c.stat("stats-job 2", "kicks").await, "1");
}

#[tokio::test]
async fn peek_commands() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.job("peek 1").await.unwrap_err(), "NOT_FOUND");
    assert_eq!(c.job("peek-ready").await.unwrap_err(), "NOT_FOUND");
    assert_eq!(c.job("peek-delayed").await.unwrap_err(), "NOT_FOUND");
    c.put(3, 0, 60, "r3").await;
    c.put(2, 0, 60, "r2").await;
    c.put(1, 200, 60, "d200").await;
    c.put(1, 100, 60, "d100").await;
    assert_eq!(
        c.job("peek 1").await.unwrap(),
        ("FOUND".into(), 1, b"r3".to_vec())
    );
    assert_eq!(c.job("peek-ready").await.unwrap().1, 2);
    assert_eq!(c.job("peek-delayed").await.unwrap().1, 4);
    // Only the used tube is peeked.
    assert_eq!(c.cmd("use other").await, "USING other");
    assert_eq!(c.job("peek-ready").await.unwrap_err(), "NOT_FOUND");
    assert_eq!(c.job("peek 2").await.unwrap().2, b"r2");
}

#[tokio::test]
async fn touch_and_reserve_job() {
    let server = start().await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    a.put(1, 0, 60, "t").await;
    assert_eq!(a.cmd("touch 1").await, "NOT_FOUND");
    a.job("reserve-job 1").await.unwrap();
    assert_eq!(b.job("reserve-job 1").await.unwrap_err(), "NOT_FOUND");
    assert_eq!(b.job("reserve-job 9").await.unwrap_err(), "NOT_FOUND");
    assert_eq!(a.cmd("touch 1").await, "TOUCHED");
    assert_eq!(b.cmd("touch 1").await, "NOT_FOUND");
    assert_eq!(a.stat("stats-job 1", "state").await, "reserved");
    assert_eq!(a.stat("stats-job 1", "ttr").await, "60");
    // Whole seconds, truncated: right after the reserve beanstalkd says 59.
    let left = a.stat("stats-job 1", "time-left").await;
    assert_eq!(left, "59", "time-left");
}

#[tokio::test]
async fn only_the_reserving_connection_may_finish_a_job() {
    let server = start().await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    a.put(1, 0, 60, "mine").await;
    a.job("reserve").await.unwrap();
    assert_eq!(b.cmd("delete 1").await, "NOT_FOUND");
    assert_eq!(b.cmd("release 1 1 0").await, "NOT_FOUND");
    assert_eq!(b.cmd("bury 1 1").await, "NOT_FOUND");
    assert_eq!(a.cmd("delete 1").await, "DELETED");
}

#[tokio::test]
async fn closing_a_connection_releases_its_jobs() {
    let server = start().await;
    let mut a = Client::connect(server.addr).await;
    a.put(1, 0, 60, "orphan").await;
    a.job("reserve").await.unwrap();
    drop(a);
    let mut b = Client::connect(server.addr).await;
    let (_, id, body) = b.job("reserve-with-timeout 5").await.unwrap();
    assert_eq!((id, body.as_slice()), (1, &b"orphan"[..]));
}

#[tokio::test]
async fn ttr_expiry_and_deadline_soon() {
    let server = start().await;
    let mut a = Client::connect(server.addr).await;
    let mut b = Client::connect(server.addr).await;
    a.put(1, 0, 1, "slow").await;
    a.job("reserve").await.unwrap();
    // A TTR of 1 s is all safety margin: the next reserve warns at once.
    assert_eq!(a.cmd("reserve").await, "DEADLINE_SOON");
    // Once the TTR passes, the job is ready again for anyone.
    let (_, id, _) = b.job("reserve-with-timeout 5").await.unwrap();
    assert_eq!(id, 1);
    assert_eq!(a.cmd("delete 1").await, "NOT_FOUND");
    assert_eq!(b.stat("stats-job 1", "reserves").await, "2");
}

#[tokio::test]
async fn ttr_zero_is_one_second() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 0, 0, "z").await;
    assert_eq!(c.stat("stats-job 1", "ttr").await, "1");
}

#[tokio::test]
async fn pause_tube() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("pause-tube nowhere 10").await, "NOT_FOUND");
    c.put(1, 0, 60, "p").await;
    assert_eq!(c.cmd("pause-tube default 60").await, "PAUSED");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    let stats = c.dict("stats-tube default").await;
    let get = |k: &str| stats.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(get("pause"), "60");
    assert_eq!(get("cmd-pause-tube"), "1");
    assert_eq!(get("pause-time-left"), "59");
    assert_eq!(c.cmd("pause-tube default 0").await, "PAUSED");
    assert!(c.job("reserve-with-timeout 0").await.is_ok());
}

#[tokio::test]
async fn drain_mode_refuses_puts_only() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 0, 60, "before").await;
    server.handle.drain();
    c.send(b"put 1 0 60 5\r\nafter\r\n").await;
    assert_eq!(c.line().await, "DRAINING");
    assert_eq!(c.stat("stats", "draining").await, "true");
    assert!(c.job("reserve-with-timeout 0").await.is_ok());
}

#[tokio::test]
async fn quit_closes_the_connection() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"quit\r\nstats\r\n").await;
    assert!(c.read_to_end().await.is_empty());
}

#[tokio::test]
async fn shutdown_closes_connections_and_releases_their_jobs() {
    use std::sync::Arc;

    use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
    use delayd_core::testkit::ModelBroker;
    use delayd_core::{Broker, MessageState};

    let broker: Arc<dyn Broker> = Arc::new(ModelBroker::new());
    let addr = "127.0.0.1:0".parse().unwrap();
    let server = BeanstalkServer::bind(addr, Arc::clone(&broker), BeanstalkConfig::default())
        .await
        .unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let mut worker = Client::connect(addr).await;
    worker.put(1, 0, 60, "held").await;
    worker.job("reserve").await.unwrap();
    let mut waiting = Client::connect(addr).await;
    waiting.send(b"reserve\r\n").await;
    // Stop only once the reserve is being served: a connection still in the
    // accept backlog with unread bytes would be reset, not closed.
    let deadline = Instant::now() + Duration::from_secs(5);
    while worker.stat("stats", "current-waiting").await != "1" {
        assert!(Instant::now() < deadline, "reserve never started waiting");
        tokio::task::yield_now().await;
    }
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("run did not return after shutdown")
        .unwrap();
    assert!(waiting.read_to_end().await.is_empty());
    assert!(worker.read_to_end().await.is_empty());
    let message = broker.get_by_seq(1).await.unwrap().unwrap();
    assert_eq!(message.state, MessageState::Ready);
}

#[tokio::test]
async fn a_socket_bound_before_the_broker_opens_keeps_early_clients() {
    use std::sync::Arc;

    use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
    use delayd_core::testkit::ModelBroker;
    use delayd_core::SystemClock;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // A client connects and pipelines before the server exists.
    let mut early = Client::connect(addr).await;
    early.send(b"list-tube-used\r\n").await;
    let broker = Arc::new(ModelBroker::new());
    let server = BeanstalkServer::from_listener(
        listener,
        broker,
        BeanstalkConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    tokio::spawn(server.run(std::future::pending()));
    assert_eq!(early.line().await, "USING default");
}

#[tokio::test]
async fn deadline_soon_arrives_while_waiting() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 0, 2, "held").await;
    c.job("reserve").await.unwrap();
    // Nothing else is ready: the reserve waits until the last second of
    // the held job's TTR, then warns.
    let started = Instant::now();
    assert_eq!(c.cmd("reserve").await, "DEADLINE_SOON");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited < Duration::from_millis(1900), "{waited:?}");
    assert_eq!(c.cmd("delete 1").await, "DELETED");
}

#[tokio::test]
async fn reserve_spans_watched_tubes_in_priority_order() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("use a").await, "USING a");
    c.put(5, 0, 60, "a5").await;
    assert_eq!(c.cmd("use b").await, "USING b");
    c.put(1, 0, 60, "b1").await;
    assert_eq!(c.cmd("use c").await, "USING c");
    c.put(0, 0, 60, "c0-unwatched").await;
    assert_eq!(c.cmd("watch a").await, "WATCHING 2");
    assert_eq!(c.cmd("watch b").await, "WATCHING 3");
    assert_eq!(c.job("reserve").await.unwrap().2, b"b1");
    assert_eq!(c.job("reserve").await.unwrap().2, b"a5");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
}

#[tokio::test]
async fn waiting_reserve_sees_a_tube_created_meanwhile() {
    let server = start().await;
    let mut worker = Client::connect(server.addr).await;
    let mut producer = Client::connect(server.addr).await;
    assert_eq!(worker.cmd("watch fresh").await, "WATCHING 2");
    worker.send(b"reserve-with-timeout 10\r\n").await;
    assert_eq!(producer.cmd("use fresh").await, "USING fresh");
    producer.put(1, 0, 60, "new tube").await;
    assert_eq!(worker.line().await, "RESERVED 1 8");
    assert_eq!(worker.body(8).await, b"new tube");
}
