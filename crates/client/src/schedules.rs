//! [`Client`]'s recurring-schedule methods (api.md, "Schedules"): put,
//! get, list, delete, pause, resume, trigger, preview.

use reqwest::{Method, StatusCode};

use delayd_api::{Enqueued, Preview, PreviewBody, Schedule, ScheduleList, SchedulePutBody};

use crate::client::{decode, Client};
use crate::error::ClientError;

/// Result of [`Client::put_schedule`]: whether the `PUT` created the
/// schedule (201) or replaced it (200; with the same definition nothing
/// changed and `revision` is the same), and the schedule as it now is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutSchedule {
    pub created: bool,
    pub schedule: Schedule,
}

impl Client {
    /// Creates or replaces the schedule `id` of `queue` (creating the queue
    /// like an enqueue does).
    pub async fn put_schedule(
        &self,
        queue: &str,
        id: &str,
        body: &SchedulePutBody,
    ) -> Result<PutSchedule, ClientError> {
        let url = self.url(&["v1", "queues", queue, "schedules", id])?;
        let response = self
            .send(self.request(Method::PUT, &url).json(body))
            .await?;
        let created = response.status() == StatusCode::CREATED;
        let schedule = decode(response).await?;
        Ok(PutSchedule { created, schedule })
    }

    pub async fn get_schedule(&self, queue: &str, id: &str) -> Result<Schedule, ClientError> {
        let path = ["v1", "queues", queue, "schedules", id];
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// The queue's schedules, ordered by id.
    pub async fn list_schedules(&self, queue: &str) -> Result<Vec<Schedule>, ClientError> {
        let path = ["v1", "queues", queue, "schedules"];
        let list: ScheduleList = self.call(Method::GET, &path, None::<&()>).await?;
        Ok(list.schedules)
    }

    /// Deletes the schedule; the messages it already enqueued stay.
    pub async fn delete_schedule(&self, queue: &str, id: &str) -> Result<(), ClientError> {
        let path = ["v1", "queues", queue, "schedules", id];
        self.call_empty(Method::DELETE, &path, None::<&()>).await
    }

    /// Nothing fires while paused.
    pub async fn pause_schedule(&self, queue: &str, id: &str) -> Result<Schedule, ClientError> {
        let path = ["v1", "queues", queue, "schedules", id, "pause"];
        self.call(Method::POST, &path, None::<&()>).await
    }

    /// Fire times that passed while paused do not fire.
    pub async fn resume_schedule(&self, queue: &str, id: &str) -> Result<Schedule, ClientError> {
        let path = ["v1", "queues", queue, "schedules", id, "resume"];
        self.call(Method::POST, &path, None::<&()>).await
    }

    /// Enqueues one message from the schedule's template now (id
    /// `<schedule id>:manual:<now>`); not counted as a fire.
    pub async fn trigger_schedule(&self, queue: &str, id: &str) -> Result<Enqueued, ClientError> {
        let path = ["v1", "queues", queue, "schedules", id, "trigger"];
        self.call(Method::POST, &path, None::<&()>).await
    }

    /// The next fire times (epoch ms) a schedule of `body`'s recurrence
    /// would have from `body.start_at` (default: now); stores nothing.
    pub async fn preview_schedule(&self, body: &PreviewBody) -> Result<Vec<u64>, ClientError> {
        let path = ["v1", "schedules", "preview"];
        let preview: Preview = self.call(Method::POST, &path, Some(body)).await?;
        Ok(preview.fires)
    }
}
