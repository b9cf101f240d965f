//! Decoding function replies: status words and message records (the id,
//! then the record's fields in stored order, as `append_record` in
//! lua/common.lua emits them: numbers as integer replies, optional values
//! as `''`). A retained record (state `A`/`C`) has the same layout, with
//! `ended_at` set.

use std::collections::BTreeMap;

use delayd_core::{
    BrokerError, BrokerResult, Delivery, FlowKey, LeaseId, Message, MessageCounters, MessageId,
    MessageState, QueueName,
};
use redis::Value;

/// Values per record: the id and the 21 fields `append_record` emits (the
/// last one `ended_at`, `''` on a live message).
pub(crate) const RECORD_LEN: usize = 22;

fn corrupt(what: &str) -> BrokerError {
    tracing::error!(what, "unexpected reply from a delayd script");
    BrokerError::unavailable(format!("unexpected reply from Redis: {what}"))
}

pub(crate) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(crate) fn text(v: &Value) -> BrokerResult<&str> {
    bytes(v)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or_else(|| corrupt("expected text"))
}

pub(crate) fn int(v: &Value) -> BrokerResult<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| corrupt("negative integer")),
        other => text(other)?
            .parse()
            .map_err(|_| corrupt("expected an integer")),
    }
}

/// An optional integer field: `''` means none.
pub(crate) fn opt_int(v: &Value) -> BrokerResult<Option<u64>> {
    match bytes(v) {
        Some([]) => Ok(None),
        _ => int(v).map(Some),
    }
}

fn int32(v: &Value) -> BrokerResult<u32> {
    u32::try_from(int(v)?).map_err(|_| corrupt("integer out of range"))
}

/// Splits a reply into its status word and the rest.
pub(crate) fn status(reply: &[Value]) -> BrokerResult<(&str, &[Value])> {
    let (first, rest) = reply.split_first().ok_or_else(|| corrupt("empty reply"))?;
    Ok((text(first)?, rest))
}

pub(crate) fn state(code: &str) -> BrokerResult<MessageState> {
    match code {
        "S" => Ok(MessageState::Scheduled),
        "R" => Ok(MessageState::Ready),
        "L" => Ok(MessageState::Leased),
        "D" => Ok(MessageState::Dead),
        "A" => Ok(MessageState::Acked),
        "C" => Ok(MessageState::Cancelled),
        _ => Err(corrupt("unknown state")),
    }
}

pub(crate) fn encode_headers(headers: &BTreeMap<String, String>) -> BrokerResult<String> {
    if headers.is_empty() {
        return Ok(String::new());
    }
    serde_json::to_string(headers).map_err(|e| BrokerError::InvalidArgument(e.to_string()))
}

fn decode_headers(v: &Value) -> BrokerResult<BTreeMap<String, String>> {
    match bytes(v) {
        Some([]) => Ok(BTreeMap::new()),
        Some(b) => serde_json::from_slice(b).map_err(|_| corrupt("headers")),
        None => Err(corrupt("headers")),
    }
}

/// Parses consecutive records.
pub(crate) fn messages(queue: &QueueName, values: &[Value]) -> BrokerResult<Vec<Message>> {
    if !values.chunks_exact(RECORD_LEN).remainder().is_empty() {
        return Err(corrupt("record length"));
    }
    values
        .chunks(RECORD_LEN)
        .map(|r| message(queue, r))
        .collect()
}

pub(crate) fn message(queue: &QueueName, r: &[Value]) -> BrokerResult<Message> {
    if r.len() < RECORD_LEN {
        return Err(corrupt("short record"));
    }
    let id = MessageId::new(text(&r[0])?).map_err(|_| corrupt("message id"))?;
    Ok(Message {
        last_error: match bytes(&r[20]) {
            Some([]) => None,
            _ => Some(text(&r[20])?.to_owned()),
        },
        deferrals: int32(&r[19])?,
        ended_at: opt_int(&r[21])?,
        key: flow_key(&r[18])?,
        queue: queue.clone(),
        id,
        seq: int(&r[1])?,
        state: state(text(&r[2])?)?,
        deliver_at: int(&r[3])?,
        enqueued_at: int(&r[4])?,
        priority: int32(&r[5])?,
        payload: bytes(&r[6]).map(<[u8]>::to_vec).unwrap_or_default(),
        headers: decode_headers(&r[7])?,
        attempts: int32(&r[8])?,
        max_attempts: opt_int(&r[9])?
            .map(|v| u32::try_from(v).map_err(|_| corrupt("max_attempts")))
            .transpose()?,
        lease_ms: opt_int(&r[10])?,
        lease_until: opt_int(&r[11])?,
        died_at: opt_int(&r[13])?,
        counters: MessageCounters {
            timeouts: int32(&r[14])?,
            releases: int32(&r[15])?,
            buries: int32(&r[16])?,
            kicks: int32(&r[17])?,
        },
    })
}

/// The record's flow key (`''`: none).
fn flow_key(v: &Value) -> BrokerResult<Option<FlowKey>> {
    match text(v)? {
        "" => Ok(None),
        key => FlowKey::new(key).map(Some).map_err(|_| corrupt("flow key")),
    }
}

/// A leased record as a delivery.
pub(crate) fn delivery(queue: &QueueName, r: &[Value]) -> BrokerResult<Delivery> {
    let lease_id = LeaseId(text(&r[12])?.to_owned());
    let m = message(queue, r)?;
    Ok(Delivery {
        key: m.key,
        queue: m.queue,
        id: m.id,
        seq: m.seq,
        lease_id,
        lease_until: m.lease_until.ok_or_else(|| corrupt("lease_until"))?,
        attempt: m.attempts,
        deliver_at: m.deliver_at,
        priority: m.priority,
        headers: m.headers,
        payload: m.payload,
    })
}

pub(crate) fn deliveries(queue: &QueueName, values: &[Value]) -> BrokerResult<Vec<Delivery>> {
    if !values.chunks_exact(RECORD_LEN).remainder().is_empty() {
        return Err(corrupt("record length"));
    }
    values
        .chunks(RECORD_LEN)
        .map(|r| delivery(queue, r))
        .collect()
}
