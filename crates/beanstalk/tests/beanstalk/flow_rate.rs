//! A tube whose queue has `flow.rate` (api.md, "Flow control": the
//! beanstalkd protocol has no keys, so a tube's queue-wide limits apply to
//! `reserve`): with `{limit: 1, period_ms: 1000}` one job is handed out,
//! then `reserve-with-timeout 0` answers `TIMED_OUT` while the second job
//! stays ready. Over the model and LocalBroker.

use delayd_core::{FlowConfig, QueueConfigPatch, QueueName, Rate};

use crate::common::{start, start_local, Client, TestServer};

async fn one_job_then_timed_out(server: TestServer) {
    let flow = FlowConfig {
        rate: Some(Rate {
            limit: 1,
            period_ms: 1_000,
            burst: 1,
        }),
        ..FlowConfig::default()
    };
    let patch = QueueConfigPatch {
        flow: Some(Some(flow)),
        ..QueueConfigPatch::default()
    };
    let queue = QueueName::new("limited").unwrap();
    server.broker.put_queue(&queue, patch).await.unwrap();
    let mut c = Client::connect(server.addr).await;
    assert_eq!(c.cmd("use limited").await, "USING limited");
    assert_eq!(c.cmd("watch limited").await, "WATCHING 2");
    c.put(0, 0, 60, "first").await;
    let second = c.put(0, 0, 60, "second").await;
    let (_, _, body) = c.job("reserve-with-timeout 0").await.unwrap();
    assert_eq!(body, b"first");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    // Held back by the rate, not gone: still ready, never reserved.
    assert_eq!(
        c.stat(&format!("stats-job {second}"), "state").await,
        "ready"
    );
    assert_eq!(
        c.stat(&format!("stats-job {second}"), "reserves").await,
        "0"
    );
}

#[tokio::test]
async fn rate_limits_reserve_model() {
    one_job_then_timed_out(start().await).await;
}

#[tokio::test]
async fn rate_limits_reserve_local() {
    one_job_then_timed_out(start_local().await).await;
}
