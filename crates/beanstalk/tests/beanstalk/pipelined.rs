//! Pipelined runs of one command kind go to the broker as one call (puts,
//! deletes of reserved jobs, reserves); the replies must be exactly those
//! of running the commands one by one, in order. Over both brokers.

use crate::common::{start, start_local, Client, TestServer};

/// Each case as two tests, over the ModelBroker and the LocalBroker.
macro_rules! over_both_brokers {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test]
                async fn model() {
                    super::$case(super::start().await).await;
                }

                #[tokio::test]
                async fn local() {
                    super::$case(super::start_local().await).await;
                }
            }
        )*
    };
}

over_both_brokers!(
    reserves_in_priority_order,
    deletes_mixed_with_other_jobs,
    waiting_reserves_get_later_jobs,
    held_job_commands_in_one_write,
);

mod commands_sent_during_a_wait_run_after_it {
    /// On paused time the case's 50 ms pass only once the runtime has
    /// nothing left to do, so the server has surely read what was sent
    /// during the wait (on the wall clock a loaded machine may not have, and
    /// the case would pass without testing it). Over the real socket, as
    /// the server's own tasks run on this runtime. The ModelBroker only:
    /// the LocalBroker commits on blocking threads, which paused time does
    /// not wait for.
    #[tokio::test(start_paused = true)]
    async fn model() {
        super::commands_sent_during_a_wait_run_after_it(super::start().await).await;
    }

    #[tokio::test]
    async fn local() {
        super::commands_sent_during_a_wait_run_after_it(super::start_local().await).await;
    }
}

/// Reads a `RESERVED <id> <bytes>` reply and its body; returns the id.
async fn reserved(c: &mut Client) -> u64 {
    let line = c.line().await;
    let parts: Vec<&str> = line.split(' ').collect();
    let ["RESERVED", id, bytes] = parts.as_slice() else {
        panic!("expected RESERVED, got {line}");
    };
    c.body(bytes.parse().expect("byte count")).await;
    id.parse().expect("job id")
}

async fn reserves_in_priority_order(server: TestServer) {
    let mut c = Client::connect(server.addr).await;
    let low = c.put(3, 0, 60, "low").await;
    let high = c.put(1, 0, 60, "high").await;
    let mid = c.put(2, 0, 60, "mid").await;
    c.send(b"reserve-with-timeout 0\r\n".repeat(4).as_slice())
        .await;
    assert_eq!(reserved(&mut c).await, high);
    assert_eq!(reserved(&mut c).await, mid);
    assert_eq!(reserved(&mut c).await, low);
    assert_eq!(
        c.line().await,
        "TIMED_OUT",
        "a fourth reserve finds nothing"
    );
}

async fn deletes_mixed_with_other_jobs(server: TestServer) {
    let mut c = Client::connect(server.addr).await;
    let a = c.put(1, 0, 60, "a").await;
    let b = c.put(1, 0, 60, "b").await;
    assert_eq!(c.job("reserve").await.expect("a").1, a);
    assert_eq!(c.job("reserve").await.expect("b").1, b);
    let delayed = c.put(1, 60, 60, "later").await;
    let run =
        format!("delete {a}\r\ndelete {delayed}\r\ndelete {b}\r\ndelete {a}\r\ndelete 999\r\n");
    c.send(run.as_bytes()).await;
    assert_eq!(c.line().await, "DELETED", "reserved a");
    assert_eq!(c.line().await, "DELETED", "delayed job, not reserved");
    assert_eq!(c.line().await, "DELETED", "reserved b");
    assert_eq!(c.line().await, "NOT_FOUND", "a again");
    assert_eq!(c.line().await, "NOT_FOUND", "unknown id");
    assert_eq!(c.stat("stats-tube default", "cmd-delete").await, "3");
    assert_eq!(c.stat("stats", "cmd-delete").await, "5");
}

/// A worker with two reserves pipelined and a producer whose first put
/// went to the first of them (returned with its id): the second waits.
async fn two_reserves_waiting(server: &TestServer) -> (Client, Client, u64) {
    let mut worker = Client::connect(server.addr).await;
    worker
        .send(b"reserve-with-timeout 5\r\nreserve-with-timeout 5\r\n")
        .await;
    let mut producer = Client::connect(server.addr).await;
    let first = producer.put(1, 0, 60, "first").await;
    assert_eq!(reserved(&mut worker).await, first);
    (worker, producer, first)
}

async fn waiting_reserves_get_later_jobs(server: TestServer) {
    let (mut worker, mut producer, first) = two_reserves_waiting(&server).await;
    let second = producer.put(1, 0, 60, "second").await;
    assert_eq!(reserved(&mut worker).await, second);
    assert_eq!(worker.cmd(&format!("delete {first}")).await, "DELETED");
}

/// Worker commands on held jobs in one write, one naming a job twice:
/// each reply is what the commands give one by one.
async fn held_job_commands_in_one_write(server: TestServer) {
    let mut c = Client::connect(server.addr).await;
    let a = c.put(1, 0, 60, "a").await;
    let b = c.put(1, 0, 60, "b").await;
    let d = c.put(1, 0, 60, "d").await;
    assert_eq!(c.job("reserve").await.expect("a").1, a);
    assert_eq!(c.job("reserve").await.expect("b").1, b);
    assert_eq!(c.job("reserve").await.expect("d").1, d);
    let run = format!(
        "touch {a}\r\nrelease {a} 5 0\r\ndelete {a}\r\nbury {b} 7\r\nrelease {b} 1 0\r\ndelete {d}\r\nput 1 0 60 1\r\nx\r\nreserve-with-timeout 0\r\n"
    );
    c.send(run.as_bytes()).await;
    assert_eq!(c.line().await, "TOUCHED");
    assert_eq!(c.line().await, "RELEASED");
    assert_eq!(
        c.line().await,
        "DELETED",
        "a released job is ready: anyone deletes it"
    );
    assert_eq!(c.line().await, "BURIED");
    assert_eq!(
        c.line().await,
        "NOT_FOUND",
        "a buried job is not held any more"
    );
    assert_eq!(c.line().await, "DELETED");
    let inserted = c.line().await;
    assert!(inserted.starts_with("INSERTED "), "put: {inserted}");
    let new_id: u64 = inserted["INSERTED ".len()..].parse().expect("id");
    assert_eq!(reserved(&mut c).await, new_id, "the put before the reserve");
    assert_eq!(c.stat(&format!("stats-job {b}"), "state").await, "buried");
}

/// What a client pipelines while a reserve waits is read during the wait
/// and must run right after it, without more input arriving.
async fn commands_sent_during_a_wait_run_after_it(server: TestServer) {
    let (mut worker, mut producer, first) = two_reserves_waiting(&server).await;
    // The second reserve is waiting now; these arrive during its wait.
    let more = format!("delete {first}\r\nreserve-with-timeout 0\r\n");
    worker.send(more.as_bytes()).await;
    // Kept: gives the server time to read the pipelined bytes during the wait; if it has not, the reserve still gets `second` (no hook tells when a connection read its input).
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let second = producer.put(1, 0, 60, "second").await;
    assert_eq!(reserved(&mut worker).await, second);
    assert_eq!(worker.line().await, "DELETED");
    assert_eq!(worker.line().await, "TIMED_OUT");
}
