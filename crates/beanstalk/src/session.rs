//! The dispatch of one connection's parsed commands to their handlers,
//! and the tube commands (`use`, `watch`, `ignore`). The connection's
//! state is [`Session`](crate::shared::Session); `put` is in
//! [`crate::put`], worker commands in [`crate::jobs`], inspection commands
//! in [`crate::inspect`].

use delayd_core::{BrokerError, QueueName};

use crate::proto::Command;
use crate::reply;
use crate::shared::{error_reply, Session};
use crate::tubes::{queue_name, Ref};

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Quit,
}

impl Session {
    /// Runs one command, appending its reply to `out`.
    pub(crate) async fn execute(&mut self, command: Command, out: &mut Vec<u8>) -> Flow {
        self.shared.counters.count_command(&command);
        match self.dispatch(command, out).await {
            Ok(flow) => flow,
            Err(error) => {
                reply::line(out, error_reply(&error));
                Flow::Continue
            }
        }
    }

    async fn dispatch(&mut self, command: Command, out: &mut Vec<u8>) -> Result<Flow, BrokerError> {
        use Command as C;
        match command {
            C::Put { .. } => self.put_batch(vec![command], out).await,
            C::Use(tube) => self.use_tube(&tube, out),
            C::Watch(tube) => self.watch(&tube, out),
            C::Ignore(tube) => self.ignore(&tube, out),
            C::ListTubeUsed => reply::line(out, &format!("USING {}", self.using)),
            C::ListTubesWatched => {
                let names = self.watching.iter().map(QueueName::as_str);
                reply::yaml(out, &reply::name_list(names));
            }
            // `pipeline_push` takes every reserve into a segment, so the
            // connection never hands one to `execute`.
            C::Reserve | C::ReserveWithTimeout(_) => {
                unreachable!("reserves always join a pipelined segment")
            }
            C::ReserveJob(id) => self.reserve_job(id, out).await?,
            C::Delete(id) => self.delete(id, out).await?,
            C::Release { id, pri, delay } => self.release(id, pri, delay, out).await?,
            C::Bury { id, pri } => self.bury(id, pri, out).await?,
            C::Touch(id) => self.touch(id, out).await?,
            C::Peek(id) => self.peek(id, out).await?,
            C::PeekReady => {
                self.peek_state(delayd_core::MessageState::Ready, out)
                    .await?
            }
            C::PeekDelayed => {
                self.peek_state(delayd_core::MessageState::Scheduled, out)
                    .await?
            }
            C::PeekBuried => {
                self.peek_state(delayd_core::MessageState::Dead, out)
                    .await?
            }
            C::Kick(bound) => self.kick(bound, out).await?,
            C::KickJob(id) => self.kick_job(id, out).await?,
            C::StatsJob(id) => self.stats_job(id, out).await?,
            C::StatsTube(tube) => self.stats_tube(&tube, out).await?,
            C::Stats => self.stats(out).await?,
            C::ListTubes => self.list_tubes(out).await?,
            C::PauseTube { tube, delay } => self.pause_tube(&tube, delay, out).await?,
            C::Quit => return Ok(Flow::Quit),
        }
        Ok(Flow::Continue)
    }

    fn use_tube(&mut self, tube: &str, out: &mut Vec<u8>) {
        let Some(queue) = queue_name(tube) else {
            reply::line(out, "BAD_FORMAT");
            return;
        };
        self.shared.tubes.add(&queue, Ref::Using);
        self.shared.tubes.remove(&self.using, Ref::Using);
        reply::line(out, &format!("USING {queue}"));
        self.using = queue;
    }

    fn watch(&mut self, tube: &str, out: &mut Vec<u8>) {
        let Some(queue) = queue_name(tube) else {
            reply::line(out, "BAD_FORMAT");
            return;
        };
        if !self.watching.contains(&queue) {
            self.shared.tubes.add(&queue, Ref::Watching);
            self.watching.push(queue);
        }
        reply::line(out, &format!("WATCHING {}", self.watching.len()));
    }

    fn ignore(&mut self, tube: &str, out: &mut Vec<u8>) {
        // beanstalkd refuses before looking at the name: a connection
        // always watches at least one tube.
        if self.watching.len() < 2 {
            reply::line(out, "NOT_IGNORED");
            return;
        }
        if let Some(at) = self.watching.iter().position(|q| q.as_str() == tube) {
            let queue = self.watching.remove(at);
            self.shared.tubes.remove(&queue, Ref::Watching);
        }
        reply::line(out, &format!("WATCHING {}", self.watching.len()));
    }
}
