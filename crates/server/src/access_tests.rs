use proptest::prelude::*;

use super::*;
use crate::routes::api_routes;

fn glob(text: &str) -> QueueGlob {
    QueueGlob::parse(text).expect("a valid glob")
}

#[test]
fn a_star_matches_any_run_of_characters() {
    let cases = [
        ("orders", "orders", true),
        ("orders", "orders-eu", false),
        ("orders-*", "orders-", true),
        ("orders-*", "orders-eu", true),
        ("orders-*", "orders", false),
        ("*", "", true),
        ("*", "anything/at.all", true),
        ("*-dlq", "billing-dlq", true),
        ("*-dlq", "billing-dlq-2", false),
        ("a*b*c", "abc", true),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "acb", false),
        ("ab*ba", "aba", false),
        ("ab*ba", "abba", true),
        ("team/*/jobs", "team/eu/jobs", true),
        ("team/*/jobs", "team/jobs", false),
    ];
    for (pattern, name, expected) in cases {
        assert_eq!(glob(pattern).matches(name), expected, "{pattern} vs {name}");
    }
}

/// The reference: a star tries every length, recursively.
fn reference(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| reference(rest, &name[skip..])),
        Some((c, rest)) => name.first() == Some(c) && reference(rest, &name[1..]),
    }
}

proptest! {
    #[test]
    fn matching_agrees_with_the_reference(
        pattern in "[ab*]{1,8}",
        name in "[ab]{0,10}",
    ) {
        prop_assert_eq!(glob(&pattern).matches(&name), reference(pattern.as_bytes(), name.as_bytes()));
    }
}

#[test]
fn a_scope_is_a_known_verb_and_a_glob() {
    let scope = Scope::parse("publish:orders-*").expect("valid");
    assert_eq!(scope.as_str(), "publish:orders-*");
    let all = Grant::Scoped(vec![Scope::parse("*:team-a.*").expect("valid")].into());
    for verb in ScopeVerb::ALL {
        assert!(all.allows(verb, "team-a.jobs"), "{verb:?}");
        assert!(!all.allows(verb, "team-b.jobs"), "{verb:?}");
    }
    let unknown = Scope::parse("write:orders").expect_err("unknown verb");
    assert!(unknown.contains("unknown verb \"write\""), "{unknown}");
    assert!(Scope::parse("read")
        .expect_err("no colon")
        .contains("VERB:QUEUE_GLOB"));
    assert!(
        Scope::parse("read:").is_err(),
        "an empty glob matches no queue"
    );
    assert!(Scope::parse("read:-*").is_err(), "no queue starts with -");
    assert!(Scope::parse("Read:*").is_err(), "verbs are lowercase");
}

/// The one table covers the router: a route served without an entry fails
/// here, naming it.
#[test]
fn every_served_route_has_a_need() {
    let missing: Vec<String> = api_routes()
        .iter()
        .filter(|route| route_need(&route.verb.method(), route.path).is_none())
        .map(|route| format!("{:?} {}", route.verb, route.path))
        .collect();
    assert!(
        missing.is_empty(),
        "routes without an entry in access::ROUTE_NEEDS: {missing:?}"
    );
}

/// And the table names no route that is not served (a typo would leave the
/// real route without its entry).
#[test]
fn every_need_is_of_a_served_route() {
    let served: Vec<(HttpVerb, &str)> = api_routes().iter().map(|r| (r.verb, r.path)).collect();
    let stray: Vec<_> = ROUTE_NEEDS
        .iter()
        .filter(|(verb, path, _)| !served.contains(&(*verb, *path)))
        .collect();
    assert!(stray.is_empty(), "entries of no served route: {stray:?}");
    let mut seen = std::collections::BTreeSet::new();
    for (verb, path, _) in ROUTE_NEEDS {
        assert!(
            seen.insert((*verb as usize, *path)),
            "{verb:?} {path} twice"
        );
    }
}

/// api.md's verbs, route by route (spot checks of each verb's list).
#[test]
fn each_verb_covers_the_routes_api_md_gives_it() {
    use ScopeVerb::*;
    let needs = |method: Method, route: &str| route_need(&method, route);
    let queue = |verb| Some(Need::Queue(verb));
    assert_eq!(
        needs(Method::POST, "/v1/queues/{queue}/batch"),
        queue(Publish)
    );
    assert_eq!(
        needs(Method::POST, "/v1/queues/{queue}/schedules/{id}/trigger"),
        queue(Publish)
    );
    assert_eq!(
        needs(Method::POST, "/v1/queues/{queue}/acks"),
        queue(Consume)
    );
    assert_eq!(
        needs(Method::POST, "/v1/queues/{queue}/messages/{id}/extend"),
        queue(Consume)
    );
    assert_eq!(needs(Method::GET, HISTORY_ROUTE), queue(Read));
    assert_eq!(needs(Method::HEAD, "/v1/queues/{queue}/dead"), queue(Read));
    assert_eq!(
        needs(Method::POST, "/v1/schedules/preview"),
        Some(Need::AnyQueue(Read))
    );
    assert_eq!(
        needs(Method::PATCH, "/v1/queues/{queue}/messages/{id}"),
        queue(Manage)
    );
    assert_eq!(
        needs(Method::POST, "/v1/queues/{queue}/dead/redrive"),
        queue(Manage)
    );
    assert_eq!(needs(Method::PUT, "/v1/queues/{queue}"), queue(Admin));
    assert_eq!(
        needs(Method::DELETE, "/v1/queues/{queue}/schedules/{id}"),
        queue(Admin)
    );
    assert_eq!(needs(Method::GET, "/metrics"), Some(Need::EveryQueue(Read)));
    assert_eq!(needs(Method::OPTIONS, "/v1/queues"), None);
}

fn scoped(scopes: &[&str]) -> Grant {
    Grant::Scoped(
        scopes
            .iter()
            .map(|s| Scope::parse(s).expect("valid"))
            .collect(),
    )
}

#[test]
fn a_refusal_is_403_forbidden_naming_the_verb_and_the_queue() {
    let producer = scoped(&["publish:orders-*"]);
    let enqueue = "/v1/queues/{queue}/messages";
    assert!(authorize(
        &producer,
        &Method::POST,
        enqueue,
        "/v1/queues/orders-eu/messages"
    )
    .is_ok());
    let refused = authorize(
        &producer,
        &Method::POST,
        enqueue,
        "/v1/queues/billing/messages",
    )
    .expect_err("another queue");
    assert_eq!(refused.status, axum::http::StatusCode::FORBIDDEN);
    assert_eq!(refused.code, "forbidden");
    assert!(
        refused.message.contains("publish") && refused.message.contains("\"billing\""),
        "{}",
        refused.message
    );
    let read = authorize(
        &producer,
        &Method::GET,
        "/v1/queues/{queue}/messages/{id}",
        "/v1/queues/orders-eu/messages/1",
    )
    .expect_err("publish is not read");
    assert!(
        read.message.contains("may not read on queue \"orders-eu\""),
        "{}",
        read.message
    );
    let metrics = authorize(
        &scoped(&["read:orders-*"]),
        &Method::GET,
        "/metrics",
        "/metrics",
    )
    .expect_err("read on some queues is not read:*");
    assert!(metrics.message.contains("read:*"), "{}", metrics.message);
    assert!(authorize(&scoped(&["read:*"]), &Method::GET, "/metrics", "/metrics").is_ok());
    assert!(authorize(
        &producer,
        &Method::POST,
        "/v1/schedules/preview",
        "/v1/schedules/preview"
    )
    .is_err());
    assert!(authorize(
        &scoped(&["read:x"]),
        &Method::POST,
        "/v1/schedules/preview",
        "/v1/schedules/preview"
    )
    .is_ok());
    assert!(authorize(&producer, &Method::GET, "/v1/whoami", "/v1/whoami").is_ok());
    assert!(authorize(
        &Grant::Full,
        &Method::DELETE,
        "/v1/queues/{queue}",
        "/v1/queues/x"
    )
    .is_ok());
}

/// The queue checked is the one the handler acts on: percent-decoded, so
/// `team%2Fa` is `team/a`, not a name that slips past `team/*`.
#[test]
fn the_queue_of_the_path_is_read_as_the_handlers_read_it() {
    let grant = scoped(&["consume:team/*"]);
    let lease = "/v1/queues/{queue}/leases";
    assert!(authorize(&grant, &Method::POST, lease, "/v1/queues/team%2Fa/leases").is_ok());
    assert!(authorize(&grant, &Method::POST, lease, "/v1/queues/team-a/leases").is_err());
    assert!(authorize(&grant, &Method::POST, lease, "/v1/queues/%FF/leases").is_err());
}
