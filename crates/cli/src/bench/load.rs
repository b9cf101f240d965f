//! The producer and consumer tasks of the bench. Both are bounded: producers
//! by the message count and the production deadline, consumers by the stop
//! signal the orchestrator sends once everything arrived or the drain
//! period ran out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use delayd_client::{AckItem, Client, Enqueued, LeaseOptions, Leased, NewMessage};
use indicatif::ProgressBar;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

use crate::bench::tally::{parse_seq, payload, Received, Tally};
use crate::duration::now_ms;

/// How long one lease call may wait on the server. Short enough that a
/// consumer notices the stop signal promptly even without cancelling.
const LEASE_WAIT_MS: u64 = 1_000;
/// Pause after a failed lease call, so a broken server is not hammered.
const LEASE_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// What every task needs to know about the run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub queue: String,
    pub messages: u64,
    pub batch: u64,
    pub lease_max: u32,
    /// Ack each lease's messages with one `POST .../acks`.
    pub ack_batch: bool,
    pub payload_size: usize,
    /// Message `seq` gets the flow key `k{seq % keys}`; `None`: no keys.
    pub keys: Option<u64>,
    pub delay_min_ms: u64,
    pub delay_max_ms: u64,
    /// `--due-together`: every message's `deliver_at` (ms since the epoch).
    pub due_together_ms: Option<u64>,
    /// Total messages per second; `None` = as fast as possible.
    pub rate: Option<f64>,
    pub start: Instant,
    /// Producers start no request after this (one in flight is awaited).
    pub produce_end: Instant,
}

/// State shared by producers, consumers and the orchestrator. The client
/// is not here: each task is handed its own (`--connections`).
pub struct Shared {
    pub plan: Plan,
    pub tally: Mutex<Tally>,
    pub progress: ProgressBar,
    /// Woken after each consumer batch, so the orchestrator can check
    /// whether everything arrived without polling.
    pub delivered: Notify,
    /// When the last ack answered (ms since the epoch).
    pub last_acked_ms: AtomicU64,
    next_seq: AtomicU64,
}

impl Shared {
    pub fn new(plan: Plan, tally: Tally, progress: ProgressBar) -> Self {
        Self {
            plan,
            tally: Mutex::new(tally),
            progress,
            delivered: Notify::new(),
            last_acked_ms: AtomicU64::new(0),
            next_seq: AtomicU64::new(0),
        }
    }

    /// The tally; a panic in another task while holding it cannot make the
    /// counts unreadable, so poisoning is ignored.
    pub fn tally(&self) -> MutexGuard<'_, Tally> {
        self.tally
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether producers handed out every sequence number.
    pub fn all_claimed(&self) -> bool {
        self.next_seq.load(Ordering::SeqCst) >= self.plan.messages
    }
}

pub async fn produce(shared: Arc<Shared>, client: Client) {
    let plan = &shared.plan;
    loop {
        let first = shared.next_seq.fetch_add(plan.batch, Ordering::SeqCst);
        if first >= plan.messages {
            break;
        }
        let last = (first + plan.batch).min(plan.messages);
        if let Some(rate) = plan.rate {
            let due = plan.start + Duration::from_secs_f64(first as f64 / rate);
            sleep_until(due.min(plan.produce_end)).await;
        }
        if Instant::now() >= plan.produce_end {
            // Not sent: neither enqueued nor an error.
            break;
        }
        let messages: Vec<NewMessage> = (first..last).map(|seq| new_message(plan, seq)).collect();
        // A request sent before the deadline gets its answer (bounded by
        // the client's request timeout). Cutting it off at the deadline
        // would count a batch the server applied as failed.
        let results = send(&client, plan, &messages).await;
        record_enqueued(&shared, first, results);
    }
}

fn new_message(plan: &Plan, seq: u64) -> NewMessage {
    let message = NewMessage::new(payload(seq, plan.payload_size));
    let message = match plan.due_together_ms {
        Some(at) => message.deliver_at(at),
        None => message.delay_ms(rand::random_range(plan.delay_min_ms..=plan.delay_max_ms)),
    };
    match plan.keys {
        Some(keys) => message.key(format!("k{}", seq % keys)),
        None => message,
    }
}

/// One request: a single enqueue when `--batch 1`, else the batch endpoint.
/// `None` for each message that was not enqueued.
async fn send(client: &Client, plan: &Plan, messages: &[NewMessage]) -> Vec<Option<Enqueued>> {
    if let [message] = messages {
        return vec![client.enqueue(&plan.queue, message).await.ok()];
    }
    match client.enqueue_batch(&plan.queue, messages).await {
        Ok(results) => results.into_iter().map(Result::ok).collect(),
        Err(_) => vec![None; messages.len()],
    }
}

fn record_enqueued(shared: &Shared, first: u64, results: Vec<Option<Enqueued>>) {
    let mut tally = shared.tally();
    for (seq, result) in (first..).zip(results) {
        match result {
            Some(done) => tally.enqueued(seq, done.deliver_at),
            None => tally.enqueue_errors += 1,
        }
    }
    shared
        .progress
        .set_message(format!("enqueued {}", tally.enqueued_count));
}

pub async fn consume(shared: Arc<Shared>, client: Client, mut stop: watch::Receiver<bool>) {
    let options = LeaseOptions {
        max: shared.plan.lease_max,
        wait_ms: LEASE_WAIT_MS,
        lease_ms: None,
    };
    while !*stop.borrow_and_update() {
        let lease = client.lease(&shared.plan.queue, options);
        let leased = tokio::select! {
            leased = lease => leased,
            _ = stop.changed() => break,
        };
        match leased {
            Ok(messages) => handle_batch(&shared, &client, messages).await,
            Err(_) => {
                shared.tally().lease_errors += 1;
                tokio::select! {
                    () = tokio::time::sleep(LEASE_ERROR_BACKOFF) => {}
                    _ = stop.changed() => break,
                }
            }
        }
    }
}

/// Records a batch (receive time taken once, as the answer arrived), then
/// acks every message concurrently.
async fn handle_batch(shared: &Arc<Shared>, client: &Client, messages: Vec<Leased>) {
    if messages.is_empty() {
        return;
    }
    let received_at = now_ms();
    {
        let mut tally = shared.tally();
        for message in &messages {
            match parse_seq(message.payload.as_bytes()) {
                Some(seq) => tally.received(Received {
                    seq,
                    attempt: message.attempt,
                    deliver_at: message.deliver_at,
                    received_at,
                }),
                None => tally.foreign += 1,
            }
        }
        shared.progress.set_position(tally.delivered_unique);
    }
    let acks = ack_all(shared, client, messages).await;
    shared.last_acked_ms.fetch_max(now_ms(), Ordering::SeqCst);
    shared.tally().ack_errors += acks;
    shared.delivered.notify_one();
}

/// Acks concurrently (on the consumer's own client, so with `--http2` as
/// streams of its connection), or in one batch request with
/// `--ack-batch`; returns how many acks failed.
async fn ack_all(shared: &Arc<Shared>, client: &Client, messages: Vec<Leased>) -> u64 {
    if shared.plan.ack_batch {
        let items: Vec<AckItem> = messages
            .iter()
            .map(|m| AckItem {
                id: m.id.clone(),
                lease_id: m.lease_id.clone(),
            })
            .collect();
        return match client.ack_many(&shared.plan.queue, &items).await {
            Ok(results) => results.iter().filter(|r| r.is_err()).count() as u64,
            Err(_) => items.len() as u64,
        };
    }
    let mut acks = JoinSet::new();
    for message in messages {
        let shared = Arc::clone(shared);
        let client = client.clone();
        acks.spawn(async move {
            let queue = &shared.plan.queue;
            client.ack(queue, &message.id, &message.lease_id).await
        });
    }
    let mut failed = 0;
    while let Some(joined) = acks.join_next().await {
        let ok = matches!(joined, Ok(Ok(())));
        if !ok {
            failed += 1;
        }
    }
    failed
}
