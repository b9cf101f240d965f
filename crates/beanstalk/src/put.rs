//! `put`: one job or a pipelined run of them, enqueued into the used tube
//! in one broker call, with beanstalkd's replies in order.

use std::sync::atomic::Ordering;

use delayd_core::{BrokerError, EnqueueOptions, EnqueueOutcome, EnqueueRequest, Schedule};

use crate::proto::Command;
use crate::reply;
use crate::shared::{create_queue, error_reply, Session};

type Outcomes = Vec<Result<EnqueueOutcome, BrokerError>>;

/// The broker request for one `put` (`None` for any other command).
pub(crate) fn request(command: Command) -> Option<EnqueueRequest> {
    let Command::Put {
        pri,
        delay,
        ttr,
        body,
    } = command
    else {
        return None;
    };
    Some(EnqueueRequest {
        schedule: match delay {
            0 => Schedule::Now,
            secs => Schedule::Delay(u64::from(secs) * 1000),
        },
        priority: Some(pri),
        payload: body,
        // beanstalkd raises a TTR of 0 to 1 second.
        lease_ms: Some(u64::from(ttr.max(1)) * 1000),
        // Never dead-lettered by timeouts, even in a queue made over HTTP
        // with a `max_attempts` (0, "never", is not allowed per message).
        max_attempts: Some(u32::MAX),
        ..EnqueueRequest::default()
    })
}

impl Session {
    /// Whether the used tube's queue is known to exist (this connection
    /// has put into it), so puts into it can be pipelined.
    pub(crate) fn known_tube(&self) -> bool {
        self.known_tubes.contains(&self.using)
    }

    pub(crate) fn forget_tube(&mut self) {
        self.known_tubes.remove(&self.using);
    }

    /// Enqueues `puts` (all `Command::Put`) and writes one reply for each.
    pub(crate) async fn put_batch(&mut self, puts: Vec<Command>, out: &mut Vec<u8>) {
        if !self.producer {
            self.producer = true;
            let producers = &self.shared.counters.current_producers;
            producers.fetch_add(1, Ordering::Relaxed);
        }
        let count = puts.len();
        if self.shared.draining.load(Ordering::SeqCst) {
            for _ in 0..count {
                reply::line(out, "DRAINING");
            }
            return;
        }
        let requests: Vec<EnqueueRequest> = puts.into_iter().filter_map(request).collect();
        debug_assert_eq!(requests.len(), count, "put_batch given a non-put command");
        match self.enqueue(requests).await {
            Ok(outcomes) => self.reply_outcomes(outcomes, out),
            Err(error) => {
                let reply = error_reply(&error);
                for _ in 0..count {
                    reply::line(out, reply);
                }
            }
        }
    }

    pub(crate) fn reply_outcomes(&self, outcomes: Outcomes, out: &mut Vec<u8>) {
        for outcome in outcomes {
            match outcome {
                Ok(outcome) => {
                    let counters = &self.shared.counters;
                    counters.total_jobs.fetch_add(1, Ordering::Relaxed);
                    self.shared.tubes.count(&self.using, |t| t.total_jobs += 1);
                    reply::line(out, &format!("INSERTED {}", outcome.seq));
                }
                Err(error) => reply::line(out, error_reply(&error)),
            }
        }
    }

    /// Enqueues into the used tube, creating its queue with beanstalkd
    /// semantics first when it does not exist (never through the broker's
    /// auto-create, whose defaults would dead-letter jobs).
    async fn enqueue(&mut self, requests: Vec<EnqueueRequest>) -> Result<Outcomes, BrokerError> {
        let broker = self.shared.broker.as_ref();
        let options = EnqueueOptions { auto_create: false };
        let expected = requests.len();
        let first = broker.enqueue(&self.using, requests.clone(), options).await;
        let queue_missing = match &first {
            Err(BrokerError::QueueNotFound(_)) => true,
            // A broker may refuse item by item instead; then none went in.
            Ok(items) => items
                .iter()
                .all(|r| matches!(r, Err(BrokerError::QueueNotFound(_)))),
            Err(_) => false,
        };
        let outcomes = if queue_missing {
            create_queue(broker, &self.using).await?;
            broker.enqueue(&self.using, requests, options).await?
        } else {
            first?
        };
        self.known_tubes.insert(self.using.clone());
        if outcomes.len() != expected {
            return Err(BrokerError::unavailable(format!(
                "broker answered {} enqueue results for {expected} jobs",
                outcomes.len()
            )));
        }
        Ok(outcomes)
    }
}
