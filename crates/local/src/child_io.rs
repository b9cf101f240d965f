//! What the crash-test children (`src/bin/delayd-local-*child.rs`) share:
//! their report lines and their enqueue. Included by each child with
//! `#[path]`; not part of the library.

use std::io::Write;

use delayd_core::{Broker, EnqueueOptions, EnqueueOutcome, EnqueueRequest, MessageId, QueueName};
use delayd_local::LocalBroker;

/// Prints one report line, flushed at once (the parent reads up to the
/// kill).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout means the parent is gone; nothing left to report to.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// Enqueues message `i` with `id`, due now; its outcome, or `None` when
/// the call failed (the worker goes on with the next).
pub async fn enqueue(
    broker: &LocalBroker,
    queue: &QueueName,
    id: &MessageId,
    i: u64,
) -> Option<EnqueueOutcome> {
    let request = EnqueueRequest {
        id: Some(id.clone()),
        payload: format!("payload {i}").into_bytes(),
        ..EnqueueRequest::default()
    };
    let results = broker
        .enqueue(queue, vec![request], EnqueueOptions::default())
        .await
        .ok()?;
    results.into_iter().next()?.ok()
}
