//! The explorer's random steps: one broker call each (or a clock move),
//! recorded into the explorer's record of what was acknowledged and into
//! its history (record.rs).

use std::collections::VecDeque;

use delayd_core::{
    Broker, BrokerError, EnqueueOptions, LeaseRequest, Nack, PipelinedCall, PipelinedResult,
    QueueConfigPatch, Redrive, Reschedule, Schedule,
};
use rand::Rng;

use super::record::{outcome, LeaseCallKind};
use super::{definition, id, queue, sid, unavailable, Explorer, Known, IDS};

/// The explore queue's config after a `put_queue` (`max_attempts` is all
/// the explorer changes), as a history line.
pub(super) fn record_config<T>(
    ex: &mut Explorer,
    at: delayd_history::Span,
    r: &delayd_core::BrokerResult<T>,
    max_attempts: u32,
) {
    ex.answered(at, outcome(r));
    ex.history.push(delayd_history::Op::QueueConfig(
        delayd_history::QueueConfig {
            invoke: at.invoke,
            complete: at.complete,
            queue: queue().as_str().into(),
            outcome: outcome(r),
            max_attempts: Some(max_attempts),
            retry: Some(delayd_history::Retry {
                initial_ms: 100,
                max_ms: 100,
                multiplier: 1.0,
            }),
            flow: None,
        },
    ));
}

pub(super) async fn step(ex: &mut Explorer) {
    let roll = ex.rng.random_range(0..100);
    match roll {
        0..=13 => enqueue(ex, 1).await,
        14..=18 => {
            let n = ex.rng.random_range(2..4);
            enqueue(ex, n).await;
        }
        19..=31 => lease(ex).await,
        32..=40 => ack(ex).await,
        41..=44 => ack_many(ex).await,
        45..=49 => nack(ex).await,
        50..=52 => extend(ex).await,
        53..=55 => bury(ex).await,
        56..=59 => cancel(ex).await,
        60..=63 => reschedule(ex).await,
        64..=66 => redrive(ex).await,
        67..=70 => pipeline(ex).await,
        71..=74 => queue_call(ex).await,
        75..=80 => schedule_call(ex).await,
        81..=84 => get(ex).await,
        _ => advance(ex).await,
    }
}

async fn enqueue(ex: &mut Explorer, n: usize) {
    let mut ids: Vec<usize> = (0..n).map(|_| ex.rng.random_range(0..IDS)).collect();
    ids.sort_unstable();
    ids.dedup();
    let (requests, due): (Vec<_>, Vec<_>) = ids.iter().map(|i| ex.request(*i)).unzip();
    let invoke = ex.now();
    let r = ex
        .broker
        .enqueue(&queue(), requests, EnqueueOptions::default())
        .await;
    let at = ex.span(invoke);
    ex.log.push(format!("enqueue {ids:?}: {}", brief(&r)));
    let items: Vec<_> = ids
        .iter()
        .zip(due)
        .map(|(i, d)| (id(*i), d, None))
        .collect();
    ex.rec_enqueue(&queue(), at, &items, &r);
    ex.record_enqueued(&ids, &r);
}

async fn lease(ex: &mut Explorer) {
    let request = LeaseRequest {
        max: ex.rng.random_range(1..4),
        wait_ms: 0,
        lease_ms: None,
    };
    let invoke = ex.now();
    let r = ex.broker.lease(&[queue()], request).await;
    let at = ex.span(invoke);
    ex.rec_leased(&queue(), at, &r);
    let got = r.as_ref().map(|v| {
        v.iter()
            .map(|d| d.id.as_str().to_string())
            .collect::<Vec<_>>()
    });
    ex.log.push(format!("lease: {got:?}"));
    ex.record_leased(&r);
}

async fn ack(ex: &mut Explorer) {
    let Some((i, lease)) = ex.held() else { return };
    let invoke = ex.now();
    let r = ex.broker.ack(&queue(), &id(i), &lease).await;
    let at = ex.span(invoke);
    ex.rec_lease_call(LeaseCallKind::Ack, &queue(), (&id(i), &lease), at, &r);
    ex.log.push(format!("ack m{i}: {}", brief(&r)));
    ex.leases.remove(&i);
    ex.record_removed(i, &r);
}

async fn ack_many(ex: &mut Explorer) {
    let mut acks = Vec::new();
    while let Some((i, lease)) = ex.held() {
        ex.leases.remove(&i);
        acks.push((i, lease));
        if ex.rng.random_bool(0.3) {
            break;
        }
    }
    let calls = acks.iter().map(|(i, l)| (id(*i), l.clone())).collect();
    let invoke = ex.now();
    let r = ex.broker.ack_many(&queue(), calls).await;
    let at = ex.span(invoke);
    for (n, (i, lease)) in acks.iter().enumerate() {
        let one = match &r {
            Ok(each) => each.get(n).cloned().unwrap_or(Ok(())),
            Err(e) => Err(e.clone()),
        };
        ex.rec_lease_call(LeaseCallKind::Ack, &queue(), (&id(*i), lease), at, &one);
    }
    ex.log.push(format!(
        "ack_many {:?}: {}",
        acks.iter().map(|a| a.0).collect::<Vec<_>>(),
        brief(&r)
    ));
    match &r {
        Ok(each) => {
            for ((i, _), one) in acks.iter().zip(each) {
                ex.record_removed(*i, one);
            }
        }
        Err(BrokerError::Unavailable { .. }) => {
            acks.iter().for_each(|(i, _)| ex.mark(*i, Known::Unknown))
        }
        Err(_) => {}
    }
}

async fn nack(ex: &mut Explorer) {
    let Some((i, lease)) = ex.held() else { return };
    let delay = ex.rng.random_bool(0.5).then(|| ex.delay());
    let nack = Nack {
        delay_ms: delay,
        ..Nack::default()
    };
    let invoke = ex.now();
    let r = ex.broker.nack(&queue(), &id(i), &lease, nack).await;
    let at = ex.span(invoke);
    let kind = LeaseCallKind::Nack {
        defer: false,
        delay_ms: delay,
    };
    ex.rec_lease_call(kind, &queue(), (&id(i), &lease), at, &r);
    ex.log.push(format!("nack m{i} {delay:?}: {}", brief(&r)));
    ex.leases.remove(&i);
    let not_before = ex.now() + delay.unwrap_or(0);
    ex.record_kept(i, &r, not_before);
}

async fn extend(ex: &mut Explorer) {
    let Some((i, lease)) = ex.held() else { return };
    let invoke = ex.now();
    let r = ex
        .broker
        .extend(&queue(), &id(i), &lease, Some(30_000))
        .await;
    let at = ex.span(invoke);
    let lease_until = r.as_ref().ok().copied();
    ex.rec_lease_call(
        LeaseCallKind::Extend { lease_until },
        &queue(),
        (&id(i), &lease),
        at,
        &r,
    );
    ex.log.push(format!("extend m{i}: {}", brief(&r)));
    ex.record_kept(i, &r, 0);
}

async fn bury(ex: &mut Explorer) {
    let Some((i, lease)) = ex.held() else { return };
    let invoke = ex.now();
    let r = ex.broker.bury(&queue(), &id(i), &lease, None).await;
    let at = ex.span(invoke);
    ex.rec_lease_call(LeaseCallKind::Bury, &queue(), (&id(i), &lease), at, &r);
    ex.log.push(format!("bury m{i}: {}", brief(&r)));
    ex.leases.remove(&i);
    ex.record_kept(i, &r, 0);
}

async fn cancel(ex: &mut Explorer) {
    let i = ex.rng.random_range(0..IDS);
    let invoke = ex.now();
    let r = ex.broker.cancel(&queue(), &id(i)).await;
    let at = ex.span(invoke);
    ex.rec_cancel(&queue(), &id(i), at, &r);
    ex.log.push(format!("cancel m{i}: {}", brief(&r)));
    ex.record_removed(i, &r);
}

async fn reschedule(ex: &mut Explorer) {
    let i = ex.rng.random_range(0..IDS);
    let delay = ex.delay();
    let change = Reschedule {
        schedule: Some(Schedule::Delay(delay)),
        priority: None,
    };
    let invoke = ex.now();
    let r = ex.broker.reschedule(&queue(), &id(i), change).await;
    let at = ex.span(invoke);
    ex.rec_reschedule(&queue(), &id(i), invoke + delay, at, &r);
    ex.log
        .push(format!("reschedule m{i} +{delay}: {}", brief(&r)));
    let not_before = ex.now() + delay;
    ex.record_kept(i, &r, not_before);
}

async fn redrive(ex: &mut Explorer) {
    let invoke = ex.now();
    let r = ex.broker.redrive(&queue(), Redrive::All).await;
    let at = ex.span(invoke);
    ex.rec_queue_call(&queue(), false, at, &r);
    ex.log.push(format!("redrive: {}", brief(&r)));
    if unavailable(&r) {
        ex.all_unknown();
    } else if r.is_ok() {
        for k in &mut ex.known {
            if let Known::Present { not_before } = k {
                *not_before = 0;
            }
        }
    }
}

async fn pipeline(ex: &mut Explorer) {
    let q = queue();
    let i = ex.rng.random_range(0..IDS);
    let (request, due) = ex.request(i);
    let mut calls = VecDeque::from([PipelinedCall::Enqueue {
        queue: q.clone(),
        messages: vec![request],
        options: EnqueueOptions::default(),
    }]);
    let held = ex.held();
    if let Some((h, lease)) = &held {
        ex.leases.remove(h);
        calls.push_back(PipelinedCall::Ack {
            queue: q.clone(),
            id: id(*h),
            lease: lease.clone(),
        });
    }
    calls.push_back(PipelinedCall::Lease {
        queues: vec![q.clone()],
        max: 1,
        lease_ms: None,
    });
    let invoke = ex.now();
    let results = ex.broker.pipeline(&mut calls).await;
    let at = ex.span(invoke);
    ex.log.push(format!(
        "pipeline enqueue m{i}, ack {:?}, lease: {results:?}",
        held.as_ref().map(|h| h.0)
    ));
    for result in &results {
        match result {
            PipelinedResult::Enqueued(r) => {
                ex.rec_enqueue(&q, at, &[(id(i), due, None)], r);
                ex.record_enqueued(&[i], r)
            }
            PipelinedResult::Leased(r) => {
                ex.rec_leased(&q, at, r);
                ex.record_leased(r)
            }
            PipelinedResult::Done(r) => {
                let (h, lease) = held.as_ref().expect("an ack was sent");
                ex.rec_lease_call(LeaseCallKind::Ack, &q, (&id(*h), lease), at, r);
                ex.record_removed(*h, r);
            }
            PipelinedResult::Extended(_) => {}
        }
    }
}

/// A read under faults: an error, never wrong data.
async fn get(ex: &mut Explorer) {
    let i = ex.rng.random_range(0..IDS);
    let r = ex.broker.get(&queue(), &id(i)).await;
    ex.log
        .push(format!("get m{i}: {}", brief(&r.clone().map(|m| m.state))));
    match (ex.known[i], &r) {
        (Known::Present { .. }, Err(BrokerError::MessageNotFound { .. })) => {
            panic!("get m{i}: acknowledged message not found; {:#?}", ex.log)
        }
        (Known::Gone, Ok(m)) => panic!("get m{i}: gone message found: {m:?}; {:#?}", ex.log),
        // A seq read while a failed call's change is still in memory
        // ("maybe applied", not yet healed) was never acknowledged: a
        // crash now may hand it out again.
        (Known::Present { .. }, Ok(m)) => ex.seq_seen(m.seq, &m.id),
        _ => {}
    }
}

async fn queue_call(ex: &mut Explorer) {
    let q = queue();
    match ex.rng.random_range(0..10) {
        0 => {
            let invoke = ex.now();
            let r = ex.broker.delete_queue(&q).await;
            let at = ex.span(invoke);
            ex.rec_queue_call(&q, true, at, &r);
            ex.log.push(format!("delete_queue: {}", brief(&r)));
            match &r {
                Ok(()) => {
                    ex.known.iter_mut().for_each(|k| *k = Known::Gone);
                    ex.leases.clear();
                }
                Err(BrokerError::Unavailable { .. }) => ex.all_unknown(),
                Err(_) => {}
            }
        }
        1..=3 => {
            let max_attempts = ex.rng.random_range(1..4);
            let patch = QueueConfigPatch {
                max_attempts: Some(max_attempts),
                ..QueueConfigPatch::default()
            };
            let invoke = ex.now();
            let r = ex.broker.put_queue(&q, patch).await;
            let at = ex.span(invoke);
            record_config(ex, at, &r, max_attempts);
            ex.log.push(format!("put_queue: {}", brief(&r)));
        }
        4..=6 => {
            let until = ex.rng.random_bool(0.5).then(|| ex.now() + 5_000);
            let r = ex.broker.pause(&q, until).await;
            ex.log.push(format!("pause {until:?}: {}", brief(&r)));
        }
        _ => {
            let r = ex.broker.resume(&q).await;
            ex.log.push(format!("resume: {}", brief(&r)));
        }
    }
}

async fn schedule_call(ex: &mut Explorer) {
    let q = queue();
    let s = ex.rng.random_range(0..3);
    match ex.rng.random_range(0..4) {
        0 => {
            let def = definition(ex.rng.random_range(1..30), ex.rng.random_bool(0.2));
            let r = ex
                .broker
                .put_schedule(&q, &sid(s), def, EnqueueOptions::default())
                .await;
            ex.log.push(format!("put_schedule s{s}: {}", brief(&r)));
        }
        1 => {
            let paused = ex.rng.random_bool(0.5);
            let r = ex.broker.set_schedule_paused(&q, &sid(s), paused).await;
            ex.log
                .push(format!("pause_schedule s{s} {paused}: {}", brief(&r)));
        }
        2 => {
            let r = ex.broker.delete_schedule(&q, &sid(s)).await;
            ex.log.push(format!("delete_schedule s{s}: {}", brief(&r)));
        }
        _ => {
            let r = ex.broker.trigger_schedule(&q, &sid(s)).await;
            ex.log.push(format!("trigger s{s}: {}", brief(&r)));
            if let Ok(o) = &r {
                ex.seq_seen(o.seq, &o.id);
            }
        }
    }
}

async fn advance(ex: &mut Explorer) {
    let ms = match ex.rng.random_range(0..4) {
        0 => ex.rng.random_range(100_000..4_000_000),
        _ => ex.rng.random_range(1..3_000),
    };
    ex.clock.advance(ms);
    ex.log.push(format!("advance {ms} ms"));
    // Lets the driver run now and then, so its own interleavings are
    // explored too; no check depends on whether it ran (each compares
    // only what acknowledged calls said).
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
}

fn brief<T: std::fmt::Debug>(r: &delayd_core::BrokerResult<T>) -> String {
    match r {
        Ok(v) => {
            let s = format!("{v:?}");
            s.chars().take(120).collect()
        }
        Err(e) => format!("error {}: {e}", e.code()),
    }
}
