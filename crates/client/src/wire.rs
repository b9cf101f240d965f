//! Wire types: the JSON bodies of delayd's HTTP API v1 are `delayd_api`'s,
//! the same types the server reads and writes, so the two cannot disagree
//! about a field. The contract they implement is docs/api.md (with its
//! "JSON shapes" section, which `delayd-api`'s tests check against these
//! types).
//!
//! Request bodies serialize only the fields that are set (the server
//! rejects unknown fields, and an explicit `null` is not the same as
//! "absent" for `push`). Response types ignore fields they do not know, so
//! a newer server that adds fields keeps working with this client.
//!
//! The names below are this crate's established ones, kept as aliases of
//! the wire crate's types so that callers need not change.

pub use delayd_api::{
    encode_base64, AckItem, Enqueued, ErrorBody, ErrorDetail, Event, EventKind, Extended, FlowView,
    History, KeyInfo, Leased, Message, OnConflict, Payload, PushView, Queue, QueueConfig,
    QueueStats, RateView,
};
pub use delayd_api::{
    CatchupMode, OverlapMode, PreviewBody, Schedule, ScheduleMessage, ScheduleMessageBody,
    SchedulePutBody,
};

/// One message to enqueue (`POST .../messages`, or an item of a batch).
pub type NewMessage = delayd_api::EnqueueBody;
/// Body of `PUT /v1/queues/{queue}`.
pub type QueuePut = delayd_api::QueuePutBody;
/// `retry` as a `PUT` sets it (fields left out take api.md's defaults).
pub type Retry = delayd_api::RetryBody;
/// `push` as a `PUT` sets it.
pub type PushSpec = delayd_api::PushBody;
/// `flow` as a `PUT` sets it (replaced whole; `Some(None)` in
/// [`QueuePut::flow`] removes it).
pub type FlowSpec = delayd_api::FlowBody;
/// A rate (`rate`, `key_rate`) as a `PUT` sets it.
pub type RateSpec = delayd_api::RateBody;
/// Body of `PATCH .../messages/{id}`.
pub type Reschedule = delayd_api::PatchBody;
/// Body of `POST .../leases`.
pub type LeaseOptions = delayd_api::LeaseBody;
/// A message as `GET .../messages/{id}` and the dead list show it.
pub type MessageView = delayd_api::Message;
/// A queue's config as the server shows it.
pub type QueueConfigView = delayd_api::QueueConfig;
/// One result of a batch enqueue, in input order.
pub type BatchItem = delayd_api::BatchItemResult;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_message_serializes_only_given_fields() {
        let m = NewMessage::new("hi").delay_ms(5).header("k", "v");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            json!({"payload": "hi", "delay_ms": 5, "headers": {"k": "v"}})
        );
        let bin = NewMessage::new(vec![0xff, 0x00]);
        let v = serde_json::to_value(&bin).unwrap();
        assert_eq!(v, json!({"payload_base64": "/wA="}));
    }

    #[test]
    fn on_conflict_is_sent_only_when_set_and_replaced_reads_false_when_absent() {
        let m = NewMessage::new("hi")
            .id("a")
            .on_conflict(OnConflict::Debounce)
            .debounce_max_ms(60_000);
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"id": "a", "payload": "hi", "on_conflict": "debounce",
                   "debounce_max_ms": 60000})
        );
        let older: Enqueued = serde_json::from_value(json!({
            "id": "a", "seq": 1, "deliver_at": 2, "created": false
        }))
        .unwrap();
        assert!(!older.replaced && !older.after_lease);
        let successor: Enqueued = serde_json::from_value(json!({
            "id": "a", "seq": 1, "deliver_at": 2, "created": false,
            "replaced": true, "after_lease": true
        }))
        .unwrap();
        assert!(successor.replaced && successor.after_lease);
    }

    #[test]
    fn message_view_keeps_lease_and_death_times() {
        let view: MessageView = serde_json::from_value(json!({
            "id": "a", "seq": 1, "queue": "q", "state": "dead", "deliver_at": 2,
            "attempts": 3, "priority": 1024, "headers": {}, "payload": "p",
            "enqueued_at": 1, "max_attempts": 3, "died_at": 9, "newer_field": 1
        }))
        .unwrap();
        assert_eq!(
            (view.max_attempts, view.lease_until, view.died_at),
            (Some(3), None, Some(9))
        );
    }

    #[test]
    fn flow_and_key_are_sent_only_when_set() {
        let put = QueuePut {
            flow: Some(Some(FlowSpec::default().rate(50, 1000).ordered(true))),
            ..QueuePut::default()
        };
        assert_eq!(
            serde_json::to_value(&put).unwrap(),
            json!({"flow": {"rate": {"limit": 50, "period_ms": 1000}, "ordered": true}})
        );
        let remove = QueuePut {
            flow: Some(None),
            ..QueuePut::default()
        };
        assert_eq!(
            serde_json::to_value(&remove).unwrap(),
            json!({"flow": null})
        );
        let keyed = NewMessage::new("hi").key("tenant-1");
        assert_eq!(
            serde_json::to_value(&keyed).unwrap(),
            json!({"payload": "hi", "key": "tenant-1"})
        );
    }

    #[test]
    fn push_null_removes_and_absent_keeps() {
        let remove = QueuePut {
            push: Some(None),
            ..QueuePut::default()
        };
        assert_eq!(
            serde_json::to_value(&remove).unwrap(),
            json!({"push": null})
        );
        assert_eq!(
            serde_json::to_value(QueuePut::default()).unwrap(),
            json!({})
        );
    }
}
