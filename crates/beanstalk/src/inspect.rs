//! Commands that look at or move jobs and tubes without reserving: `peek*`,
//! `kick`, `kick-job`, `stats*`, `list-tubes`, `pause-tube`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use delayd_core::{
    BrokerError, ListQuery, Message, MessageState, QueueInfo, QueueName, QueueStats, Redrive,
    Reschedule, Schedule,
};

use crate::reply;
use crate::shared::{create_queue, Session};
use crate::stats::{self, ServerFacts};
use crate::tubes::queue_name;

/// Page size when kicking delayed jobs.
const KICK_PAGE: u32 = 1000;

fn has_jobs(stats: &QueueStats) -> bool {
    stats.scheduled + stats.ready + stats.leased + stats.dead > 0
}

/// A kick of a delayed job: ready now, its priority kept.
const READY_NOW: Reschedule = Reschedule {
    schedule: Some(Schedule::Now),
    priority: None,
};

/// A peek's answer: the job found, or `NOT_FOUND`.
fn found(out: &mut Vec<u8>, message: Option<Message>) {
    match message {
        Some(message) => reply::job(out, "FOUND", message.seq, &message.payload),
        None => reply::line(out, "NOT_FOUND"),
    }
}

impl Session {
    /// `peek <id>`: any job, in any tube.
    pub(crate) async fn peek(&mut self, seq: u64, out: &mut Vec<u8>) -> Result<(), BrokerError> {
        found(out, self.shared.broker.get_by_seq(seq).await?);
        Ok(())
    }

    /// `peek-ready`, `peek-delayed`, `peek-buried`: the next job of that
    /// state in the used tube.
    pub(crate) async fn peek_state(
        &mut self,
        state: MessageState,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let query = ListQuery {
            state,
            after: None,
            limit: 1,
        };
        let first = match self.shared.broker.list(&self.using, query).await {
            Err(BrokerError::QueueNotFound(_)) => None,
            listed => listed?.into_iter().next(),
        };
        found(out, first);
        Ok(())
    }

    /// `kick <bound>`: buried jobs of the used tube if it has any, else
    /// delayed ones (made ready now).
    pub(crate) async fn kick(&mut self, bound: u32, out: &mut Vec<u8>) -> Result<(), BrokerError> {
        let broker = &self.shared.broker;
        let kicked = match broker
            .redrive(&self.using, Redrive::Oldest(u64::from(bound)))
            .await
        {
            Err(BrokerError::QueueNotFound(_)) => 0,
            Ok(0) if bound > 0 => self.kick_delayed(bound).await?,
            other => other?,
        };
        reply::line(out, &format!("KICKED {kicked}"));
        Ok(())
    }

    async fn kick_delayed(&self, bound: u32) -> Result<u64, BrokerError> {
        let broker = &self.shared.broker;
        let mut kicked: u64 = 0;
        let mut after = None;
        while kicked < u64::from(bound) {
            let limit = (u64::from(bound) - kicked).min(u64::from(KICK_PAGE)) as u32;
            let query = ListQuery {
                state: MessageState::Scheduled,
                after: after.take(),
                limit,
            };
            let page = match broker.list(&self.using, query).await {
                Err(BrokerError::QueueNotFound(_)) => break,
                page => page?,
            };
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            for message in page {
                // A job that became ready or was taken meanwhile is skipped.
                match broker
                    .reschedule(&message.queue, &message.id, READY_NOW)
                    .await
                {
                    Ok(_) => kicked += 1,
                    Err(BrokerError::MessageNotFound { .. } | BrokerError::InvalidState { .. }) => {
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(kicked)
    }

    /// `kick-job <id>`: a buried or delayed job becomes ready.
    pub(crate) async fn kick_job(
        &mut self,
        seq: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let broker = &self.shared.broker;
        let kicked = match broker.get_by_seq(seq).await? {
            Some(m) if m.state == MessageState::Dead => {
                broker.redrive(&m.queue, Redrive::Ids(vec![m.id])).await? > 0
            }
            Some(m) if m.state == MessageState::Scheduled => {
                broker.reschedule(&m.queue, &m.id, READY_NOW).await?;
                true
            }
            _ => false,
        };
        reply::line(out, if kicked { "KICKED" } else { "NOT_FOUND" });
        Ok(())
    }

    pub(crate) async fn stats_job(
        &mut self,
        seq: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let broker = &self.shared.broker;
        let Some(message) = broker.get_by_seq(seq).await? else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let ttr_ms = match message.lease_ms {
            Some(ms) => ms,
            None => broker.get_queue(&message.queue).await?.config.lease_ms,
        };
        reply::yaml(out, &stats::job_stats(&message, ttr_ms, self.now_ms()));
        Ok(())
    }

    /// The queue behind a tube, if the tube exists in beanstalkd's sense:
    /// `Ok(None)` for a tube only connections refer to (no queue yet).
    async fn existing_tube(
        &self,
        queue: &QueueName,
    ) -> Result<Option<Option<QueueInfo>>, BrokerError> {
        let info = match self.shared.broker.get_queue(queue).await {
            Ok(info) => Some(info),
            Err(BrokerError::QueueNotFound(_)) => None,
            Err(error) => return Err(error),
        };
        let referenced = self
            .shared
            .tubes
            .get(queue)
            .is_some_and(|e| e.using > 0 || e.watching > 0 || e.waiting > 0);
        let with_jobs = info.as_ref().is_some_and(|i| has_jobs(&i.stats));
        Ok((referenced || with_jobs).then_some(info))
    }

    pub(crate) async fn stats_tube(
        &mut self,
        tube: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let Some(queue) = queue_name(tube) else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let Some(info) = self.existing_tube(&queue).await? else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let entry = self.shared.tubes.get(&queue).unwrap_or_default();
        let doc = stats::tube_stats(queue.as_str(), info.as_ref(), entry, self.now_ms());
        reply::yaml(out, &doc);
        Ok(())
    }

    /// `pause-tube <tube> <delay>`: no reservations from it for `delay`
    /// seconds (0 resumes at once).
    pub(crate) async fn pause_tube(
        &mut self,
        tube: &str,
        delay: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), BrokerError> {
        let Some(queue) = queue_name(tube) else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let Some(info) = self.existing_tube(&queue).await? else {
            reply::line(out, "NOT_FOUND");
            return Ok(());
        };
        let broker = self.shared.broker.as_ref();
        if info.is_none() {
            create_queue(broker, &queue).await?;
        }
        if delay == 0 {
            broker.resume(&queue).await?;
        } else {
            let until = self.now_ms().saturating_add(u64::from(delay) * 1000);
            broker.pause(&queue, Some(until)).await?;
        }
        self.shared.tubes.count(&queue, |t| {
            t.cmd_pause_tube += 1;
            t.pause_secs = delay;
        });
        reply::line(out, "PAUSED");
        Ok(())
    }

    /// Existing tubes by name with their queue's counts: queues holding
    /// jobs, and tubes connections refer to. Also forgets stale tubes.
    async fn tube_map(&self) -> Result<BTreeMap<QueueName, QueueStats>, BrokerError> {
        let queues = self.shared.broker.list_queues().await?;
        let mut tubes: BTreeMap<QueueName, QueueStats> = queues
            .into_iter()
            .filter(|q| has_jobs(&q.stats))
            .map(|q| (q.name, q.stats))
            .collect();
        self.shared.tubes.prune(|name| tubes.contains_key(name));
        for name in self.shared.tubes.referenced() {
            tubes.entry(name).or_default();
        }
        Ok(tubes)
    }

    pub(crate) async fn list_tubes(&mut self, out: &mut Vec<u8>) -> Result<(), BrokerError> {
        let tubes = self.tube_map().await?;
        let doc = reply::name_list(tubes.keys().map(QueueName::as_str));
        reply::yaml(out, &doc);
        Ok(())
    }

    pub(crate) async fn stats(&mut self, out: &mut Vec<u8>) -> Result<(), BrokerError> {
        let tubes = self.tube_map().await?;
        let mut totals = QueueStats::default();
        for s in tubes.values() {
            totals.scheduled += s.scheduled;
            totals.ready += s.ready;
            totals.leased += s.leased;
            totals.dead += s.dead;
            totals.ready_urgent += s.ready_urgent;
        }
        let shared = &self.shared;
        let facts = ServerFacts {
            max_job_size: shared.config.max_job_size,
            current_tubes: tubes.len(),
            uptime_secs: shared.started.elapsed().as_secs(),
            draining: shared.draining.load(Ordering::SeqCst),
            instance_id: shared.instance_id.clone(),
            hostname: shared.hostname.clone(),
            os: shared.os.clone(),
        };
        reply::yaml(out, &stats::server_stats(&totals, &shared.counters, &facts));
        Ok(())
    }
}
