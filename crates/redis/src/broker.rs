//! `RedisBroker`: the shared state of one node (connection, keys, clock,
//! wake-ups) and the plumbing every operation uses: running a script on a
//! shard, handing out seqs, publishing events.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use delayd_core::{BrokerError, BrokerResult, Clock, MessageId, QueueName};
use redis::{Cmd, FromRedisValue, RedisResult, Value};
use tokio::sync::{watch, Notify};

use crate::batched::{AckLanes, EnqueueLanes, LeaseLanes};
use crate::config::{RedisBrokerError, RedisConfig, ReplicaWait};
use crate::conn::{unavailable, Conn};
use crate::keys::{Keys, ShardKeys};
use crate::scripts::{self, Function};
use crate::tasks;
use crate::wake::Wake;

/// The layout of the keys, members and records this version reads and
/// writes (docs/redis.md, "Keys"). 2: sched members carry the priority.
/// 3: fire message ids `<schedule>:<t>` are placed in their schedule's
/// shard; with one shard per queue that places every id as format 2 did,
/// so single-shard deployments stay format 2 (older nodes keep working).
/// Unrelated to the function library's version, which changes with any
/// change of the Lua.
fn data_format(shards: u32) -> u32 {
    if shards == 1 {
        2
    } else {
        3
    }
}

/// A broker whose state lives in Redis or a Redis Cluster. Any number of
/// nodes may share one deployment (same URLs, shards and key prefix).
pub struct RedisBroker {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) urls: Vec<String>,
    /// Trusted CAs for `rediss://` (the pub/sub task opens its own
    /// connections).
    pub(crate) tls_ca: Option<Vec<u8>>,
    /// `RedisConfig::virtual_time` (the pub/sub task connects on its own).
    pub(crate) virtual_time: bool,
    /// `RedisConfig::wait_replicas`: every call that may write is followed
    /// by a `WAIT`, and fails unless enough replicas confirmed it.
    wait: Option<ReplicaWait>,
    pub(crate) wake: Wake,
    closed: AtomicBool,
    pub(crate) stop: watch::Sender<bool>,
    /// Asks the sweep task for an immediate sweep (after a pub/sub
    /// reconnect, when notifications may have been missed).
    pub(crate) sweep_now: Notify,
    /// Test hook ([`RedisBroker::hold_timers`]): the timer and sweep tasks
    /// promote nothing while set.
    pub(crate) timers_held: AtomicBool,
    /// Random id of this node, appended to its pub/sub events so it can
    /// skip its own (it already woke its waiters and armed its timers
    /// in-process; handling the echo again would only cause a second
    /// round of lease calls).
    pub(crate) node_id: String,
    /// Seqs whose index entries are to be dropped, flushed in batches by
    /// the seq index task (one pipelined HDEL per bucket instead of one
    /// command per ack).
    pub(crate) unindex: std::sync::Mutex<Vec<u64>>,
    pub(crate) unindex_ready: Notify,
    /// Enqueues waiting for their shard's next enqueue call (`batched`).
    pub(crate) enqueue_lanes: EnqueueLanes,
    /// Acks waiting for their shard's next ack call.
    pub(crate) ack_lanes: AckLanes,
    /// Lease calls waiting for their shard's next lease call.
    pub(crate) lease_lanes: LeaseLanes,
    /// This node's own handle, for the lane runners it spawns.
    pub(crate) me: Weak<Inner>,
}

impl RedisBroker {
    /// Connects and starts this node's timer, sweep and pub/sub tasks (on
    /// the current tokio runtime).
    pub async fn connect(config: RedisConfig) -> Result<RedisBroker, RedisBrokerError> {
        config.validate()?;
        let conn =
            Conn::connect(&config.urls, config.tls_ca.as_deref(), config.virtual_time).await?;
        let (stop, _) = watch::channel(false);
        let inner = Arc::new_cyclic(|me| Inner {
            conn,
            keys: Keys::new(&config.key_prefix, config.shards),
            clock: config.clock,
            urls: config.urls,
            tls_ca: config.tls_ca,
            virtual_time: config.virtual_time,
            wait: config.wait_replicas,
            wake: Wake::default(),
            closed: AtomicBool::new(false),
            stop,
            sweep_now: Notify::new(),
            timers_held: AtomicBool::new(false),
            node_id: format!("{:016x}", rand::random::<u64>()),
            unindex: std::sync::Mutex::new(Vec::new()),
            unindex_ready: Notify::new(),
            enqueue_lanes: EnqueueLanes::default(),
            ack_lanes: AckLanes::default(),
            lease_lanes: LeaseLanes::default(),
            me: me.clone(),
        });
        inner.check_shards().await?;
        inner.load_library().await?;
        tasks::spawn(&inner);
        Ok(RedisBroker { inner })
    }

    /// A test hook: while `held`, this node's timer and sweep tasks promote
    /// nothing and fire no schedule, so only calls apply time (each Redis
    /// function promotes what is due at the call's `now` first), which is
    /// what the conformance cases of `conformance_tests_time_at_call!`
    /// check.
    #[doc(hidden)]
    pub fn hold_timers(&self, held: bool) {
        self.inner
            .timers_held
            .store(held, std::sync::atomic::Ordering::Relaxed);
    }

    /// A test hook: what one timer or sweep round does for `queue`'s
    /// shards, now (promote, and fire the due schedules each reply lists,
    /// promoting again while a reply lists a full page).
    #[doc(hidden)]
    pub async fn promote_now(&self, queue: &delayd_core::QueueName) {
        for shard in 0..self.inner.keys.shards {
            crate::tasks::promote_shard(&self.inner, queue, shard).await;
        }
    }
}

impl Drop for RedisBroker {
    fn drop(&mut self) {
        // The background tasks hold the inner state; tell them to end.
        self.inner.stop.send_replace(true);
    }
}

impl Inner {
    /// The first node of a deployment records its shard count and data
    /// format; later nodes must match both, since a message's shard is
    /// derived from the count and every function reads the format.
    async fn check_shards(&self) -> Result<(), RedisBrokerError> {
        let mut conn = self.conn.clone();
        let meta = &self.keys.meta;
        let (shards, format): (Option<u32>, Option<u32>) = redis::cmd("HMGET")
            .arg(meta)
            .arg("shards")
            .arg("format")
            .query_async(&mut conn)
            .await?;
        let expected = data_format(self.keys.shards);
        // A different shard count is reported as such below.
        if shards == Some(self.keys.shards) && format != Some(expected) {
            return Err(RedisBrokerError::InvalidConfig(format!(
                "this deployment's data is in format {}, this delayd writes format {expected} \
                 with {} shards per queue: \
                 drain it with the delayd version that created it, or delete its keys \
                 (docs/redis.md, \"Upgrades\")",
                format.unwrap_or(1),
                self.keys.shards
            )));
        }
        let _: () = redis::pipe()
            .cmd("HSETNX")
            .arg(meta)
            .arg("shards")
            .arg(self.keys.shards)
            .ignore()
            .cmd("HSETNX")
            .arg(meta)
            .arg("format")
            .arg(expected)
            .ignore()
            .query_async(&mut conn)
            .await?;
        let recorded: u32 = redis::cmd("HGET")
            .arg(meta)
            .arg("shards")
            .query_async(&mut conn)
            .await?;
        if recorded != self.keys.shards {
            return Err(RedisBrokerError::InvalidConfig(format!(
                "this deployment uses {recorded} shards per queue, not {}",
                self.keys.shards
            )));
        }
        Ok(())
    }

    pub(crate) fn check_open(&self) -> BrokerResult<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(BrokerError::unavailable("broker is shut down"));
        }
        Ok(())
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.stop.send_replace(true);
        self.wake.ready_all();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn shard_of(&self, queue: &QueueName, id: &MessageId) -> (u32, ShardKeys) {
        let shard = self.keys.shard_of(id);
        (shard, self.keys.shard(queue, shard))
    }

    /// Runs one transition function on one shard (loading the library
    /// first if this Redis does not have it).
    pub(crate) async fn run(
        &self,
        function: Function,
        shard: &ShardKeys,
        now: u64,
        args: Vec<Vec<u8>>,
    ) -> BrokerResult<Vec<Value>> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function.name()).arg(shard.keys.len());
        for key in &shard.keys {
            cmd.arg(key);
        }
        cmd.arg("")
            .arg(now)
            .arg(rand::random_range(0..1_000_000u64));
        for arg in args {
            cmd.arg(arg);
        }
        let sent = match self.send::<Vec<Value>>(&cmd).await {
            Err(err) if scripts::is_missing(&err) => {
                self.load_library()
                    .await
                    .map_err(|e| unavailable(&e, false))?;
                self.send(&cmd).await
            }
            sent => sent,
        };
        self.confirmed(sent.map_err(|e| unavailable(&e, true))?)
    }

    /// Sends a call that may write. With `wait_replicas`, a `WAIT` follows
    /// it in one pipeline, so on the same connection right after it: Redis
    /// then waits for this call's replication offset (or a later one, as
    /// the connection is shared), and answers how many replicas have it.
    /// On a Cluster the pipeline goes where its keyed call goes (the
    /// client routes a pipeline by its commands that have keys, and `WAIT`
    /// has none): to the primary of the call's slot, which took the write.
    async fn send<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<(T, Option<u32>)> {
        let mut conn = self.conn.clone();
        let Some(wait) = self.wait else {
            return Ok((cmd.query_async(&mut conn).await?, None));
        };
        let timeout_ms = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
        let (answer, replicas): (T, u32) = redis::pipe()
            .add_command(cmd.clone())
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(timeout_ms)
            .query_async(&mut conn)
            .await?;
        Ok((answer, Some(replicas)))
    }

    /// The answer of [`Self::send`], unless fewer replicas than configured
    /// confirmed the write: then the call is not acknowledged (the primary
    /// applied it, so a failover now could still lose it).
    fn confirmed<T>(&self, (answer, replicas): (T, Option<u32>)) -> BrokerResult<T> {
        match (self.wait, replicas) {
            (Some(wait), Some(replicas)) if replicas < wait.replicas => {
                tracing::warn!(
                    replicas,
                    wanted = wait.replicas,
                    "write not confirmed by replicas"
                );
                Err(BrokerError::Unavailable {
                    reason: format!(
                        "redis: the write reached {replicas} of {} replicas within {:?}",
                        wait.replicas, wait.timeout
                    ),
                    maybe_applied: true,
                })
            }
            _ => Ok(answer),
        }
    }

    /// Loads this version's function library (on every primary of a
    /// Cluster). `REPLACE` makes it idempotent: loading the same text again
    /// changes nothing, and other versions' libraries are left alone.
    pub(crate) async fn load_library(&self) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let _: Value = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&scripts::LIBRARY.code)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Runs a plain command (`write`: one that may change state, which
    /// `wait_replicas` applies to).
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        write: bool,
    ) -> BrokerResult<T> {
        if !write {
            let mut conn = self.conn.clone();
            return cmd
                .query_async(&mut conn)
                .await
                .map_err(|e| unavailable(&e, false));
        }
        self.confirmed(self.send(cmd).await.map_err(|e| unavailable(&e, true))?)
    }

    /// The first of `n` fresh seqs from the deployment's counter. One
    /// INCRBY per enqueue call, so seqs follow the order in which calls
    /// reach the counter, whichever node makes them.
    pub(crate) async fn alloc_seqs(&self, n: u64) -> BrokerResult<u64> {
        let end: u64 = self
            .query(redis::cmd("INCRBY").arg(&self.keys.seq).arg(n), true)
            .await?;
        Ok(end + 1 - n)
    }

    /// Tells every node (this one included, through its subscription)
    /// about an event. Best effort: the sweep repairs lost events.
    pub(crate) async fn publish(&self, event: String) {
        let mut conn = self.conn.clone();
        let sent: redis::RedisResult<()> = self.publish_cmd(event).query_async(&mut conn).await;
        if let Err(err) = sent {
            tracing::debug!(error = %err, "publish failed; the sweep will catch up");
        }
    }

    fn publish_cmd(&self, event: String) -> redis::Cmd {
        redis::cmd("PUBLISH")
            .arg(&self.keys.channel)
            .arg(format!("{event} {}", self.node_id))
            .clone()
    }

    /// Publishes without waiting for Redis's answer (the timer task must
    /// not stall one round trip per promotion).
    pub(crate) fn publish_detached(&self, event: String) {
        let mut conn = self.conn.clone();
        let cmd = self.publish_cmd(event);
        tokio::spawn(async move {
            if let Err(err) = cmd.query_async::<()>(&mut conn).await {
                tracing::debug!(error = %err, "publish failed; the sweep will catch up");
            }
        });
    }

    /// `n` messages of the queue became ready now: wakes at most `n` of
    /// this node's waiting calls (`Wake::ready_n`); other nodes hear it by
    /// pub/sub.
    pub(crate) async fn announce_ready(&self, queue: &QueueName, n: usize) {
        self.wake.ready_n(queue, n);
        self.publish(format!("r {queue}")).await;
    }

    /// A shard has something due at `due`: arm the local timer, and tell
    /// other nodes when it is earlier than what this node knew.
    pub(crate) async fn announce_due(&self, queue: &QueueName, shard: u32, due: u64) {
        if self.wake.arm(queue, shard, due) {
            self.publish(format!("d {queue} {shard} {due}")).await;
        }
    }

    /// The error for an id that is not in the queue (whether or not the
    /// queue exists, as the reference model answers).
    pub(crate) async fn not_found(&self, queue: &QueueName, id: &MessageId) -> BrokerError {
        BrokerError::MessageNotFound {
            queue: queue.clone(),
            id: id.clone(),
        }
    }

    pub(crate) async fn queue_exists(&self, queue: &QueueName) -> BrokerResult<bool> {
        self.query(
            redis::cmd("HEXISTS")
                .arg(&self.keys.registry)
                .arg(queue.as_str()),
            false,
        )
        .await
    }
}
