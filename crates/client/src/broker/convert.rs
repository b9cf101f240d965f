//! Conversions between core types and wire types for [`super::HttpBroker`],
//! and the mapping of API error codes back to `BrokerError` variants.

use delayd_core::{
    BrokerError, BrokerResult, DeathReason, DeferReason, Delivery, EnqueueOutcome, EnqueueRequest,
    Event, EventKind, FlowConfig, FlowKey, History, KeyInfo, LeaseId, Message, MessageCounters,
    MessageId, MessageState, OnConflict, PushConfig, QueueConfig, QueueConfigPatch, QueueInfo,
    QueueName, QueueStats, Rate, RetryPolicy, Schedule, Via,
};

use crate::error::ClientError;
use crate::wire::{self, ErrorDetail, NewMessage, Payload};

pub(super) fn not_available(what: &str) -> BrokerError {
    BrokerError::InvalidArgument(format!("not available over HTTP: {what}"))
}

/// What the failing call was about: the API's error body carries only a
/// code and text, so the typed fields of `BrokerError` come from here.
#[derive(Default)]
pub(super) struct Subject<'a> {
    queue: Option<&'a QueueName>,
    id: Option<&'a MessageId>,
    lease: Option<&'a LeaseId>,
}

impl<'a> Subject<'a> {
    pub(super) fn queue(queue: &'a QueueName) -> Self {
        Self {
            queue: Some(queue),
            ..Self::default()
        }
    }

    pub(super) fn message(queue: &'a QueueName, id: &'a MessageId) -> Self {
        Self {
            queue: Some(queue),
            id: Some(id),
            lease: None,
        }
    }

    pub(super) fn lease(queue: &'a QueueName, id: &'a MessageId, lease: &'a LeaseId) -> Self {
        Self {
            queue: Some(queue),
            id: Some(id),
            lease: Some(lease),
        }
    }

    pub(super) fn map(&self, err: ClientError) -> BrokerError {
        match err {
            ClientError::Api { code, message, .. } => self.error_for_code(&code, message),
            // A request that timed out may have been applied by the server.
            ClientError::Unreachable { ref source, .. } => BrokerError::Unavailable {
                reason: err.to_string(),
                maybe_applied: !source.is_connect(),
            },
            ClientError::Transport { .. } => BrokerError::Unavailable {
                reason: err.to_string(),
                maybe_applied: true,
            },
            ClientError::Decode { .. } | ClientError::InvalidUrl(_) => {
                BrokerError::unavailable(err.to_string())
            }
        }
    }

    pub(super) fn error_for_code(&self, code: &str, message: String) -> BrokerError {
        let placeholder_id = || MessageId::new("unknown").ok();
        match (code, self.queue, self.id.cloned().or_else(placeholder_id)) {
            ("queue_not_found", Some(queue), _) => BrokerError::QueueNotFound(queue.clone()),
            ("message_not_found", Some(queue), Some(id)) => BrokerError::MessageNotFound {
                queue: queue.clone(),
                id,
            },
            ("lease_mismatch", _, Some(id)) => BrokerError::LeaseMismatch {
                id,
                lease: self.lease.map(|l| l.to_string()).unwrap_or_default(),
            },
            ("invalid_state", _, Some(id)) => BrokerError::InvalidState {
                id,
                state: state_in_message(&message),
                reason: "refused by the server",
            },
            ("unavailable", _, _) => BrokerError::unavailable(message),
            ("insufficient_storage", _, _) => BrokerError::InsufficientStorage(message),
            _ => BrokerError::InvalidArgument(message),
        }
    }
}

/// The server words `invalid_state` errors as core's `Display` does
/// ("message X is leased: ..."); the state is read back from that text.
pub(super) fn state_in_message(message: &str) -> MessageState {
    let states = [
        MessageState::Scheduled,
        MessageState::Ready,
        MessageState::Dead,
        MessageState::Leased,
    ];
    states
        .into_iter()
        .find(|state| message.contains(&format!(" is {}", state.as_str())))
        .unwrap_or(MessageState::Leased)
}

pub(super) fn wire_error(
    detail: ErrorDetail,
    queue: &QueueName,
    id: Option<&MessageId>,
) -> BrokerError {
    let subject = Subject {
        queue: Some(queue),
        id,
        lease: None,
    };
    subject.error_for_code(&detail.code, detail.message)
}

pub(super) fn parse_state(state: &str) -> BrokerResult<MessageState> {
    match state {
        "scheduled" => Ok(MessageState::Scheduled),
        "ready" => Ok(MessageState::Ready),
        "leased" => Ok(MessageState::Leased),
        "dead" => Ok(MessageState::Dead),
        "acked" => Ok(MessageState::Acked),
        "cancelled" => Ok(MessageState::Cancelled),
        other => Err(BrokerError::unavailable(format!(
            "server sent unknown message state {other:?}"
        ))),
    }
}

pub(super) fn decode_err(err: BrokerError) -> BrokerError {
    BrokerError::unavailable(format!("server sent an invalid name or id: {err}"))
}

pub(super) fn to_message(view: wire::MessageView) -> BrokerResult<Message> {
    Ok(Message {
        last_error: view.last_error,
        deferrals: view.deferrals,
        key: view.key.map(to_key).transpose()?,
        queue: QueueName::new(view.queue).map_err(decode_err)?,
        id: MessageId::new(view.id).map_err(decode_err)?,
        seq: view.seq,
        state: parse_state(&view.state)?,
        deliver_at: view.deliver_at,
        enqueued_at: view.enqueued_at,
        priority: view.priority,
        attempts: view.attempts,
        max_attempts: view.max_attempts,
        // Neither is on the wire: a message's own lease_ms is not
        // settable over HTTP, and the counters are beanstalkd's.
        lease_ms: None,
        lease_until: view.lease_until,
        died_at: view.died_at,
        counters: MessageCounters::default(),
        headers: view.headers,
        payload: view.payload.into_bytes(),
        ended_at: view.ended_at,
    })
}

/// A history as the server sent it, back in core's terms. An event type
/// or a `via`/`reason` this version does not know means the answer is from
/// a newer server than the trait can express: an error naming it.
pub(super) fn to_history(history: wire::History) -> BrokerResult<History> {
    let events = history
        .events
        .into_iter()
        .map(to_event)
        .collect::<BrokerResult<_>>()?;
    Ok(History {
        events,
        dropped: history.dropped,
    })
}

fn to_event(event: wire::Event) -> BrokerResult<Event> {
    use wire::EventKind as Wire;
    let kind = match event.kind {
        Wire::Enqueued => EventKind::Enqueued,
        Wire::Replaced { after_lease } => EventKind::Replaced { after_lease },
        Wire::Rescheduled => EventKind::Rescheduled,
        Wire::Leased { lease_until, via } => EventKind::Leased {
            lease_until,
            via: parse_via(&via)?,
        },
        Wire::Acked => EventKind::Acked,
        Wire::Nacked { delay_ms, error } => EventKind::Nacked { delay_ms, error },
        Wire::Deferred { until, reason } => EventKind::Deferred {
            until,
            reason: parse_defer_reason(&reason)?,
        },
        Wire::Expired => EventKind::Expired,
        Wire::PushFailed {
            status,
            error,
            duration_ms,
        } => EventKind::PushFailed {
            status,
            error,
            duration_ms,
        },
        Wire::Dead { reason } => EventKind::Dead {
            reason: parse_death_reason(&reason)?,
        },
        Wire::Redriven => EventKind::Redriven,
        Wire::Cancelled => EventKind::Cancelled,
        Wire::Other { name, .. } => return Err(unknown("event type", &name)),
    };
    Ok(Event {
        at: event.at,
        attempt: event.attempt,
        kind,
    })
}

fn unknown(what: &str, value: &str) -> BrokerError {
    BrokerError::unavailable(format!("server sent unknown {what} {value:?}"))
}

fn parse_via(via: &str) -> BrokerResult<Via> {
    [Via::Http, Via::Beanstalk, Via::Push]
        .into_iter()
        .find(|v| v.as_str() == via)
        .ok_or_else(|| unknown("leased event `via`", via))
}

fn parse_defer_reason(reason: &str) -> BrokerResult<DeferReason> {
    [
        DeferReason::Nack,
        DeferReason::Push429,
        DeferReason::Push503,
    ]
    .into_iter()
    .find(|r| r.as_str() == reason)
    .ok_or_else(|| unknown("deferred event `reason`", reason))
}

fn parse_death_reason(reason: &str) -> BrokerResult<DeathReason> {
    [
        DeathReason::MaxAttempts,
        DeathReason::MaxDeferrals,
        DeathReason::Buried,
    ]
    .into_iter()
    .find(|r| r.as_str() == reason)
    .ok_or_else(|| unknown("dead event `reason`", reason))
}

pub(super) fn to_delivery(queue: &QueueName, leased: wire::Leased) -> BrokerResult<Delivery> {
    Ok(Delivery {
        key: leased.key.map(to_key).transpose()?,
        queue: queue.clone(),
        id: MessageId::new(leased.id).map_err(decode_err)?,
        seq: leased.seq,
        lease_id: LeaseId(leased.lease_id),
        lease_until: leased.lease_until,
        attempt: leased.attempt,
        deliver_at: leased.deliver_at,
        priority: leased.priority,
        headers: leased.headers,
        payload: leased.payload.into_bytes(),
    })
}

pub(super) fn to_queue_info(queue: wire::Queue) -> BrokerResult<QueueInfo> {
    let config = queue.config;
    Ok(QueueInfo {
        name: QueueName::new(queue.name).map_err(decode_err)?,
        config: QueueConfig {
            flow: config.flow.map(to_flow_config).transpose()?,
            lease_ms: config.lease_ms,
            max_attempts: config.max_attempts,
            retry: RetryPolicy {
                initial_ms: config.retry.initial_ms,
                max_ms: config.retry.max_ms,
                multiplier: config.retry.multiplier,
            },
            // The secret never comes back over the API.
            push: config.push.map(|push| PushConfig {
                url: push.url,
                timeout_ms: push.timeout_ms,
                concurrency: push.concurrency,
                secret: None,
                headers: Default::default(),
            }),
            retain_ms: config.retain_ms,
        },
        paused: queue.paused,
        paused_until: queue.paused_until,
        stats: QueueStats {
            cooling_keys: queue.stats.cooling_keys,
            flow_keys: queue.stats.flow_keys,
            scheduled: queue.stats.scheduled,
            ready: queue.stats.ready,
            leased: queue.stats.leased,
            dead: queue.stats.dead,
            ready_urgent: 0,
        },
    })
}

/// A key the server sent back; one that breaks the key rule means the
/// answer is not to be trusted.
pub(super) fn to_key(key: String) -> BrokerResult<FlowKey> {
    FlowKey::new(key).map_err(decode_err)
}

fn to_flow_config(flow: wire::FlowView) -> BrokerResult<FlowConfig> {
    Ok(FlowConfig {
        rate: flow.rate.map(to_rate).transpose()?,
        key_rate: flow.key_rate.map(to_rate).transpose()?,
        concurrency: flow.concurrency,
        key_concurrency: flow.key_concurrency,
        ordered: flow.ordered,
        max_deferrals: flow.max_deferrals,
    })
}

fn to_rate(rate: wire::RateView) -> BrokerResult<Rate> {
    let limit = u32::try_from(rate.limit).map_err(|_| {
        BrokerError::unavailable(format!("server sent a rate limit of {}", rate.limit))
    })?;
    Ok(Rate {
        limit,
        period_ms: rate.period_ms,
        burst: rate.burst,
    })
}

/// Every field spelled out, so the server's defaults never apply.
fn to_flow_spec(flow: FlowConfig) -> wire::FlowSpec {
    let rate = |rate: Rate| wire::RateSpec {
        limit: u64::from(rate.limit),
        period_ms: rate.period_ms,
        burst: Some(rate.burst),
    };
    wire::FlowSpec {
        rate: flow.rate.map(rate),
        key_rate: flow.key_rate.map(rate),
        concurrency: flow.concurrency,
        key_concurrency: flow.key_concurrency,
        ordered: Some(flow.ordered),
        max_deferrals: Some(flow.max_deferrals),
    }
}

pub(super) fn to_key_info(info: wire::KeyInfo) -> BrokerResult<KeyInfo> {
    Ok(KeyInfo {
        key: to_key(info.key)?,
        scheduled: info.scheduled,
        ready: info.ready,
        leased: info.leased,
        dead: info.dead,
        cooling_until: info.cooling_until,
    })
}

pub(super) fn to_put_body(patch: QueueConfigPatch) -> wire::QueuePut {
    wire::QueuePut {
        lease_ms: patch.lease_ms,
        max_attempts: patch.max_attempts,
        retry: patch.retry.map(|retry| wire::Retry {
            initial_ms: retry.initial_ms,
            max_ms: retry.max_ms,
            multiplier: retry.multiplier,
        }),
        push: patch.push.map(|push| {
            push.map(|push| wire::PushSpec {
                url: push.url,
                timeout_ms: Some(push.timeout_ms),
                concurrency: Some(push.concurrency),
                secret: push.secret,
                headers: (!push.headers.is_empty()).then_some(push.headers),
            })
        }),
        flow: patch.flow.map(|flow| flow.map(to_flow_spec)),
        retain_ms: patch.retain_ms,
    }
}

pub(super) fn to_new_message(request: EnqueueRequest) -> BrokerResult<NewMessage> {
    if request.lease_ms.is_some() {
        return Err(not_available("per-message lease_ms"));
    }
    let (delay_ms, deliver_at) = schedule_fields(request.schedule);
    Ok(NewMessage {
        payload: Payload::from_bytes(request.payload),
        id: request.id.map(String::from),
        delay_ms,
        deliver_at,
        priority: request.priority,
        headers: request.headers,
        max_attempts: request.max_attempts,
        key: request.key.map(String::from),
        // `keep` is the default: sent only when it is not.
        on_conflict: match request.on_conflict {
            OnConflict::Keep => None,
            OnConflict::Replace => Some(wire::OnConflict::Replace),
            OnConflict::Debounce => Some(wire::OnConflict::Debounce),
        },
        debounce_max_ms: request.debounce_max_ms,
    })
}

/// `Schedule::Now` is sent as no field at all ("deliver now").
pub(super) fn schedule_fields(schedule: Schedule) -> (Option<u64>, Option<u64>) {
    match schedule {
        Schedule::Now => (None, None),
        Schedule::Delay(ms) => (Some(ms), None),
        Schedule::At(at) => (None, Some(at)),
    }
}

pub(super) fn to_outcome(done: wire::Enqueued) -> BrokerResult<EnqueueOutcome> {
    Ok(EnqueueOutcome {
        id: MessageId::new(done.id).map_err(decode_err)?,
        seq: done.seq,
        deliver_at: done.deliver_at,
        created: done.created,
        replaced: done.replaced,
        after_lease: done.after_lease,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_reads_back_and_names_what_it_cannot() {
        let wire: wire::History = serde_json::from_value(serde_json::json!({
            "events": [
                {"at": 1, "type": "leased", "attempt": 1, "lease_until": 9, "via": "beanstalk"},
                {"at": 2, "type": "deferred", "attempt": 0, "until": 5, "reason": "push_503"},
                {"at": 3, "type": "dead", "attempt": 0, "reason": "max_deferrals"}],
            "dropped": 4}))
        .unwrap();
        let history = to_history(wire).unwrap();
        assert_eq!(history.dropped, 4);
        let kinds: Vec<EventKind> = history.events.into_iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Leased {
                    lease_until: 9,
                    via: Via::Beanstalk
                },
                EventKind::Deferred {
                    until: 5,
                    reason: DeferReason::Push503
                },
                EventKind::Dead {
                    reason: DeathReason::MaxDeferrals
                },
            ]
        );
        let newer = |event: serde_json::Value| {
            let wire: wire::History =
                serde_json::from_value(serde_json::json!({"events": [event], "dropped": 0}))
                    .unwrap();
            to_history(wire).unwrap_err().to_string()
        };
        let err = newer(serde_json::json!({"at": 1, "type": "teleported", "attempt": 0}));
        assert!(err.contains("event type \"teleported\""), "{err}");
        let err = newer(serde_json::json!(
            {"at": 1, "type": "leased", "attempt": 1, "lease_until": 2, "via": "grpc"}));
        assert!(err.contains("`via` \"grpc\""), "{err}");
    }

    #[test]
    fn codes_map_back_to_broker_errors() {
        let queue = QueueName::new("q").unwrap();
        let id = MessageId::new("m").unwrap();
        let lease = LeaseId("l".into());
        let subject = Subject::lease(&queue, &id, &lease);
        let api = |code: &str, message: &str| ClientError::Api {
            status: 409,
            code: code.into(),
            message: message.into(),
        };
        assert!(matches!(
            subject.map(api("lease_mismatch", "x")),
            BrokerError::LeaseMismatch { lease, .. } if lease == "l"
        ));
        assert!(matches!(
            subject.map(api("invalid_state", "message m is dead: cannot reschedule")),
            BrokerError::InvalidState {
                state: MessageState::Dead,
                ..
            }
        ));
        assert!(matches!(
            subject.map(api("message_not_found", "x")),
            BrokerError::MessageNotFound { .. }
        ));
        assert!(matches!(
            subject.map(api("queue_not_found", "x")),
            BrokerError::QueueNotFound(_)
        ));
        assert!(matches!(
            subject.map(api("payload_too_large", "x")),
            BrokerError::InvalidArgument(_)
        ));
        assert!(matches!(
            subject.map(api("unavailable", "x")),
            BrokerError::Unavailable { .. }
        ));
        assert!(matches!(
            subject.map(api("insufficient_storage", "x")),
            BrokerError::InsufficientStorage(_)
        ));
    }
}
