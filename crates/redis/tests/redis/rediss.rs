//! `rediss://`: a redis-server with TLS on, its certificate signed by a CA
//! made inside the test (rcgen). A broker that trusts that CA
//! (`RedisConfig::tls_ca`) enqueues, leases and acks over TLS; one that
//! trusts only the system's roots refuses the server.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use crate::support::{config, free_port, unique_prefix, RedisServer};
use delayd_core::{
    Broker, EnqueueOptions, EnqueueRequest, LeaseRequest, MessageId, QueueName, Schedule,
};
use delayd_redis::{RedisBroker, RedisBrokerError};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};

/// A CA and a server certificate for 127.0.0.1 signed by it, written as
/// PEM files into `dir`. Returns the CA's PEM.
fn write_certificates(dir: &Path) -> Vec<u8> {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "delayd test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");

    let key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let cert = params.signed_by(&key, &ca, &ca_key).expect("server cert");

    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write ca");
    std::fs::write(dir.join("server.pem"), cert.pem()).expect("write cert");
    std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("write key");
    ca.pem().into_bytes()
}

/// redis-server with its plain port (for the support code's PING) and a
/// TLS port; clients need no certificate of their own.
fn tls_server(dir: &Path) -> (RedisServer, u16) {
    let tls_port = free_port();
    let path = |name: &str| dir.join(name).to_str().expect("utf-8 path").to_owned();
    let (cert, key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let port = tls_port.to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    (server, tls_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_the_test_ca_enqueues_leases_and_acks() {
    let certs = tempfile::tempdir().expect("tempdir");
    let ca = write_certificates(certs.path());
    let (_server, tls_port) = tls_server(certs.path());

    let mut redis = config(
        vec![format!("rediss://127.0.0.1:{tls_port}")],
        1,
        &unique_prefix(),
    );
    redis.tls_ca = Some(ca);
    let broker = RedisBroker::connect(redis).await.expect("connect over TLS");

    let q = QueueName::new("tls").expect("name");
    let request = EnqueueRequest {
        id: Some(MessageId::new("m1").expect("id")),
        schedule: Schedule::Now,
        payload: b"over tls".to_vec(),
        ..Default::default()
    };
    let enqueued = broker
        .enqueue(&q, vec![request], EnqueueOptions::default())
        .await
        .expect("enqueue");
    assert!(enqueued[0].is_ok(), "{enqueued:?}");
    let leased = broker
        .lease(
            std::slice::from_ref(&q),
            LeaseRequest {
                max: 1,
                wait_ms: 2_000,
                lease_ms: Some(30_000),
            },
        )
        .await
        .expect("lease");
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].payload, b"over tls");
    broker
        .ack(&q, &leased[0].id, &leased[0].lease_id)
        .await
        .expect("ack");
    assert_eq!(broker.get_queue(&q).await.expect("queue").stats.ready, 0);
    broker.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_refuses_a_server_whose_ca_is_not_trusted() {
    let certs = tempfile::tempdir().expect("tempdir");
    write_certificates(certs.path());
    let (_server, tls_port) = tls_server(certs.path());

    // No tls_ca: only the system's roots, which never signed the test CA.
    let redis = config(
        vec![format!("rediss://127.0.0.1:{tls_port}")],
        1,
        &unique_prefix(),
    );
    let refused = RedisBroker::connect(redis).await;
    assert!(
        matches!(refused, Err(RedisBrokerError::Connect(_))),
        "{:?}",
        refused.err()
    );
}
