//! The three background tasks of a node:
//! - the timer task sleeps until the earliest due time this node knows of
//!   and promotes that shard (so messages become ready on time without
//!   polling);
//! - the sweep task promotes every shard of every queue at least every
//!   [`SWEEP_INTERVAL`], repairing lost notifications and crashed nodes'
//!   timers, and re-arms the timers from what it finds;
//! - the pub/sub task listens for other nodes' events and reconnects.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use delayd_core::{metric, QueueName};
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::broker::Inner;
use crate::record::{int, opt_int, status, text};
use crate::scripts;

/// Upper bound on how long a lost notification can delay a delivery.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_millis(500);
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
const PUBSUB_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn spawn(inner: &Arc<Inner>) {
    tokio::spawn(timer_loop(inner.clone(), inner.stop.subscribe()));
    tokio::spawn(sweep_loop(inner.clone(), inner.stop.subscribe()));
    tokio::spawn(pubsub_loop(inner.clone(), inner.stop.subscribe()));
    tokio::spawn(unindex_loop(inner.clone(), inner.stop.subscribe()));
}

/// Drops the seq index entries of acked/cancelled messages in batches:
/// one pipelined HDEL per bucket. Best effort (lookups verify anyway).
async fn unindex_loop(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    loop {
        let seqs = std::mem::take(
            &mut *inner
                .unindex
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !seqs.is_empty() {
            let mut by_bucket: std::collections::BTreeMap<String, redis::Cmd> = Default::default();
            for seq in seqs {
                let (bucket, field) = inner.keys.seq_slot(seq);
                by_bucket
                    .entry(bucket)
                    .or_insert_with_key(|b| redis::cmd("HDEL").arg(b).clone())
                    .arg(field);
            }
            let mut pipe = redis::pipe();
            for cmd in by_bucket.into_values() {
                pipe.add_command(cmd).ignore();
            }
            let mut conn = inner.conn.clone();
            if let Err(err) = pipe.query_async::<()>(&mut conn).await {
                tracing::debug!(error = %err, "seq index cleanup failed");
            }
            continue;
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            () = inner.unindex_ready.notified() => {}
            _ = stop.changed() => {}
        }
    }
}

async fn timer_loop(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let now = inner.clock.now_ms();
        let held = inner.timers_held.load(Ordering::Relaxed);
        for (queue, shard) in if held {
            Vec::new()
        } else {
            inner.wake.take_due(now)
        } {
            // A waiting lease call promotes and pops in one script: wake one
            // now rather than after the promotion's round trip. The
            // promotion below still runs (other nodes, metrics, re-arming).
            inner.wake.ready_n(&queue, 1);
            promote_shard(&inner, &queue, shard).await;
        }
        // Wall time is re-read every round and the sleep is capped, so a
        // wall-clock jump neither fires everything at once nor stalls.
        let wait = match inner.wake.next_due() {
            Some(due) if !held => Duration::from_millis(due.saturating_sub(inner.clock.now_ms())),
            _ => SWEEP_INTERVAL,
        }
        .min(SWEEP_INTERVAL);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = inner.wake.timer_changed.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

async fn sweep_loop(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if !inner.timers_held.load(Ordering::Relaxed) {
            sweep(&inner).await;
        }
        tokio::select! {
            () = tokio::time::sleep(SWEEP_INTERVAL) => {}
            () = inner.sweep_now.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

async fn sweep(inner: &Inner) {
    let names: Vec<String> = match inner
        .query(redis::cmd("HKEYS").arg(&inner.keys.registry), false)
        .await
    {
        Ok(names) => names,
        Err(_) => return,
    };
    for name in names {
        let Ok(queue) = QueueName::new(name) else {
            continue;
        };
        for shard in 0..inner.keys.shards {
            promote_shard(inner, &queue, shard).await;
        }
    }
}

/// Most due schedule ids one promote reply lists (`promote.lua`).
const DUE_SCHEDULES_PER_PROMOTE: usize = 100;

/// Promote calls in a row while each reply lists a full page of due
/// schedules (so up to 10,000 schedules due at once are fired in one go,
/// not a page per sweep); more are left to the next sweep or timer.
const FULL_PAGES_IN_A_ROW: usize = 100;

/// Promotes one shard now, records lateness, wakes waiters and re-arms the
/// shard's timer, and fires the due schedules the reply lists; while a
/// reply lists a full page of them, promotes again at once. Failures are
/// logged: the next sweep retries.
pub(crate) async fn promote_shard(inner: &Inner, queue: &QueueName, shard: u32) {
    for _ in 0..FULL_PAGES_IN_A_ROW {
        if promote_once(inner, queue, shard).await < DUE_SCHEDULES_PER_PROMOTE {
            return;
        }
    }
}

/// One promote call and what follows it; returns how many due schedules
/// its reply listed.
async fn promote_once(inner: &Inner, queue: &QueueName, shard: u32) -> usize {
    let now = inner.clock.now_ms();
    let keys = inner.keys.shard(queue, shard);
    let reply = match inner.run(scripts::PROMOTE, &keys, now, Vec::new()).await {
        Ok(reply) => reply,
        Err(_) => return 0,
    };
    let Ok(("OK", rest)) = status(&reply) else {
        return 0;
    };
    if rest.len() < 5 {
        return 0;
    }
    let fired = &rest[5..];
    // Parked messages made ready again, slots freed (lua/flow.lua).
    let woke = usize::try_from(int(&rest[4]).unwrap_or(0)).unwrap_or(usize::MAX);
    record_lateness(queue, now, fired);
    let expired = int(&rest[2]).unwrap_or(0);
    if expired > 0 {
        metrics::counter!(metric::LEASES_EXPIRED_TOTAL, "queue" => queue.to_string())
            .increment(expired);
    }
    if let Ok(Some(due)) = opt_int(&rest[0]) {
        inner.wake.arm(queue, shard, due);
    }
    if !fired.is_empty() || expired > 0 || woke > 0 {
        // Local waiters first and directly; other nodes hear it by pub/sub.
        inner.wake.ready_n(
            queue,
            (fired.len() + woke).saturating_add(usize::try_from(expired).unwrap_or(usize::MAX)),
        );
        inner.publish_detached(format!("r {queue}"));
    } else if int(&rest[1]).unwrap_or(0) > 0 {
        inner.wake.ready(queue);
    }
    // Due schedule cursors: the racing nodes' fires are compare-and-set,
    // so every node that sees them may try; one fires each time.
    match text(&rest[3]) {
        Ok(ids) if !ids.is_empty() => inner.fire_schedules(queue, shard, ids).await,
        _ => 0,
    }
}

/// Records how late each promoted message became ready (`fired` holds
/// their `deliver_at`s; promotion happened at `now`).
pub(crate) fn record_lateness(queue: &QueueName, now: u64, fired: &[redis::Value]) {
    if fired.is_empty() {
        return;
    }
    let histogram =
        metrics::histogram!(metric::FIRE_LATENESS_SECONDS, "queue" => queue.to_string());
    let ready = metric::Lateness::of(metric::Stage::Ready);
    for deliver_at in fired {
        if let Ok(at) = int(deliver_at) {
            ready.record(now, at);
            histogram.record(now.saturating_sub(at) as f64 / 1_000.0);
        }
    }
}

async fn pubsub_loop(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    let mut next_url = 0usize;
    while !*stop.borrow() {
        let url = &inner.urls[next_url % inner.urls.len()];
        next_url += 1;
        let hold = crate::conn::TimeHold::new(inner.virtual_time);
        let subscribed = subscribe(url, inner.tls_ca.as_deref(), &inner.keys.channel).await;
        drop(hold);
        match subscribed {
            Ok(pubsub) => {
                // Events published while disconnected are lost: catch up.
                inner.sweep_now.notify_one();
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        msg = messages.next() => match msg {
                            Some(msg) => handle_event(&inner, msg.get_payload_bytes()),
                            None => break,
                        },
                        _ = stop.changed() => return,
                    }
                }
                tracing::info!("pub/sub connection lost; reconnecting");
            }
            Err(err) => tracing::debug!(error = %err, url, "pub/sub connect failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT_DELAY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Any node of a Cluster forwards PUBLISH to all nodes, so one
/// subscription (to any reachable seed) hears every node's events.
async fn subscribe(
    url: &str,
    tls_ca: Option<&[u8]>,
    channel: &str,
) -> redis::RedisResult<redis::aio::PubSub> {
    let client = crate::conn::client(url, tls_ca)?;
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    };
    match tokio::time::timeout(PUBSUB_CONNECT_TIMEOUT, connect).await {
        Ok(result) => result,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "pub/sub connect timed out",
        ))),
    }
}

/// Events: `r <queue>` (messages became ready), `d <queue> <shard> <due>`
/// (a shard's new earliest due time), `x <queue>` (queue deleted).
fn handle_event(inner: &Inner, payload: &[u8]) {
    let Ok(event) = std::str::from_utf8(payload) else {
        return;
    };
    let mut parts = event.split(' ');
    let kind = parts.next();
    // Own ready/due events were already handled in-process.
    if kind != Some("x") && event.rsplit(' ').next() == Some(inner.node_id.as_str()) {
        return;
    }
    let Some(Ok(queue)) = parts.next().map(QueueName::new) else {
        return;
    };
    match kind {
        Some("r") => inner.wake.ready(&queue),
        Some("x") => inner.wake.deleted(&queue),
        Some("d") => {
            let shard = parts.next().and_then(|s| s.parse::<u32>().ok());
            let due = parts.next().and_then(|s| s.parse::<u64>().ok());
            if let (Some(shard), Some(due)) = (shard, due) {
                if shard < inner.keys.shards {
                    inner.wake.arm(&queue, shard, due);
                }
            }
        }
        _ => {}
    }
}
