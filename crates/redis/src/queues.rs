//! Queue operations. The registry hash (`{prefix}:queues`, name -> config
//! JSON) is the list of queues and the source of truth for configs; each
//! shard keeps a copy of the numbers its scripts need (lease length,
//! attempts, backoff) and the pause state in its `cfg` hash, so every
//! transition reads them atomically in its own slot.

use delayd_core::{
    BrokerError, BrokerResult, FlowConfig, QueueConfig, QueueConfigPatch, QueueInfo, QueueName,
    QueueStats, Upsert,
};

use crate::broker::Inner;
use crate::record::{int, opt_int, status, text};
use crate::scripts;

/// The `flow_set` arguments of a queue's flow (lua/flow.lua): the numbers
/// its gate needs, the emission intervals computed here (`Rate::interval_us`).
fn flow_args(flow: Option<&FlowConfig>) -> Vec<Vec<u8>> {
    let Some(flow) = flow else {
        return vec![Vec::new()];
    };
    let num = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default().into_bytes();
    vec![
        b"1".to_vec(),
        num(flow.rate.map(|r| r.interval_us())),
        num(flow.rate.map(|r| u64::from(r.burst))),
        num(flow.key_rate.map(|r| r.interval_us())),
        num(flow.key_rate.map(|r| u64::from(r.burst))),
        num(flow.concurrency.map(u64::from)),
        num(flow.key_slots().map(u64::from)),
        if flow.ordered {
            b"1".to_vec()
        } else {
            Vec::new()
        },
    ]
}

impl Inner {
    pub(crate) async fn load_config(&self, queue: &QueueName) -> BrokerResult<Option<QueueConfig>> {
        let json: Option<String> = self
            .query(
                redis::cmd("HGET")
                    .arg(&self.keys.registry)
                    .arg(queue.as_str()),
                false,
            )
            .await?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| {
                BrokerError::unavailable(format!("stored config of {queue} is unreadable: {e}"))
            })
        })
        .transpose()
    }

    fn config_json(config: &QueueConfig) -> BrokerResult<String> {
        serde_json::to_string(config).map_err(|e| BrokerError::InvalidArgument(e.to_string()))
    }

    /// Copies the numbers of `config` into every shard's `cfg` hash,
    /// keeping the shard's pause state.
    async fn write_shard_configs(
        &self,
        queue: &QueueName,
        config: &QueueConfig,
    ) -> BrokerResult<()> {
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            let cfg = &keys.keys[0];
            let mut hset = redis::cmd("HSET");
            hset.arg(cfg)
                .arg("lm")
                .arg(config.lease_ms)
                .arg("ma")
                .arg(config.max_attempts)
                .arg("ri")
                .arg(config.retry.initial_ms)
                .arg("rx")
                .arg(config.retry.max_ms)
                .arg("rm")
                .arg(config.retry.multiplier.to_string())
                .arg("rt")
                .arg(config.retain_ms);
            self.query::<()>(&hset, true).await?;
            self.query::<()>(redis::cmd("HSETNX").arg(cfg).arg("pu").arg(""), true)
                .await?;
            let reply = self
                .run(
                    scripts::FLOW_SET,
                    &keys,
                    self.clock.now_ms(),
                    flow_args(config.flow.as_ref()),
                )
                .await?;
            if let ("OK", [wakes, ..]) = status(&reply)? {
                let wakes = int(wakes)?;
                if wakes > 0 {
                    let wakes = usize::try_from(wakes).unwrap_or(usize::MAX);
                    self.announce_ready(queue, wakes).await;
                }
            }
        }
        Ok(())
    }

    /// Flow control needs the queue's limits and counts in one hash tag:
    /// refused on a deployment with several shards per queue (docs/redis.md,
    /// "Flow control").
    fn check_flow(&self, config: &QueueConfig) -> BrokerResult<()> {
        if config.flow.is_some() && self.keys.shards > 1 {
            return Err(BrokerError::InvalidArgument(format!(
                "flow: not supported with {} shards per queue on Redis (use shards = 1)",
                self.keys.shards
            )));
        }
        Ok(())
    }

    pub(crate) async fn put_queue(
        &self,
        queue: &QueueName,
        patch: QueueConfigPatch,
    ) -> BrokerResult<(Upsert, QueueInfo)> {
        self.check_open()?;
        let upsert = match self.load_config(queue).await? {
            Some(current) => {
                let config = patch.resolve(Some(&current))?;
                self.check_flow(&config)?;
                self.store_config(queue, &config).await?;
                Upsert::Updated
            }
            None => {
                let config = patch.resolve(None)?;
                self.check_flow(&config)?;
                let created: bool = self
                    .query(
                        redis::cmd("HSETNX")
                            .arg(&self.keys.registry)
                            .arg(queue.as_str())
                            .arg(Self::config_json(&config)?),
                        true,
                    )
                    .await?;
                if created {
                    self.write_shard_configs(queue, &config).await?;
                    Upsert::Created
                } else {
                    // Another node created it meanwhile: merge into theirs.
                    let current = self.load_config(queue).await?;
                    let config = patch.resolve(current.as_ref())?;
                    self.check_flow(&config)?;
                    self.store_config(queue, &config).await?;
                    Upsert::Updated
                }
            }
        };
        Ok((upsert, self.get_queue(queue).await?))
    }

    async fn store_config(&self, queue: &QueueName, config: &QueueConfig) -> BrokerResult<()> {
        self.query::<()>(
            redis::cmd("HSET")
                .arg(&self.keys.registry)
                .arg(queue.as_str())
                .arg(Self::config_json(config)?),
            true,
        )
        .await?;
        self.write_shard_configs(queue, config).await
    }

    /// Makes sure the queue exists before an enqueue retries: creates it
    /// with defaults when allowed, and repairs shard configs a crash or a
    /// racing delete left missing.
    pub(crate) async fn ensure_queue(
        &self,
        queue: &QueueName,
        auto_create: bool,
    ) -> BrokerResult<()> {
        let config = match self.load_config(queue).await? {
            Some(config) => config,
            None if auto_create => {
                let config = QueueConfig::default();
                self.query::<()>(
                    redis::cmd("HSETNX")
                        .arg(&self.keys.registry)
                        .arg(queue.as_str())
                        .arg(Self::config_json(&config)?),
                    true,
                )
                .await?;
                self.load_config(queue).await?.unwrap_or(config)
            }
            None => return Err(BrokerError::QueueNotFound(queue.clone())),
        };
        self.write_shard_configs(queue, &config).await
    }

    pub(crate) async fn get_queue(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        self.check_open()?;
        let config = self
            .load_config(queue)
            .await?
            .ok_or_else(|| BrokerError::QueueNotFound(queue.clone()))?;
        let now = self.clock.now_ms();
        let mut stats = QueueStats::default();
        let mut pause = String::new();
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            let reply = self.run(scripts::STATS, &keys, now, Vec::new()).await?;
            let (word, rest) = status(&reply)?;
            if word != "OK" || rest.len() < 9 {
                continue;
            }
            stats.flow_keys += int(&rest[7])?;
            stats.cooling_keys += int(&rest[8])?;
            stats.scheduled += int(&rest[0])?;
            stats.ready += int(&rest[1])?;
            stats.leased += int(&rest[2])?;
            stats.dead += int(&rest[3])?;
            stats.ready_urgent += int(&rest[4])?;
            if shard == 0 {
                pause = text(&rest[5])?.to_owned();
            }
            if let Some(due) = opt_int(&rest[6])? {
                self.wake.arm(queue, shard, due);
            }
        }
        let (paused, paused_until) = match pause.as_str() {
            "" => (false, None),
            "inf" => (true, None),
            until => match until.parse::<u64>() {
                Ok(until) if until > now => (true, Some(until)),
                _ => (false, None),
            },
        };
        Ok(QueueInfo {
            name: queue.clone(),
            config,
            paused,
            paused_until,
            stats,
        })
    }

    pub(crate) async fn list_queues(&self) -> BrokerResult<Vec<QueueInfo>> {
        self.check_open()?;
        let mut names: Vec<String> = self
            .query(redis::cmd("HKEYS").arg(&self.keys.registry), false)
            .await?;
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Ok(queue) = QueueName::new(name) else {
                continue;
            };
            match self.get_queue(&queue).await {
                Ok(info) => out.push(info),
                // Deleted between the listing and the lookup.
                Err(BrokerError::QueueNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    pub(crate) async fn delete_queue(&self, queue: &QueueName) -> BrokerResult<()> {
        self.check_open()?;
        let removed: u64 = self
            .query(
                redis::cmd("HDEL")
                    .arg(&self.keys.registry)
                    .arg(queue.as_str()),
                true,
            )
            .await?;
        if removed == 0 {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        let now = self.clock.now_ms();
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            self.run(scripts::DROP, &keys, now, Vec::new()).await?;
        }
        self.wake.deleted(queue);
        self.publish(format!("x {queue}")).await;
        Ok(())
    }

    /// Sets every shard's pause state: `""` none, `"inf"` until resumed,
    /// else the epoch ms at which it ends.
    async fn set_pause(&self, queue: &QueueName, value: String) -> BrokerResult<QueueInfo> {
        self.check_open()?;
        if !self.queue_exists(queue).await? {
            return Err(BrokerError::QueueNotFound(queue.clone()));
        }
        for shard in 0..self.keys.shards {
            let keys = self.keys.shard(queue, shard);
            self.query::<()>(
                redis::cmd("HSET").arg(&keys.keys[0]).arg("pu").arg(&value),
                true,
            )
            .await?;
        }
        self.get_queue(queue).await
    }

    pub(crate) async fn pause(
        &self,
        queue: &QueueName,
        until: Option<u64>,
    ) -> BrokerResult<QueueInfo> {
        let value = until.map_or_else(|| "inf".to_owned(), |u| u.to_string());
        let info = self.set_pause(queue, value).await?;
        if let Some(until) = until {
            // Waiting lease calls must wake when the pause ends.
            for shard in 0..self.keys.shards {
                self.announce_due(queue, shard, until).await;
            }
        }
        Ok(info)
    }

    pub(crate) async fn resume(&self, queue: &QueueName) -> BrokerResult<QueueInfo> {
        let info = self.set_pause(queue, String::new()).await?;
        // How many messages the pause held back is not counted: every
        // waiting call of this node looks.
        self.announce_ready(queue, usize::MAX).await;
        Ok(info)
    }
}
