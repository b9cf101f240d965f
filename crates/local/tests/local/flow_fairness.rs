//! Fairness under `key_concurrency: 1` (issue 29): one key with 100,000
//! ready messages must not delay another key's due message by more than
//! the limits require. 100 other keys each get one message due shortly
//! after the heavy key's backlog is in; consumers lease and ack. Every
//! one of the 100 is delivered within 100 ms of its due time, and the
//! heavy key's messages come one at a time.
//!
//! On virtual time (the broker's clock and tokio's are paused together),
//! so the bound measures the broker's order of work, not the machine's
//! speed.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use delayd_core::testkit::support::{self as s, VirtualClock};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, FlowConfig, FlowKey, LeaseRequest, QueueConfigPatch,
    Schedule,
};

const HEAVY: usize = 100_000;
const LIGHT: usize = 100;

async fn broker(clock: Arc<VirtualClock>) -> Arc<dyn Broker> {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().to_path_buf();
    // Outlives the broker (cleaned up with the test's temp files).
    std::mem::forget(dir);
    crate::support::open_virtual(&path, clock).await
}

fn key(k: &str) -> FlowKey {
    FlowKey::new(k).unwrap_or_else(|e| panic!("key {k}: {e}"))
}

#[test]
fn a_heavy_key_does_not_delay_other_keys() {
    s::run_case_virtual_within(std::time::Duration::from_secs(3_600), |clock| async move {
        let b = broker(clock).await;
        let q = s::queue("flow_fairness", "q");
        let patch = QueueConfigPatch {
            flow: Some(Some(FlowConfig {
                key_concurrency: Some(1),
                ..FlowConfig::default()
            })),
            ..QueueConfigPatch::default()
        };
        s::must(b.put_queue(&q, patch).await, "put_queue");
        let heavy: Vec<EnqueueRequest> = (0..HEAVY)
            .map(|i| EnqueueRequest {
                key: Some(key("heavy")),
                ..s::req(None, Schedule::Now, &format!("h{i}"))
            })
            .collect();
        for chunk in heavy.chunks(1_000) {
            let results = s::must(
                b.enqueue(&q, chunk.to_vec(), EnqueueOptions::default())
                    .await,
                "enqueue heavy",
            );
            assert!(results.iter().all(Result::is_ok));
        }
        let due = s::now_ms() + 500;
        let light: Vec<EnqueueRequest> = (0..LIGHT)
            .map(|i| EnqueueRequest {
                key: Some(key(&format!("light-{i}"))),
                ..s::req(Some(&format!("l{i}")), Schedule::At(due), "light")
            })
            .collect();
        let results = s::must(
            b.enqueue(&q, light, EnqueueOptions::default()).await,
            "enqueue light",
        );
        assert!(results.iter().all(Result::is_ok));

        let lateness = Arc::new(Mutex::new(Vec::new()));
        let heavy_out = Arc::new(AtomicU32::new(0));
        let overlap = Arc::new(AtomicBool::new(false));
        let mut consumers = Vec::new();
        for _ in 0..4 {
            let (b, q) = (b.clone(), q.clone());
            let (lateness, heavy_out, overlap) =
                (lateness.clone(), heavy_out.clone(), overlap.clone());
            consumers.push(tokio::spawn(async move {
                let request = LeaseRequest {
                    max: 10,
                    wait_ms: 100,
                    lease_ms: None,
                };
                loop {
                    let got = s::must(
                        b.lease(std::slice::from_ref(&q), request.clone()).await,
                        "lease",
                    );
                    let at = s::now_ms();
                    for d in &got {
                        if d.key == Some(key("heavy")) {
                            if heavy_out.fetch_add(1, Ordering::SeqCst) != 0 {
                                overlap.store(true, Ordering::SeqCst);
                            }
                        } else {
                            lateness
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(at - d.deliver_at);
                        }
                    }
                    // One heavy message at a time: a consumer works a
                    // millisecond per message, then acks.
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    for d in &got {
                        if d.key == Some(key("heavy")) {
                            heavy_out.fetch_sub(1, Ordering::SeqCst);
                        }
                        s::must(b.ack(&q, &d.id, &d.lease_id).await, "ack");
                    }
                    if lateness.lock().unwrap_or_else(|e| e.into_inner()).len() == LIGHT {
                        return;
                    }
                }
            }));
        }
        for c in consumers {
            c.await.unwrap_or_else(|e| panic!("consumer: {e}"));
        }
        let lateness = lateness.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(lateness.len(), LIGHT, "every light key's message delivered");
        let worst = lateness.iter().max().copied().unwrap_or(0);
        assert!(
            worst <= 100,
            "a light key's message was delivered {worst} ms after its due time"
        );
        assert!(
            !overlap.load(Ordering::SeqCst),
            "two of the heavy key's messages were leased at once"
        );
    });
}
