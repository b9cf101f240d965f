//! A connection's pipelined commands as one broker call: the commands a
//! client wrote back to back (puts, reserves, and `delete`, `release`,
//! `bury`, `touch` of jobs it holds) become one
//! [`Broker::pipeline_applied`](delayd_core::Broker::pipeline_applied), so a
//! worker keeping several reserves and deletes in flight pays one durable
//! commit per burst, not one per command. The replies are exactly those of
//! running the commands one by one, in order.
//!
//! A segment's replies are rendered at once but held back until its commit
//! is durable (the connection keeps them behind a gate, see `server`):
//! meanwhile the connection reads and runs the commands that follow, so a
//! `delete` does not stall the reserves behind it for its fsync. What a
//! client sees is unchanged: no reply before what it answers is durable,
//! and all in order. A commit that fails closes the connection without
//! sending the replies it held back.
//!
//! A command joins the open segment only when its outcome cannot depend on
//! how the ones before it turn out, apart from what the broker applies in
//! order: a put into a tube this connection has already put into (so its
//! queue exists with beanstalkd semantics), a reserve with no held job near
//! its deadline, a command on a job this connection held when the segment
//! began and that no earlier command of the segment names. Anything else
//! ends the segment and runs on its own.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;

use delayd_core::{
    BrokerError, Delivery, EnqueueOptions, Nack, PipelinedCall, PipelinedResult, QueueName,
    Settling,
};

use crate::proto::Command;
use crate::reply;
use crate::shared::{error_reply, Session};

/// What each call of a segment answers.
enum Step {
    Puts(usize),
    Reserves { timeout: Option<u32>, count: u32 },
    Delete(u64),
    Release(u64),
    Bury(u64),
    Touch(u64),
}

/// Consecutive pipelinable commands, as broker calls.
#[derive(Default)]
pub(crate) struct Segment {
    calls: VecDeque<PipelinedCall>,
    steps: VecDeque<Step>,
    /// Job ids named so far: a second command on the same job ends the
    /// segment (its outcome depends on the first one's).
    named: HashSet<u64>,
    /// Commands in the segment (puts and reserves share calls).
    commands: usize,
}

impl Segment {
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    pub fn len(&self) -> usize {
        self.commands
    }
}

/// Reserves that found too few jobs: they wait, on their own.
pub(crate) struct Waiting {
    pub timeout: Option<u32>,
    pub count: u32,
}

impl Session {
    /// Adds `command` to `segment` if it can be pipelined there; gives it
    /// back otherwise.
    pub(crate) fn pipeline_push(
        &mut self,
        segment: &mut Segment,
        command: Command,
    ) -> Result<(), Command> {
        let seq = match &command {
            Command::Put { .. } => return self.push_put(segment, command),
            Command::Reserve | Command::ReserveWithTimeout(_) => {
                return self.push_reserve(segment, command)
            }
            Command::Delete(seq)
            | Command::Touch(seq)
            | Command::Release { id: seq, .. }
            | Command::Bury { id: seq, .. } => *seq,
            _ => return Err(command),
        };
        let held = self
            .held_lease(seq)
            .filter(|_| !segment.named.contains(&seq));
        let Some((queue, id, lease)) = held else {
            return Err(command);
        };
        let (call, step) = match command {
            Command::Delete(_) => (PipelinedCall::Ack { queue, id, lease }, Step::Delete(seq)),
            Command::Touch(_) => {
                let call = PipelinedCall::Extend {
                    queue,
                    id,
                    lease,
                    lease_ms: None,
                };
                (call, Step::Touch(seq))
            }
            Command::Release { pri, delay, .. } => {
                let nack = Nack {
                    defer: false,
                    delay_ms: Some(u64::from(delay) * 1000),
                    priority: Some(pri),
                    may_die: false,
                    error: None,
                    push: None,
                };
                let call = PipelinedCall::Nack {
                    queue,
                    id,
                    lease,
                    nack,
                };
                (call, Step::Release(seq))
            }
            Command::Bury { pri, .. } => {
                let call = PipelinedCall::Bury {
                    queue,
                    id,
                    lease,
                    priority: Some(pri),
                };
                (call, Step::Bury(seq))
            }
            other => return Err(other),
        };
        if let Step::Delete(seq) | Step::Touch(seq) | Step::Release(seq) | Step::Bury(seq) = step {
            segment.named.insert(seq);
        }
        self.count_command_of(&step);
        segment.commands += 1;
        segment.calls.push_back(call);
        segment.steps.push_back(step);
        Ok(())
    }

    fn count_command_of(&self, step: &Step) {
        let command = match step {
            Step::Delete(seq) => Command::Delete(*seq),
            Step::Touch(seq) => Command::Touch(*seq),
            Step::Release(seq) => Command::Release {
                id: *seq,
                pri: 0,
                delay: 0,
            },
            Step::Bury(seq) => Command::Bury { id: *seq, pri: 0 },
            Step::Puts(_) | Step::Reserves { .. } => return,
        };
        self.count_command(&command);
    }

    /// The lease of `seq` if this connection holds it (a reservation not
    /// yet run out).
    fn held_lease(
        &self,
        seq: u64,
    ) -> Option<(QueueName, delayd_core::MessageId, delayd_core::LeaseId)> {
        let now = self.now_ms();
        let held = self.held.get(&seq).filter(|held| held.lease_until > now)?;
        Some((held.queue.clone(), held.id.clone(), held.lease.clone()))
    }

    fn push_put(&mut self, segment: &mut Segment, command: Command) -> Result<(), Command> {
        if !self.known_tube() || self.shared.draining.load(Ordering::SeqCst) {
            return Err(command);
        }
        self.count_command(&command);
        let Some(request) = crate::put::request(command) else {
            debug_assert!(false, "push_put given a non-put command");
            return Ok(());
        };
        segment.commands += 1;
        // Consecutive puts into one tube are one enqueue call.
        if let (Some(Step::Puts(count)), Some(PipelinedCall::Enqueue { messages, .. })) =
            (segment.steps.back_mut(), segment.calls.back_mut())
        {
            *count += 1;
            messages.push(request);
            return Ok(());
        }
        segment.calls.push_back(PipelinedCall::Enqueue {
            queue: self.using.clone(),
            messages: vec![request],
            options: EnqueueOptions { auto_create: false },
        });
        segment.steps.push_back(Step::Puts(1));
        Ok(())
    }

    fn push_reserve(&mut self, segment: &mut Segment, command: Command) -> Result<(), Command> {
        let timeout = match command {
            Command::ReserveWithTimeout(secs) => Some(secs),
            _ => None,
        };
        // A held job near its deadline (DEADLINE_SOON) matters only to a
        // reserve that finds no job: those wait on their own (`Waiting`).
        self.count_command(&command);
        segment.commands += 1;
        if let (
            Some(Step::Reserves {
                timeout: last,
                count,
            }),
            Some(PipelinedCall::Lease { max, .. }),
        ) = (segment.steps.back_mut(), segment.calls.back_mut())
        {
            if *last == timeout && (*max as usize) < delayd_core::MAX_BATCH {
                *count += 1;
                *max += 1;
                return Ok(());
            }
        }
        segment.calls.push_back(PipelinedCall::Lease {
            queues: self.watching.clone(),
            max: 1,
            lease_ms: None,
        });
        segment
            .steps
            .push_back(Step::Reserves { timeout, count: 1 });
        Ok(())
    }

    /// Runs the segment's calls and writes their replies, which must not
    /// reach the client before the returned [`Settling`] (their commit)
    /// resolves, nor at all if it fails. Also returns reserves that found
    /// too few jobs and must wait (on their own); the calls after them stay
    /// in the segment, not run yet.
    pub(crate) async fn run_segment(
        &mut self,
        segment: &mut Segment,
        out: &mut Vec<u8>,
    ) -> (Option<Waiting>, Option<Settling>) {
        let broker = std::sync::Arc::clone(&self.shared.broker);
        let (results, settling) = broker.pipeline_applied(&mut segment.calls).await;
        let mut waiting = None;
        for result in results {
            let Some(step) = segment.steps.pop_front() else {
                debug_assert!(false, "more pipeline results than calls");
                break;
            };
            waiting = self.reply_step(step, result, out);
        }
        debug_assert_eq!(segment.calls.len(), segment.steps.len());
        segment.named.clear();
        segment.commands = segment.steps.len();
        (waiting, settling)
    }

    fn reply_step(
        &mut self,
        step: Step,
        result: PipelinedResult,
        out: &mut Vec<u8>,
    ) -> Option<Waiting> {
        match (step, result) {
            (Step::Puts(count), PipelinedResult::Enqueued(result)) => {
                self.reply_puts(count, result, out)
            }
            (Step::Reserves { timeout, count }, PipelinedResult::Leased(result)) => {
                return self.reply_reserves(timeout, count, result, out);
            }
            (Step::Delete(seq), PipelinedResult::Done(result)) => {
                let held = self.held.remove(&seq);
                match (result, held) {
                    (Ok(()), Some(held)) => {
                        self.shared.tubes.count(&held.queue, |t| t.cmd_delete += 1);
                        reply::line(out, "DELETED");
                    }
                    (Ok(()), None) => reply::line(out, "DELETED"),
                    (Err(error), _) => reply::line(out, error_reply(&error)),
                }
            }
            (Step::Release(seq), PipelinedResult::Done(result)) => {
                self.held.remove(&seq);
                reply_done(out, result, "RELEASED");
            }
            (Step::Bury(seq), PipelinedResult::Done(result)) => {
                self.held.remove(&seq);
                reply_done(out, result, "BURIED");
            }
            (Step::Touch(seq), PipelinedResult::Extended(result)) => match result {
                Ok(lease_until) => {
                    if let Some(held) = self.held.get_mut(&seq) {
                        held.lease_until = lease_until;
                    }
                    reply::line(out, "TOUCHED");
                }
                Err(error) => {
                    self.held.remove(&seq);
                    reply::line(out, error_reply(&error));
                }
            },
            (_, result) => {
                debug_assert!(false, "pipeline result {result:?} does not fit its step");
                reply::line(out, "INTERNAL_ERROR");
            }
        }
        None
    }

    fn reply_puts(
        &mut self,
        count: usize,
        result: Result<Vec<Result<delayd_core::EnqueueOutcome, BrokerError>>, BrokerError>,
        out: &mut Vec<u8>,
    ) {
        match result {
            Ok(outcomes) if outcomes.len() == count => {
                if outcomes
                    .iter()
                    .any(|o| matches!(o, Err(BrokerError::QueueNotFound(_))))
                {
                    // The tube's queue was deleted meanwhile (over HTTP):
                    // the next put creates it again.
                    self.forget_tube();
                }
                self.reply_outcomes(outcomes, out);
            }
            Ok(_) | Err(_) => {
                let reply = match result {
                    Err(error) if !matches!(error, BrokerError::QueueNotFound(_)) => {
                        error_reply(&error)
                    }
                    _ => "INTERNAL_ERROR",
                };
                self.forget_tube();
                for _ in 0..count {
                    reply::line(out, reply);
                }
            }
        }
    }

    fn reply_reserves(
        &mut self,
        timeout: Option<u32>,
        count: u32,
        result: Result<Vec<Delivery>, BrokerError>,
        out: &mut Vec<u8>,
    ) -> Option<Waiting> {
        self.mark_worker();
        match result {
            Ok(deliveries) => {
                let got = deliveries.len() as u32;
                for delivery in deliveries {
                    self.hand_out(delivery, out);
                }
                (got < count).then_some(Waiting {
                    timeout,
                    count: count - got,
                })
            }
            Err(error) => {
                // Each reserve would have met the same failure.
                for _ in 0..count {
                    reply::line(out, error_reply(&error));
                }
                None
            }
        }
    }
}

fn reply_done(out: &mut Vec<u8>, result: Result<(), BrokerError>, word: &str) {
    match result {
        Ok(()) => reply::line(out, word),
        Err(error) => reply::line(out, error_reply(&error)),
    }
}
