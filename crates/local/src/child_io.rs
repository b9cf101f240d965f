//! What the crash-test children (`src/bin/delayd-local-*child.rs`) share:
//! their report lines, their enqueue, their opening and their workers.
//! Included by each child with `#[path]`; not part of the library.

#![allow(dead_code, reason = "each child uses a part")]

use std::io::Write;

use std::future::Future;
use std::sync::Arc;

use delayd_core::{
    Broker, EnqueueOptions, EnqueueOutcome, EnqueueRequest, MessageId, QueueConfigPatch, QueueName,
};
use delayd_local::{LocalBroker, LocalConfig};

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

/// Opens the store in `dir` and puts `queue` with `patch`; exits with a
/// line on stderr when either fails (the parent reads no READY then).
pub async fn open_with_queue(
    dir: String,
    queue: &str,
    patch: QueueConfigPatch,
) -> (Arc<LocalBroker>, QueueName) {
    let broker = match LocalBroker::open(LocalConfig::new(dir)).await {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    };
    let Ok(queue) = QueueName::new(queue) else {
        std::process::exit(1);
    };
    if let Err(e) = broker.put_queue(&queue, patch).await {
        eprintln!("put_queue failed: {e}");
        std::process::exit(1);
    }
    (broker, queue)
}

/// Says READY, then runs `workers` tasks (`work(w)` for each) until the
/// kill.
pub async fn run_workers<F, Fut>(workers: usize, work: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    say("READY");
    let tasks: Vec<_> = (0..workers).map(|w| tokio::spawn(work(w))).collect();
    for task in tasks {
        let _ = task.await;
    }
}
