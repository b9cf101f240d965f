use super::*;

fn policy(entries: &[&str]) -> PushPolicy {
    let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
    PushPolicy::new(&entries).unwrap()
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn nothing_is_allowed_by_default() {
    let p = PushPolicy::new(&[]).unwrap();
    assert!(p.is_empty());
    assert!(p.check_url("https://example.com/hook").is_err());
    assert!(p.check_url("http://127.0.0.1:8080/").is_err());
}

#[test]
fn invalid_entries_are_refused() {
    for bad in ["10.0.0.0/33", "a/b", "", "exa mple.com", "*.", "*", "-x-/8"] {
        let r = PushPolicy::new(&[bad.to_string()]);
        assert!(
            matches!(r, Err(PolicyError::InvalidEntry { .. })),
            "{bad}: {r:?}"
        );
    }
}

#[test]
fn schemes_other_than_http_are_refused() {
    let p = policy(&["example.com"]);
    assert!(p.check_url("http://example.com/").is_ok());
    assert!(p.check_url("https://example.com/").is_ok());
    for url in [
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com",
    ] {
        assert!(
            matches!(p.check_url(url), Err(PolicyError::Scheme(_))),
            "{url}"
        );
    }
    assert!(matches!(
        p.check_url("not a url"),
        Err(PolicyError::InvalidUrl { .. })
    ));
}

#[test]
fn host_patterns() {
    let p = policy(&["Example.COM.", "*.hooks.test", "localhost"]);
    assert!(p.check_url("https://example.com/x").is_ok());
    assert!(p.check_url("https://EXAMPLE.com./x").is_ok());
    assert!(p.check_url("https://www.example.com/x").is_err());
    assert!(p.check_url("https://a.hooks.test/x").is_ok());
    assert!(p.check_url("https://a.b.hooks.test/x").is_ok());
    assert!(p.check_url("https://hooks.test/x").is_err());
    assert!(p.check_url("https://evilhooks.test/x").is_err());
    assert!(p.check_url("http://localhost:9000/").is_ok());
    // A name pattern never allows an IP literal, even of that name.
    assert!(p.check_url("http://127.0.0.1:9000/").is_err());
}

#[test]
fn ip_literals_need_a_cidr() {
    let p = policy(&["10.1.0.0/16", "127.0.0.1", "::1/128"]);
    assert!(p.check_url("http://10.1.2.3/").is_ok());
    assert!(p.check_url("http://10.2.0.1/").is_err());
    assert!(p.check_url("http://127.0.0.1:1234/").is_ok());
    assert!(p.check_url("http://127.0.0.2:1234/").is_err());
    assert!(p.check_url("http://[::1]:1234/").is_ok());
    // A mapped address is judged as the IPv4 address it carries.
    assert!(p.check_url("http://[::ffff:10.1.0.9]/").is_ok());
    assert!(p.check_url("http://[::ffff:192.168.0.1]/").is_err());
    // Public IP literals are not allowed without a CIDR either.
    assert!(p.check_url("http://93.184.216.34/").is_err());
}

#[test]
fn resolved_addresses_must_be_public_unless_listed() {
    let p = policy(&["hooks.test", "10.9.0.0/16"]);
    let public = sock("93.184.216.34:443");
    let mixed = vec![sock("127.0.0.1:443"), public, sock("[fe80::1]:443")];
    assert_eq!(
        p.filter_addresses("hooks.test", mixed).unwrap(),
        vec![public]
    );
    let internal = vec![
        sock("127.0.0.1:80"),
        sock("10.0.0.1:80"),
        sock("192.168.1.1:80"),
        sock("169.254.169.254:80"),
        sock("100.64.0.1:80"),
        sock("0.0.0.0:80"),
        sock("[::1]:80"),
        sock("[fd00::1]:80"),
        sock("[::ffff:127.0.0.1]:80"),
    ];
    assert!(matches!(
        p.filter_addresses("hooks.test", internal),
        Err(PolicyError::AddressNotAllowed { .. })
    ));
    let listed = sock("10.9.3.4:80");
    assert_eq!(
        p.filter_addresses("hooks.test", vec![listed]).unwrap(),
        vec![listed]
    );
}

#[tokio::test]
async fn localhost_needs_its_addresses_listed() {
    let by_name = policy(&["localhost"]);
    assert!(by_name.check_url("http://localhost:1/").is_ok());
    let r = by_name.check_resolved("http://localhost:1/").await;
    assert!(
        matches!(r, Err(PolicyError::AddressNotAllowed { .. })),
        "{r:?}"
    );
    let with_cidr = policy(&["localhost", "127.0.0.0/8", "::1/128"]);
    let addrs = with_cidr
        .check_resolved("http://localhost:4321/")
        .await
        .unwrap();
    assert!(!addrs.is_empty());
    assert!(addrs
        .iter()
        .all(|a| a.ip().is_loopback() && a.port() == 4321));
}

#[tokio::test]
async fn ip_literals_are_not_resolved() {
    let p = policy(&["127.0.0.1/32"]);
    let addrs = p.check_resolved("http://127.0.0.1:77/x").await.unwrap();
    assert_eq!(addrs, vec![sock("127.0.0.1:77")]);
    assert!(p.check_resolved("http://127.0.0.2:77/x").await.is_err());
}
