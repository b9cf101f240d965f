//! [`super::HttpBroker`]'s schedule methods: core's recurring-schedule types
//! to the wire and back, and `schedule_not_found` back to
//! `BrokerError::ScheduleNotFound`.

use delayd_api::{CatchupMode, OverlapMode, Schedule, ScheduleMessageBody, SchedulePutBody};
use delayd_core::{
    BrokerError, BrokerResult, Catchup, EnqueueOptions, EnqueueOutcome, MessageTemplate, Overlap,
    QueueName, Recurrence, ScheduleDefinition, ScheduleId, ScheduleRecord, Upsert,
};

use super::convert::{decode_err, to_key, to_outcome, Subject};
use crate::client::Client;
use crate::error::ClientError;
use crate::wire::Payload;

/// The error of a call about schedule `id` of `queue`.
fn map_error(err: ClientError, queue: &QueueName, id: &ScheduleId) -> BrokerError {
    match err {
        ClientError::Api { ref code, .. } if code == "schedule_not_found" => {
            BrokerError::ScheduleNotFound {
                queue: queue.clone(),
                id: id.clone(),
            }
        }
        err => Subject::queue(queue).map(err),
    }
}

pub(super) async fn put(
    client: &Client,
    queue: &QueueName,
    id: &ScheduleId,
    definition: ScheduleDefinition,
    options: EnqueueOptions,
) -> BrokerResult<(Upsert, ScheduleRecord)> {
    // The API always creates the queue; without auto-create, check first
    // (the same emulation, and the same race, as enqueue's).
    if !options.auto_create {
        let found = client.get_queue(queue.as_str()).await;
        found.map_err(|err| Subject::queue(queue).map(err))?;
    }
    let put = client
        .put_schedule(queue.as_str(), id.as_str(), &to_put_body(definition))
        .await
        .map_err(|err| map_error(err, queue, id))?;
    let upsert = if put.created {
        Upsert::Created
    } else {
        Upsert::Updated
    };
    Ok((upsert, to_record(put.schedule)?))
}

pub(super) async fn get(
    client: &Client,
    queue: &QueueName,
    id: &ScheduleId,
) -> BrokerResult<ScheduleRecord> {
    let found = client.get_schedule(queue.as_str(), id.as_str()).await;
    to_record(found.map_err(|err| map_error(err, queue, id))?)
}

pub(super) async fn list(client: &Client, queue: &QueueName) -> BrokerResult<Vec<ScheduleRecord>> {
    let found = client.list_schedules(queue.as_str()).await;
    let schedules = found.map_err(|err| Subject::queue(queue).map(err))?;
    schedules.into_iter().map(to_record).collect()
}

pub(super) async fn delete(
    client: &Client,
    queue: &QueueName,
    id: &ScheduleId,
) -> BrokerResult<()> {
    let done = client.delete_schedule(queue.as_str(), id.as_str()).await;
    done.map_err(|err| map_error(err, queue, id))
}

pub(super) async fn set_paused(
    client: &Client,
    queue: &QueueName,
    id: &ScheduleId,
    paused: bool,
) -> BrokerResult<ScheduleRecord> {
    let done = if paused {
        client.pause_schedule(queue.as_str(), id.as_str()).await
    } else {
        client.resume_schedule(queue.as_str(), id.as_str()).await
    };
    to_record(done.map_err(|err| map_error(err, queue, id))?)
}

pub(super) async fn trigger(
    client: &Client,
    queue: &QueueName,
    id: &ScheduleId,
) -> BrokerResult<EnqueueOutcome> {
    let done = client.trigger_schedule(queue.as_str(), id.as_str()).await;
    to_outcome(done.map_err(|err| map_error(err, queue, id))?)
}

/// The whole definition, every field spelled out (`start_at` included, so
/// the server's default never applies).
fn to_put_body(definition: ScheduleDefinition) -> SchedulePutBody {
    let template = definition.message;
    let message = ScheduleMessageBody {
        payload: Payload::from_bytes(template.payload),
        priority: template.priority,
        headers: template.headers,
        max_attempts: template.max_attempts,
        key: template.key.map(String::from),
    };
    let (cron, tz, every_ms) = match definition.recurrence {
        Recurrence::Cron { expr, tz } => (Some(expr), Some(tz), None),
        Recurrence::Every { every_ms } => (None, None, Some(every_ms)),
    };
    SchedulePutBody {
        cron,
        every_ms,
        tz,
        start_at: Some(definition.start_at),
        end_at: definition.end_at,
        max_fires: definition.max_fires,
        message,
        catchup: Some(match definition.catchup {
            Catchup::Latest => CatchupMode::Latest,
            Catchup::All => CatchupMode::All,
        }),
        catchup_window_ms: Some(definition.catchup_window_ms),
        overlap: Some(match definition.overlap {
            Overlap::Allow => OverlapMode::Allow,
            Overlap::Skip => OverlapMode::Skip,
        }),
        jitter_ms: Some(definition.jitter_ms),
        paused: Some(definition.paused),
    }
}

fn to_record(schedule: Schedule) -> BrokerResult<ScheduleRecord> {
    let recurrence = match (schedule.cron, schedule.every_ms) {
        (Some(expr), None) => Recurrence::Cron {
            expr,
            tz: schedule.tz.unwrap_or_else(|| "UTC".to_owned()),
        },
        (None, Some(every_ms)) => Recurrence::Every { every_ms },
        _ => return Err(bad_answer("neither or both of cron and every_ms")),
    };
    let catchup = match schedule.catchup.as_str() {
        "latest" => Catchup::Latest,
        "all" => Catchup::All,
        other => return Err(bad_answer(format_args!("catchup {other:?}"))),
    };
    let overlap = match schedule.overlap.as_str() {
        "allow" => Overlap::Allow,
        "skip" => Overlap::Skip,
        other => return Err(bad_answer(format_args!("overlap {other:?}"))),
    };
    let message = schedule.message;
    Ok(ScheduleRecord {
        queue: QueueName::new(schedule.queue).map_err(decode_err)?,
        id: ScheduleId::new(schedule.id).map_err(decode_err)?,
        definition: ScheduleDefinition {
            recurrence,
            start_at: schedule.start_at,
            end_at: schedule.end_at,
            max_fires: schedule.max_fires,
            message: MessageTemplate {
                key: message.key.map(to_key).transpose()?,
                payload: message.payload.into_bytes(),
                priority: Some(message.priority),
                headers: message.headers,
                max_attempts: message.max_attempts,
            },
            catchup,
            catchup_window_ms: schedule.catchup_window_ms,
            overlap,
            jitter_ms: schedule.jitter_ms,
            paused: schedule.paused,
        },
        revision: schedule.revision,
        fires: schedule.fires,
        last_fire_at: schedule.last_fire_at,
        next_fire_at: schedule.next_fire_at,
        since: schedule.updated_at,
        // The server shows records settled: nothing written ahead shows.
        ahead: None,
    })
}

fn bad_answer(what: impl std::fmt::Display) -> BrokerError {
    BrokerError::unavailable(format!("the server's schedule object has {what}"))
}
