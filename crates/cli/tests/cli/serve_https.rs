//! `delayd serve --tls-cert FILE --tls-key FILE`: HTTPS with a certificate
//! generated here, and start-up errors that name the file at fault.

use std::path::Path;
use std::time::Duration;

use crate::common::{local_serve_args, Server};

fn write_certificate(dir: &Path) -> (String, String, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    (path(&cert), path(&key), certified.cert.pem())
}

#[tokio::test]
async fn serves_https_with_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, cert_pem) = write_certificate(dir.path());
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let args = local_serve_args(data, &["--tls-cert", &cert, "--tls-key", &key]);
    let server = Server::start_with(&args, None, &[]);
    assert!(server.log().contains("tls=true"), "{}", server.log());

    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .resolve("localhost", server.addr)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://localhost:{}/healthz", server.addr.port());
    let response = client.get(url).send().await.expect("HTTPS request");
    assert_eq!(response.status(), 200);
    let plain = reqwest::Client::new()
        .get(server.url("/healthz"))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP answered on the TLS port");
}

#[test]
fn unreadable_or_invalid_files_fail_start_up_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = write_certificate(dir.path());
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not PEM at all").unwrap();
    let garbage = garbage.to_str().unwrap();
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();

    for (cert, key, named) in [
        (missing, key.as_str(), missing),
        (cert.as_str(), missing, missing),
        (garbage, key.as_str(), garbage),
        (cert.as_str(), garbage, garbage),
    ] {
        let args = local_serve_args(data, &["--tls-cert", cert, "--tls-key", key]);
        let log = match Server::try_start_with(&args, None, &[]) {
            Ok(server) => panic!("started with cert {cert} key {key}:\n{}", server.log()),
            Err(log) => log,
        };
        assert!(
            log.contains(named),
            "the error does not name {named}:\n{log}"
        );
    }
}
