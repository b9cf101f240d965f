//! State-machine test: random sequences of calls, including "close and
//! reopen", run against LocalBroker and the testkit's ModelBroker; after
//! every step both must show the same messages and stats.
//!
//! Time is a ManualClock that does not move, so nothing fires or expires
//! by itself and every run is deterministic. The queue's retry backoff is
//! a constant 5 ms (jitter is 10% of that, which rounds to 0). A reopen
//! turns LocalBroker's leases into expired leases (a failed attempt); the
//! model is given the same failure as a nack without delay.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use delayd_core::testkit::ModelBroker;
use delayd_core::{
    Broker, BrokerError, BrokerResult, EnqueueOptions, EnqueueRequest, LeaseId, LeaseRequest,
    ManualClock, MessageId, Nack, QueueConfigPatch, QueueName, Reschedule, RetryPolicy, Schedule,
};
use delayd_local::{LocalBroker, LocalConfig};
use proptest::prelude::*;

const IDS: usize = 5;
const FAR: u64 = 86_400_000;

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        id: usize,
        far: bool,
        priority: u32,
    },
    Lease {
        max: u32,
    },
    Ack {
        id: usize,
    },
    Nack {
        id: usize,
        delay: Option<bool>,
    },
    Cancel {
        id: usize,
    },
    Reschedule {
        id: usize,
        far: bool,
        priority: Option<u32>,
    },
    Redrive,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..IDS, any::<bool>(), 0u32..3).prop_map(|(id, far, priority)| Op::Enqueue { id, far, priority }),
        3 => (1u32..3).prop_map(|max| Op::Lease { max }),
        2 => (0..IDS).prop_map(|id| Op::Ack { id }),
        2 => (0..IDS, proptest::option::of(any::<bool>())).prop_map(|(id, delay)| Op::Nack { id, delay }),
        1 => (0..IDS).prop_map(|id| Op::Cancel { id }),
        1 => (0..IDS, any::<bool>(), proptest::option::of(0u32..3)).prop_map(|(id, far, priority)| Op::Reschedule { id, far, priority }),
        1 => Just(Op::Redrive),
        1 => Just(Op::Reopen),
    ]
}

struct Pair {
    dir: PathBuf,
    clock: ManualClock,
    local: Option<LocalBroker>,
    model: ModelBroker,
    /// Current lease per message id, per broker (lease ids differ).
    leases: HashMap<MessageId, (LeaseId, LeaseId)>,
}

fn id(i: usize) -> MessageId {
    MessageId::new(format!("m{i}")).unwrap()
}

fn queue() -> QueueName {
    QueueName::new("sm").unwrap()
}

fn code<T>(r: &BrokerResult<T>) -> &'static str {
    r.as_ref().err().map_or("ok", BrokerError::code)
}

async fn open_local(dir: &PathBuf, clock: &ManualClock) -> LocalBroker {
    let mut config = LocalConfig::new(dir);
    config.clock = Arc::new(clock.clone());
    LocalBroker::open(config).await.expect("open")
}

impl Pair {
    async fn new(dir: PathBuf) -> Self {
        let clock = ManualClock::new(1_700_000_000_000);
        let local = open_local(&dir, &clock).await;
        let model = ModelBroker::with_clock(Arc::new(clock.clone()));
        let patch = QueueConfigPatch {
            max_attempts: Some(3),
            retry: Some(RetryPolicy {
                initial_ms: 5,
                max_ms: 5,
                multiplier: 1.0,
            }),
            lease_ms: Some(FAR),
            ..QueueConfigPatch::default()
        };
        local
            .put_queue(&queue(), patch.clone())
            .await
            .expect("put_queue");
        model.put_queue(&queue(), patch).await.expect("put_queue");
        Self {
            dir,
            clock,
            local: Some(local),
            model,
            leases: HashMap::new(),
        }
    }

    async fn step(&mut self, op: &Op) {
        let q = queue();
        match op {
            Op::Enqueue {
                id: i,
                far,
                priority,
            } => {
                let req = EnqueueRequest {
                    id: Some(id(*i)),
                    schedule: if *far {
                        Schedule::Delay(FAR)
                    } else {
                        Schedule::Now
                    },
                    priority: Some(*priority),
                    payload: format!("p{i}").into_bytes(),
                    ..EnqueueRequest::default()
                };
                let a = self
                    .local()
                    .enqueue(&q, vec![req.clone()], EnqueueOptions::default())
                    .await;
                let b = self
                    .model
                    .enqueue(&q, vec![req], EnqueueOptions::default())
                    .await;
                let created = |r: &BrokerResult<Vec<BrokerResult<delayd_core::EnqueueOutcome>>>| {
                    r.as_ref().ok().map(|v| {
                        v.iter()
                            .map(|o| o.as_ref().map(|o| (o.created, o.deliver_at)).ok())
                            .collect::<Vec<_>>()
                    })
                };
                assert_eq!(created(&a), created(&b), "enqueue");
            }
            Op::Lease { max } => {
                let req = LeaseRequest {
                    max: *max,
                    wait_ms: 0,
                    lease_ms: None,
                };
                let a = self
                    .local()
                    .lease(std::slice::from_ref(&q), req.clone())
                    .await
                    .expect("lease");
                let b = self
                    .model
                    .lease(std::slice::from_ref(&q), req)
                    .await
                    .expect("lease");
                let view = |v: &Vec<delayd_core::Delivery>| {
                    v.iter()
                        .map(|d| (d.id.clone(), d.attempt, d.payload.clone(), d.lease_until))
                        .collect::<Vec<_>>()
                };
                assert_eq!(view(&a), view(&b), "lease");
                for (x, y) in a.into_iter().zip(b) {
                    self.leases.insert(x.id.clone(), (x.lease_id, y.lease_id));
                }
            }
            Op::Ack { id: i } => {
                let (la, lb) = self.lease_of(*i);
                let a = self.local().ack(&q, &id(*i), &la).await;
                let b = self.model.ack(&q, &id(*i), &lb).await;
                assert_eq!(code(&a), code(&b), "ack");
            }
            Op::Nack { id: i, delay } => {
                let (la, lb) = self.lease_of(*i);
                let nack = Nack {
                    delay_ms: delay.map(|far| if far { FAR } else { 0 }),
                    ..Nack::default()
                };
                let a = self.local().nack(&q, &id(*i), &la, nack.clone()).await;
                let b = self.model.nack(&q, &id(*i), &lb, nack).await;
                assert_eq!(code(&a), code(&b), "nack");
            }
            Op::Cancel { id: i } => {
                let a = self.local().cancel(&q, &id(*i)).await;
                let b = self.model.cancel(&q, &id(*i)).await;
                assert_eq!(code(&a), code(&b), "cancel");
            }
            Op::Reschedule {
                id: i,
                far,
                priority,
            } => {
                let change = Reschedule {
                    schedule: Some(if *far {
                        Schedule::Delay(FAR)
                    } else {
                        Schedule::Now
                    }),
                    priority: *priority,
                };
                let a = self.local().reschedule(&q, &id(*i), change.clone()).await;
                let b = self.model.reschedule(&q, &id(*i), change).await;
                assert_eq!(code(&a), code(&b), "reschedule");
            }
            Op::Redrive => {
                let a = self.local().redrive(&q, delayd_core::Redrive::All).await;
                let b = self.model.redrive(&q, delayd_core::Redrive::All).await;
                assert_eq!(a.ok(), b.ok(), "redrive");
            }
            Op::Reopen => self.reopen().await,
        }
    }

    fn local(&self) -> &LocalBroker {
        self.local.as_ref().expect("broker is open")
    }

    fn lease_of(&self, i: usize) -> (LeaseId, LeaseId) {
        self.leases
            .get(&id(i))
            .cloned()
            .unwrap_or_else(|| (LeaseId("none".into()), LeaseId("none".into())))
    }

    async fn reopen(&mut self) {
        self.local().shutdown().await.expect("shutdown");
        // Closing the store (dropping the broker) releases its lock file.
        drop(self.local.take());
        self.local = Some(open_local(&self.dir, &self.clock).await);
        // LocalBroker expired every lease at open; the model fails them too.
        for (mid, (_, lb)) in self.leases.drain() {
            let _ = self.model.nack(&queue(), &mid, &lb, Nack::default()).await;
        }
    }

    async fn compare(&self) {
        let q = queue();
        for i in 0..IDS {
            let a = self.local().get(&q, &id(i)).await;
            let b = self.model.get(&q, &id(i)).await;
            let view = |r: BrokerResult<delayd_core::Message>| {
                r.map(|m| {
                    (
                        m.state,
                        m.deliver_at,
                        m.attempts,
                        m.priority,
                        m.payload,
                        m.lease_until,
                        m.died_at,
                    )
                })
                .map_err(|e| e.code())
            };
            assert_eq!(view(a), view(b), "message m{i}");
        }
        let a = self.local().get_queue(&q).await.expect("get_queue").stats;
        let b = self.model.get_queue(&q).await.expect("get_queue").stats;
        assert_eq!(a, b, "stats");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn local_broker_matches_the_model(ops in proptest::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut pair = Pair::new(dir.path().to_path_buf()).await;
            for op in &ops {
                pair.step(op).await;
                pair.compare().await;
            }
            pair.local().shutdown().await.expect("shutdown");
        });
    }
}
