//! The function library's life on a live Redis: a node connecting to a
//! Redis that holds an older delayd library loads its own beside it (the
//! older version's functions keep working, as during a rolling upgrade),
//! and a library that disappears under a running node (FUNCTION FLUSH, a
//! restart without persistence) is loaded again by the next call. A node
//! refuses a deployment whose data is in another format.

use crate::support;

use crate::support::{broker, shared_single, unique_prefix, RedisServer};
use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, QueueName, Schedule};

const OLDER: &str = "delayd_00000000000000aa";

fn libraries(server: &RedisServer) -> String {
    server.cli(&["FUNCTION", "LIST"])
}

async fn round_trip(node: &delayd_redis::RedisBroker, q: &QueueName) {
    let request = EnqueueRequest {
        schedule: Schedule::Now,
        payload: b"x".to_vec(),
        ..Default::default()
    };
    let out = node
        .enqueue(q, vec![request], EnqueueOptions::default())
        .await
        .expect("enqueue");
    assert!(out[0].is_ok(), "{out:?}");
    let got = node
        .lease(
            std::slice::from_ref(q),
            LeaseRequest {
                max: 1,
                wait_ms: 0,
                lease_ms: None,
            },
        )
        .await
        .expect("lease");
    assert_eq!(got.len(), 1);
    node.ack(q, &got[0].id, &got[0].lease_id)
        .await
        .expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_library_loads_beside_an_older_one() {
    // Its own server: it counts the libraries loaded on it.
    let server = RedisServer::start();
    let older = format!(
        "#!lua name={OLDER}\nredis.register_function('{OLDER}_ping', function(keys, args) return 'old' end)"
    );
    let loaded = server.cli(&["FUNCTION", "LOAD", &older]);
    assert_eq!(loaded.trim(), OLDER);
    assert_ne!(delayd_redis::library_name(), OLDER);

    let node = broker(vec![server.url()], 1, &unique_prefix()).await;
    let list = libraries(&server);
    assert!(list.contains(OLDER), "{list}");
    assert!(list.contains(delayd_redis::library_name()), "{list}");
    round_trip(&node, &QueueName::new("upgrade").unwrap()).await;

    // The older version's calls are unaffected by the newer load.
    let old = server.cli(&["FCALL", &format!("{OLDER}_ping"), "0"]);
    assert_eq!(old.trim(), "old");

    // A second node of the same version loads the same library again:
    // nothing changes (REPLACE of identical text).
    let second = broker(vec![server.url()], 1, &unique_prefix()).await;
    round_trip(&second, &QueueName::new("upgrade2").unwrap()).await;
    let count = libraries(&server).matches("library_name").count();
    assert_eq!(count, 2, "{}", libraries(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_library_is_loaded_again_by_the_next_call() {
    // Its own server: FUNCTION FLUSH would pull the library from under
    // every other test.
    let server = RedisServer::start();
    let node = broker(vec![server.url()], 1, &unique_prefix()).await;
    let q = QueueName::new("flushed").unwrap();
    round_trip(&node, &q).await;
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]).trim(), "OK");
    assert!(!libraries(&server).contains(delayd_redis::library_name()));
    round_trip(&node, &q).await;
    assert!(libraries(&server).contains(delayd_redis::library_name()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_in_an_older_data_format_is_refused() {
    let server = shared_single();
    let prefix = unique_prefix();
    // What a node of the first format left: the shard count, no format.
    server.cli(&["HSET", &format!("{{{prefix}}}:meta"), "shards", "1"]);
    let refused =
        delayd_redis::RedisBroker::connect(support::config(vec![server.url()], 1, &prefix)).await;
    let Err(err) = refused else {
        panic!("connected to a format-1 deployment");
    };
    assert!(err.to_string().contains("format 1"), "{err}");

    // A fresh deployment records the format, and a second node accepts it.
    let fresh = unique_prefix();
    let _first = broker(vec![server.url()], 1, &fresh).await;
    let format = server.cli(&["HGET", &format!("{{{fresh}}}:meta"), "format"]);
    assert_eq!(format.trim(), "2");
    let _second = broker(vec![server.url()], 1, &fresh).await;
}

/// Multi-shard deployments place schedule fire messages by their schedule
/// (format 3): one left in format 2 with several shards is refused, while
/// a single-shard one (where placement did not change) stays format 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_deployments_are_format_3() {
    let server = shared_single();
    let old = unique_prefix();
    server.cli(&[
        "HSET",
        &format!("{{{old}}}:meta"),
        "shards",
        "2",
        "format",
        "2",
    ]);
    let refused =
        delayd_redis::RedisBroker::connect(support::config(vec![server.url()], 2, &old)).await;
    let Err(err) = refused else {
        panic!("connected to a multi-shard format-2 deployment");
    };
    assert!(err.to_string().contains("format 2"), "{err}");

    let fresh = unique_prefix();
    let _first = broker(vec![server.url()], 2, &fresh).await;
    let format = server.cli(&["HGET", &format!("{{{fresh}}}:meta"), "format"]);
    assert_eq!(format.trim(), "3");
    let _second = broker(vec![server.url()], 2, &fresh).await;
    // A node with another shard count is told so (not about the format).
    let other =
        delayd_redis::RedisBroker::connect(support::config(vec![server.url()], 1, &fresh)).await;
    let Err(err) = other else {
        panic!("connected with another shard count");
    };
    assert!(err.to_string().contains("2 shards"), "{err}");
}
