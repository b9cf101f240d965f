//! The protocol's error replies, the stats documents' exact keys, and the
//! server's limits.

use std::sync::Arc;

use delayd_beanstalk::BeanstalkConfig;
use delayd_core::testkit::ModelBroker;

use crate::common::{start, start_with, Client};

#[tokio::test]
async fn unknown_command_and_bad_format() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("frobnicate 1").await, "UNKNOWN_COMMAND");
    assert_eq!(c.cmd("").await, "UNKNOWN_COMMAND");
    for bad in [
        "delete",
        "delete x",
        "delete -1",
        "delete 18446744073709551616",
        "release 1 2",
        "bury 1 4294967296",
        "reserve 5",
        "reserve-with-timeout",
        "use -starts-with-hyphen",
        "use has space",
        &format!("watch {}", "a".repeat(201)),
        "put 1 2 3",
        "put a 0 0 1",
        "stats now",
        "kick",
        "pause-tube default",
    ] {
        assert_eq!(c.cmd(bad).await, "BAD_FORMAT", "{bad:?}");
    }
    assert_eq!(c.cmd("use -dash-first").await, "BAD_FORMAT");
    // The connection is still in step.
    assert_eq!(c.cmd("list-tube-used").await, "USING default");
}

#[tokio::test]
async fn overlong_line_is_skipped_whole() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    let long = format!("use {}\r\n", "x".repeat(5000));
    c.send(long.as_bytes()).await;
    assert_eq!(c.line().await, "BAD_FORMAT");
    assert_eq!(c.cmd("list-tube-used").await, "USING default");
}

#[tokio::test]
async fn expected_crlf_and_job_too_big() {
    let server = start_with(
        Arc::new(ModelBroker::new()),
        BeanstalkConfig {
            max_job_size: 10,
            ..BeanstalkConfig::default()
        },
    )
    .await;
    let mut c = Client::connect(server.addr).await;
    c.send(b"put 1 0 1 3\r\nabcXY").await;
    assert_eq!(c.line().await, "EXPECTED_CRLF");
    // The body (with bytes that look like commands) is thrown away.
    c.send(b"put 1 0 1 11\r\nstats\r\nstat\r\n").await;
    assert_eq!(c.line().await, "JOB_TOO_BIG");
    assert_eq!(c.put(1, 0, 1, "0123456789").await, 1);
    assert_eq!(c.stat("stats", "max-job-size").await, "10");
}

#[tokio::test]
async fn default_max_job_size_is_65535() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    let body = "x".repeat(65_535);
    assert_eq!(c.put(1, 0, 1, &body).await, 1);
    let mut big = b"put 1 0 1 65536\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'y', 65_536));
    big.extend_from_slice(b"\r\n");
    c.send(&big).await;
    assert_eq!(c.line().await, "JOB_TOO_BIG");
    assert_eq!(c.job("peek 1").await.unwrap().2.len(), 65_535);
}

const STATS_KEYS: &[&str] = &[
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "cmd-put",
    "cmd-peek",
    "cmd-peek-ready",
    "cmd-peek-delayed",
    "cmd-peek-buried",
    "cmd-reserve",
    "cmd-reserve-with-timeout",
    "cmd-delete",
    "cmd-release",
    "cmd-use",
    "cmd-watch",
    "cmd-ignore",
    "cmd-bury",
    "cmd-kick",
    "cmd-touch",
    "cmd-stats",
    "cmd-stats-job",
    "cmd-stats-tube",
    "cmd-list-tubes",
    "cmd-list-tube-used",
    "cmd-list-tubes-watched",
    "cmd-pause-tube",
    "job-timeouts",
    "total-jobs",
    "max-job-size",
    "current-tubes",
    "current-connections",
    "current-producers",
    "current-workers",
    "current-waiting",
    "total-connections",
    "pid",
    "version",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
    "draining",
    "id",
    "hostname",
    "os",
    "platform",
];

const JOB_KEYS: &[&str] = &[
    "id",
    "tube",
    "state",
    "pri",
    "age",
    "delay",
    "ttr",
    "time-left",
    "file",
    "reserves",
    "timeouts",
    "releases",
    "buries",
    "kicks",
];

const TUBE_KEYS: &[&str] = &[
    "name",
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-using",
    "current-watching",
    "current-waiting",
    "cmd-delete",
    "cmd-pause-tube",
    "pause",
    "pause-time-left",
];

fn keys(dict: &[(String, String)]) -> Vec<&str> {
    dict.iter().map(|(k, _)| k.as_str()).collect()
}

#[tokio::test]
async fn stats_documents_carry_beanstalkds_keys() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(5, 0, 60, "u").await;
    c.put(2000, 30, 60, "d").await;
    let stats = c.dict("stats").await;
    assert_eq!(keys(&stats), STATS_KEYS);
    let get = |k: &str| stats.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(get("current-jobs-urgent"), "1");
    assert_eq!(get("current-jobs-delayed"), "1");
    assert_eq!(get("cmd-put"), "2");
    assert_eq!(get("total-jobs"), "2");
    assert_eq!(get("current-connections"), "1");
    assert_eq!(get("current-producers"), "1");
    assert_eq!(get("draining"), "false");
    assert_eq!(get("pid"), std::process::id().to_string());

    let job = c.dict("stats-job 2").await;
    assert_eq!(keys(&job), JOB_KEYS);
    assert_eq!(job[1].1, "\"default\"");
    assert_eq!(job[2].1, "delayed");
    assert_eq!(job[5].1, "30");
    assert_eq!(job[7].1, "29", "time-left of a job delayed 30 s");
    assert_eq!(c.cmd("stats-job 3").await, "NOT_FOUND");

    let tube = c.dict("stats-tube default").await;
    assert_eq!(keys(&tube), TUBE_KEYS);
    assert_eq!(tube[0].1, "\"default\"");
    assert_eq!(tube[6].1, "2");
    assert_eq!(tube[7].1, "1");
    assert_eq!(c.cmd("stats-tube nope").await, "NOT_FOUND");
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed() {
    let server = start_with(
        Arc::new(ModelBroker::new()),
        BeanstalkConfig {
            max_connections: 1,
            ..BeanstalkConfig::default()
        },
    )
    .await;
    let mut first = Client::connect(server.addr).await;
    assert_eq!(first.cmd("list-tube-used").await, "USING default");
    let mut second = Client::connect(server.addr).await;
    assert!(second.read_to_end().await.is_empty());
    assert_eq!(first.stat("stats", "current-connections").await, "1");
    drop(first);
    // The slot frees once the first connection's task has ended.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !answers(server.addr).await {
        assert!(std::time::Instant::now() < deadline, "slot never freed");
        tokio::task::yield_now().await;
    }
}

/// Whether a new connection gets an answer (errors mean "closed on us").
async fn answers(addr: std::net::SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(b"list-tube-used\r\n").await.is_err() {
        return false;
    }
    let mut reply = [0u8; 15];
    let read = tokio::time::timeout(crate::common::REPLY_TIMEOUT, stream.read_exact(&mut reply));
    matches!(read.await, Ok(Ok(_))) && &reply == b"USING default\r\n"
}

#[tokio::test]
async fn store_failure_is_internal_error() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    c.put(1, 0, 60, "kept").await;
    server.broker.shutdown().await.unwrap();
    c.send(b"put 1 0 60 1\r\nx\r\n").await;
    assert_eq!(c.line().await, "INTERNAL_ERROR");
    assert_eq!(c.cmd("stats").await, "INTERNAL_ERROR");
    assert_eq!(c.cmd("reserve").await, "INTERNAL_ERROR");
    // Protocol-level commands still answer.
    assert_eq!(c.cmd("list-tube-used").await, "USING default");
}

#[tokio::test]
async fn a_client_that_does_not_read_stalls_only_itself() {
    let server = start().await;
    let mut slow = Client::connect(server.addr).await;
    let body = "z".repeat(60_000);
    slow.put(1, 0, 60, &body).await;
    // 300 pipelined peeks ask for 18 MB of replies the client won't read yet.
    let peeks = "peek 1\r\n".repeat(300);
    slow.send(peeks.as_bytes()).await;
    let mut other = Client::connect(server.addr).await;
    assert_eq!(other.put(1, 0, 60, "fine").await, 2);
    assert_eq!(other.cmd("delete 2").await, "DELETED");
    for _ in 0..300 {
        assert_eq!(slow.line().await, "FOUND 1 60000");
        assert_eq!(slow.body(60_000).await.len(), 60_000);
    }
}

/// Every tube name beanstalkd accepts is a queue (protocol.txt, "Tubes"):
/// letters, digits and `- + / ; . $ _ ( )`, up to 200 bytes, not beginning
/// with `-`. A PHP client's own test uses `random$test`.
#[tokio::test]
async fn every_beanstalkd_tube_name_works() {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    let long = "t".repeat(200);
    for tube in [
        "random$test",
        "a+b/c;d.e$f_g(h)i-j",
        "trailing-",
        long.as_str(),
    ] {
        assert_eq!(c.cmd(&format!("use {tube}")).await, format!("USING {tube}"));
        assert_eq!(c.cmd(&format!("watch {tube}")).await, "WATCHING 2");
        let id = c.put(1, 0, 60, "x").await;
        assert_eq!(
            c.stat(&format!("stats-job {id}"), "tube").await,
            format!("\"{tube}\"")
        );
        let (_, got, _) = c.job("reserve-with-timeout 0").await.expect("reserved");
        assert_eq!(got, id);
        assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
        assert_eq!(c.cmd(&format!("ignore {tube}")).await, "WATCHING 1");
    }
}
