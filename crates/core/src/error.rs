//! The one error type of the `Broker` trait. Variants are split by how a
//! caller reacts (HTTP status, beanstalkd reply), not by where they arose.

use crate::message::MessageState;
use crate::model::{MessageId, QueueName};

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum BrokerError {
    /// The request itself is wrong (HTTP 400 `invalid_argument`).
    #[error("{0}")]
    InvalidArgument(String),
    /// HTTP 404 `queue_not_found`.
    #[error("queue {0} not found")]
    QueueNotFound(QueueName),
    /// HTTP 404 `message_not_found`.
    #[error("message {id} not found in queue {queue}")]
    MessageNotFound { queue: QueueName, id: MessageId },
    /// HTTP 404 `schedule_not_found`.
    #[error("schedule {id} not found in queue {queue}")]
    ScheduleNotFound {
        queue: QueueName,
        id: crate::recurring::ScheduleId,
    },
    /// The lease is not the message's current lease (expired, superseded,
    /// or never existed): HTTP 409 `lease_mismatch`.
    #[error("lease {lease} is not the current lease of message {id}")]
    LeaseMismatch { id: MessageId, lease: String },
    /// The operation is not allowed in the message's state: HTTP 409.
    #[error("message {id} is {state}: {reason}")]
    InvalidState {
        id: MessageId,
        state: MessageState,
        reason: &'static str,
    },
    /// The store cannot take or serve requests right now (disk failure,
    /// Redis unreachable, shutting down): HTTP 503 `unavailable`. Nothing
    /// was changed by the failed call, unless `maybe_applied` says a write
    /// may have reached the store before the failure was seen.
    #[error("unavailable: {reason}")]
    Unavailable { reason: String, maybe_applied: bool },
    /// The store is short of disk space and refuses calls that add data
    /// (enqueue); calls that remove data (ack, cancel, delete) still work,
    /// so consumers can drain it: HTTP 507 `insufficient_storage`. Nothing
    /// was changed by the failed call. The text names the cause.
    #[error("insufficient storage: {0}")]
    InsufficientStorage(String),
}

impl BrokerError {
    /// `defer: true` on a queue without `flow` (api.md: 400), worded once
    /// for every backend.
    pub fn defer_without_flow(queue: &QueueName) -> Self {
        Self::InvalidArgument(format!(
            "defer: queue {queue} has no flow control (set its flow to defer deliveries)"
        ))
    }

    /// `replace` or `debounce` of a dead message (api.md: 409
    /// `invalid_state`), worded once for every backend.
    pub fn replace_dead(id: &MessageId) -> Self {
        Self::InvalidState {
            id: id.clone(),
            state: MessageState::Dead,
            reason: "on_conflict replace and debounce do not change a dead message (redrive or cancel it first)",
        }
    }

    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            maybe_applied: false,
        }
    }

    /// A stable snake_case code for wire formats (api.md's error codes).
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidArgument(_) => "invalid_argument",
            Self::QueueNotFound(_) => "queue_not_found",
            Self::MessageNotFound { .. } => "message_not_found",
            Self::ScheduleNotFound { .. } => "schedule_not_found",
            Self::LeaseMismatch { .. } => "lease_mismatch",
            Self::InvalidState { .. } => "invalid_state",
            Self::Unavailable { .. } => "unavailable",
            Self::InsufficientStorage(_) => "insufficient_storage",
        }
    }
}

pub type BrokerResult<T> = Result<T, BrokerError>;
