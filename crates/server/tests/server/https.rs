//! HTTPS: a certificate generated here (rcgen) serves the API over TLS to a
//! client that trusts it; plain HTTP to the TLS port fails cleanly (the
//! connection is closed, nothing hangs); bad PEM is a clear error.

use crate::common;

use std::time::Duration;

use delayd_server::{ServerOptions, TlsConfig, TlsError};
use serde_json::{json, Value};

struct Generated {
    cert_pem: String,
    key_pem: String,
}

fn generate() -> Generated {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .expect("generate a certificate");
    Generated {
        cert_pem: certified.cert.pem(),
        key_pem: certified.key_pair.serialize_pem(),
    }
}

async fn https_server(generated: &Generated) -> common::Server {
    let tls = TlsConfig::from_pem(generated.cert_pem.as_bytes(), generated.key_pem.as_bytes())
        .expect("a valid certificate and key");
    let listener = common::bind().await.with_tls(tls);
    common::start_on(listener, common::model(), ServerOptions::default())
}

fn trusting(generated: &Generated, addr: std::net::SocketAddr) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(generated.cert_pem.as_bytes()).unwrap();
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root)
        .resolve("localhost", addr)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test]
async fn api_is_served_over_https_to_a_client_trusting_the_certificate() {
    let generated = generate();
    let server = https_server(&generated).await;
    let client = trusting(&generated, server.addr);
    let base = format!("https://localhost:{}", server.addr.port());

    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let enqueued = client
        .post(format!("{base}/v1/queues/tls/messages"))
        .json(&json!({"id": "m1", "payload": "over TLS"}))
        .send()
        .await
        .unwrap();
    assert_eq!(enqueued.status(), 201);
    let message: Value = client
        .get(format!("{base}/v1/queues/tls/messages/m1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(message["payload"], "over TLS");
}

#[tokio::test]
async fn plain_http_to_the_tls_port_fails_cleanly() {
    let generated = generate();
    let server = https_server(&generated).await;
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = plain
        .get(format!("http://{}/healthz", server.addr))
        .send()
        .await;
    let error = result.expect_err("plain HTTP must not be answered on the TLS port");
    assert!(!error.is_timeout(), "hung instead of failing: {error}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // A client that does not trust the certificate is refused too.
    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .resolve("localhost", server.addr)
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", server.addr.port());
    assert!(untrusting
        .get(format!("{base}/healthz"))
        .send()
        .await
        .is_err());
}

#[test]
fn bad_pem_is_a_clear_error() {
    let generated = generate();
    let other = generate();
    let key = generated.key_pem.as_bytes();
    assert!(matches!(
        TlsConfig::from_pem(b"not a certificate", key),
        Err(TlsError::NoCertificate)
    ));
    assert!(matches!(
        TlsConfig::from_pem(generated.cert_pem.as_bytes(), b"no key here"),
        Err(TlsError::BadKey(_))
    ));
    assert!(matches!(
        TlsConfig::from_pem(generated.cert_pem.as_bytes(), other.key_pem.as_bytes()),
        Err(TlsError::Rejected(_))
    ));
}
