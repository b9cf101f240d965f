//! Runs scripts/beanstalk-interop.py (the greenstalk client from PyPI)
//! against a listener on 127.0.0.1:0. Needs python3 with greenstalk
//! (`pip install greenstalk`); a missing one fails the test, never skips it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
use delayd_core::testkit::ModelBroker;
use delayd_core::Broker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_client_sees_beanstalkd_behaviour() {
    run_interop_script(Arc::new(ModelBroker::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_client_over_local_broker() {
    let dir = tempfile::tempdir().unwrap();
    let config = delayd_local::LocalConfig::new(dir.path());
    let broker = delayd_local::LocalBroker::open(config).await.unwrap();
    run_interop_script(Arc::new(broker)).await;
}

async fn run_interop_script(broker: Arc<dyn Broker>) {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = BeanstalkServer::bind(addr, broker, BeanstalkConfig::default())
        .await
        .unwrap();
    let port = server.local_addr().port();
    tokio::spawn(server.run(std::future::pending()));

    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/beanstalk-interop.py");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(&script)
            .arg("127.0.0.1")
            .arg(port.to_string())
            .output()
    })
    .await
    .unwrap()
    .expect("python3 must be installed to run the greenstalk interop test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "interop script failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
