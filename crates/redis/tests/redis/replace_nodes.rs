//! Two nodes replacing one id at once (api.md, "Retention, replace and
//! debounce"): each replace is one function call, so however the nodes'
//! requests interleave with each other and with a consumer's lease, ack and
//! nack (replaces of the leased message become its successor), one message
//! lives with the id afterwards, and its content is wholly one request's:
//! payload, headers, priority and key are set together per request, so a
//! mix of two requests would show.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::support::{broker, shared_single, unique_prefix};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowKey, LeaseRequest, MessageId, Nack, OnConflict,
    QueueConfigPatch, QueueName, Schedule,
};
use delayd_redis::RedisBroker;

const ROUNDS: u32 = 60;
/// Replaces per node per round.
const PER_NODE: u32 = 6;

/// Request `i` of `node` in `round`: every field derived from its tag.
fn request(node: &str, round: u32, i: u32) -> EnqueueRequest {
    let tag = format!("{node}-{round}-{i}");
    let priority = 100 + (round * 37 + i * 7 + u32::from(node == "b") * 3) % 500;
    let headers = BTreeMap::from([
        ("tag".to_owned(), tag.clone()),
        ("priority".to_owned(), priority.to_string()),
    ]);
    EnqueueRequest {
        id: Some(MessageId::new("one").expect("id")),
        schedule: Schedule::Now,
        priority: Some(priority),
        headers,
        payload: tag.clone().into_bytes(),
        key: Some(FlowKey::new(tag).expect("key")),
        on_conflict: if i.is_multiple_of(2) {
            OnConflict::Replace
        } else {
            OnConflict::Debounce
        },
        ..EnqueueRequest::default()
    }
}

/// Sends node `name`'s replaces of `round`, one at a time, yielding between
/// them so the other node's and the consumer's calls interleave.
async fn replace_all(node: Arc<RedisBroker>, q: QueueName, name: &'static str, round: u32) {
    for i in 0..PER_NODE {
        let out = node
            .enqueue(&q, vec![request(name, round, i)], EnqueueOptions::default())
            .await
            .expect("enqueue")
            .remove(0)
            .expect("enqueue item");
        assert!(
            out.created || out.replaced,
            "{name} round {round} #{i}: {out:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_replacing_one_id_leave_one_whole_message() {
    let server = shared_single();
    let prefix = unique_prefix();
    let a = Arc::new(broker(vec![server.url()], 1, &prefix).await);
    let b = Arc::new(broker(vec![server.url()], 1, &prefix).await);
    let q = QueueName::new("replace-race").expect("queue");
    // Never dead-lettered: a nack always retries.
    let patch = QueueConfigPatch {
        max_attempts: Some(0),
        ..QueueConfigPatch::default()
    };
    a.put_queue(&q, patch).await.expect("put_queue");
    let id = MessageId::new("one").expect("id");
    a.enqueue(&q, vec![request("a", 0, 0)], EnqueueOptions::default())
        .await
        .expect("first enqueue");
    for round in 1..=ROUNDS {
        // A consumer on one node holds the message while both nodes
        // replace it, and acks (odd rounds) or nacks it meanwhile.
        let consumer = if round % 2 == 0 { &a } else { &b };
        let request = LeaseRequest {
            max: 1,
            wait_ms: 5_000,
            lease_ms: Some(60_000),
        };
        let got = consumer
            .lease(std::slice::from_ref(&q), request)
            .await
            .expect("lease");
        assert_eq!(got.len(), 1, "round {round}: {got:?}");
        let lease = got[0].lease_id.clone();
        let settle = {
            let (node, q, id) = (consumer.clone(), q.clone(), id.clone());
            tokio::spawn(async move {
                for _ in 0..round % 5 {
                    tokio::task::yield_now().await;
                }
                if round % 2 == 1 {
                    node.ack(&q, &id, &lease).await.expect("ack");
                } else {
                    let nack = Nack {
                        delay_ms: Some(0),
                        ..Nack::default()
                    };
                    node.nack(&q, &id, &lease, nack).await.expect("nack");
                }
            })
        };
        let from_a = tokio::spawn(replace_all(a.clone(), q.clone(), "a", round));
        let from_b = tokio::spawn(replace_all(b.clone(), q.clone(), "b", round));
        for task in [settle, from_a, from_b] {
            task.await.expect("task");
        }

        let stats = a.get_queue(&q).await.expect("get_queue").stats;
        assert_eq!(
            stats.scheduled + stats.ready + stats.leased + stats.dead,
            1,
            "round {round}: one live message: {stats:?}"
        );
        let m = b.get(&q, &id).await.expect("get");
        assert!(!m.state.ended(), "round {round}: {m:?}");
        let tag = String::from_utf8(m.payload.clone()).expect("utf-8 payload");
        assert_eq!(
            tag.split('-').nth(1),
            Some(round.to_string().as_str()),
            "round {round}: the content of one of this round's requests: {tag}"
        );
        assert_eq!(m.headers.get("tag"), Some(&tag), "round {round}: {m:?}");
        assert_eq!(
            m.headers.get("priority"),
            Some(&m.priority.to_string()),
            "round {round}: {m:?}"
        );
        assert_eq!(
            m.key.as_ref().map(|k| k.as_str()),
            Some(tag.as_str()),
            "round {round}: {m:?}"
        );
        let requested = request_of(&tag);
        assert_eq!(
            (m.priority, &m.headers),
            (requested.priority.unwrap_or_default(), &requested.headers),
            "round {round}: wholly one request's"
        );
    }
}

/// The request a tag `node-round-i` names.
fn request_of(tag: &str) -> EnqueueRequest {
    let parts: Vec<&str> = tag.split('-').collect();
    let [node, round, i] = parts.as_slice() else {
        panic!("tag {tag}");
    };
    let node = if *node == "a" { "a" } else { "b" };
    request(
        node,
        round.parse().expect("round"),
        i.parse().expect("index"),
    )
}

/// One enqueue call that creates an id and replaces it (its index entries
/// not yet written when the replace comes), with flow keys changing and a
/// debounce cap, answers and leaves what the model does: the outcomes,
/// every message, its history, and the deliveries.
#[tokio::test]
async fn one_call_creating_and_replacing_an_id_matches_the_model() {
    use delayd_core::testkit::support::list_by_state;
    use delayd_core::testkit::ModelBroker;
    use delayd_core::{Clock, FlowConfig, ManualClock};
    use delayd_redis::RedisConfig;

    let clock = ManualClock::new(1_700_000_000_000);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let model: Arc<dyn Broker> = Arc::new(ModelBroker::with_clock(shared.clone()));
    let config = RedisConfig {
        urls: vec![shared_single().url()],
        shards: 1,
        key_prefix: unique_prefix(),
        clock: shared,
        tls_ca: None,
        virtual_time: false,
        wait_replicas: None,
    };
    let redis: Arc<dyn Broker> = Arc::new(RedisBroker::connect(config).await.expect("connect"));
    let q = QueueName::new("batch").expect("queue");
    let patch = QueueConfigPatch {
        flow: Some(Some(FlowConfig {
            key_concurrency: Some(1),
            ..FlowConfig::default()
        })),
        ..QueueConfigPatch::default()
    };
    let item = |id: &str, on_conflict, delay, key: &str, payload: &str| EnqueueRequest {
        id: Some(MessageId::new(id).expect("id")),
        schedule: Schedule::Delay(delay),
        key: Some(FlowKey::new(key).expect("key")),
        payload: payload.as_bytes().to_vec(),
        priority: Some(u32::from(payload.as_bytes()[1])),
        on_conflict,
        ..EnqueueRequest::default()
    };
    let batch = vec![
        item("x", OnConflict::Keep, 0, "k1", "x1"),
        item("w", OnConflict::Keep, 0, "k1", "w1"),
        item("x", OnConflict::Replace, 10, "k2", "x2"),
        EnqueueRequest {
            debounce_max_ms: Some(20),
            ..item("y", OnConflict::Debounce, 50, "k2", "y1")
        },
        EnqueueRequest {
            debounce_max_ms: Some(20),
            ..item("y", OnConflict::Debounce, 100, "k2", "y2")
        },
        item("x", OnConflict::Debounce, 0, "k1", "x3"),
        item("x", OnConflict::Keep, 5, "k2", "x4"),
        item("z", OnConflict::Replace, 0, "k1", "z1"),
    ];
    let brokers = [&model, &redis];
    let mut seen = vec![String::new(), String::new()];
    for (b, view) in brokers.iter().zip(&mut seen) {
        b.put_queue(&q, patch.clone()).await.expect("put_queue");
        let outcomes: Vec<_> = b
            .enqueue(&q, batch.clone(), EnqueueOptions::default())
            .await
            .expect("enqueue")
            .into_iter()
            .map(|o| o.map(|o| (o.id, o.deliver_at, o.created, o.replaced, o.after_lease)))
            .collect();
        view.push_str(&format!("{outcomes:?}\n"));
        for (state, messages) in list_by_state(&***b, &q, 100).await {
            for m in messages {
                let events = b.events(&q, &m.id).await.expect("events");
                view.push_str(&format!(
                    "{state:?} {} {} p{} {:?} {:?} {:?}\n",
                    m.id,
                    String::from_utf8_lossy(&m.payload),
                    m.priority,
                    m.deliver_at,
                    m.key,
                    events.events
                ));
            }
        }
    }
    // Deliveries, each acked, as time passes (both in lockstep).
    for advance in [0, 0, 0, 15, 10] {
        clock.advance(advance);
        for (b, view) in brokers.iter().zip(&mut seen) {
            let request = LeaseRequest {
                max: 10,
                wait_ms: 0,
                lease_ms: None,
            };
            let got = b
                .lease(std::slice::from_ref(&q), request)
                .await
                .expect("lease");
            let mut names = Vec::new();
            for d in got {
                names.push(format!("{} {}", d.id, String::from_utf8_lossy(&d.payload)));
                b.ack(&q, &d.id, &d.lease_id).await.expect("ack");
            }
            view.push_str(&format!("+{advance} leased {names:?}\n"));
        }
    }
    assert_eq!(seen[0], seen[1], "model vs redis");
}
