//! What the fault tests that talk to `delayd serve` over HTTP share to
//! record their calls as a history for the one checker (`delayd_history`):
//! the client's clock, an error answer's outcome, and a leased message as
//! a `lease` op.

use std::time::{SystemTime, UNIX_EPOCH};

use delayd_client::{ClientError, Leased};
use delayd_history::{self as history, Op, Outcome};

/// The client's clock, in ms (every time of a history is on it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// What an error answer says the call did (a transport error, a 5xx:
/// maybe applied).
pub fn outcome_of(err: &ClientError) -> Outcome {
    match (err.status(), err.code()) {
        (_, Some("lease_mismatch")) => Outcome::LeaseMismatch,
        (Some(404), _) => Outcome::NotFound,
        (Some(status), _) if status < 500 => Outcome::Error,
        _ => Outcome::Unknown,
    }
}

/// A message of `queue` handed out by a lease call invoked at `invoke` and
/// answered at `complete`, served by one of several nodes: its grant time
/// is unknown (`lease_until - lease_ms` is the node's clock read before its
/// script ran, and another node's later reading may already have made the
/// message ready).
pub fn lease_op(queue: &str, message: &Leased, invoke: u64, complete: u64) -> Op {
    Op::Lease(history::Lease {
        invoke,
        complete,
        queue: queue.into(),
        id: message.id.clone(),
        seq: message.seq,
        attempt: message.attempt,
        lease_id: message.lease_id.clone(),
        lease_until: message.lease_until,
        deliver_at: message.deliver_at,
        key: message.key.clone(),
        granted_at: None,
    })
}
