//! Golden examples: every JSON example in docs/api.md's "JSON shapes"
//! section is parsed into the type its marker names and serialized again,
//! and must come back equal (as a `serde_json::Value`: same fields, same
//! values). The examples are read from the doc itself, not from a copy,
//! so the doc and the types cannot drift apart; and every body type must
//! have at least one example.

use std::collections::BTreeSet;
use std::path::Path;

use delayd_api::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The doc this crate's types are checked against.
const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");
/// An example is a ```json block right after a line `<!-- wire: Type -->`.
const MARKER: &str = "<!-- wire: ";

/// Parses `json` as `T` and serializes it again.
fn round_trip<T: DeserializeOwned + Serialize>(json: &Value) -> Result<Value, String> {
    let parsed: T = serde_json::from_value(json.clone()).map_err(|err| err.to_string())?;
    serde_json::to_value(&parsed).map_err(|err| err.to_string())
}

type RoundTrip = fn(&Value) -> Result<Value, String>;

/// Every type an example may name; each must be named at least once.
fn types() -> Vec<(&'static str, RoundTrip)> {
    vec![
        ("QueuePutBody", round_trip::<QueuePutBody>),
        ("Queue", round_trip::<Queue>),
        ("QueueList", round_trip::<QueueList>),
        ("EnqueueBody", round_trip::<EnqueueBody>),
        ("Enqueued", round_trip::<Enqueued>),
        ("BatchBody", round_trip::<BatchBody>),
        ("BatchResults", round_trip::<BatchResults>),
        ("Message", round_trip::<Message>),
        ("PatchBody", round_trip::<PatchBody>),
        ("LeaseBody", round_trip::<LeaseBody>),
        ("LeasedList", round_trip::<LeasedList>),
        ("AckBody", round_trip::<AckBody>),
        ("AcksBody", round_trip::<AcksBody>),
        ("AckResults", round_trip::<AckResults>),
        ("NackBody", round_trip::<NackBody>),
        ("ExtendBody", round_trip::<ExtendBody>),
        ("Extended", round_trip::<Extended>),
        ("MessageList", round_trip::<MessageList>),
        ("RedriveBody", round_trip::<RedriveBody>),
        ("Redriven", round_trip::<Redriven>),
        ("ErrorBody", round_trip::<ErrorBody>),
        ("Status", round_trip::<Status>),
        ("Histogram", round_trip::<Histogram>),
        ("SchedulePutBody", round_trip::<SchedulePutBody>),
        ("Schedule", round_trip::<Schedule>),
        ("ScheduleList", round_trip::<ScheduleList>),
        ("PreviewBody", round_trip::<PreviewBody>),
        ("Preview", round_trip::<Preview>),
        ("KeyInfo", round_trip::<KeyInfo>),
        ("History", round_trip::<History>),
    ]
}

/// `(line number, type name, JSON text)` of every marked example.
fn examples(doc: &str) -> Vec<(usize, String, String)> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix(MARKER) else {
            continue;
        };
        let name = rest.trim_end_matches("-->").trim().to_owned();
        assert_eq!(
            lines.get(at + 1).map(|l| l.trim()),
            Some("```json"),
            "docs/api.md:{}: a marker must be followed by a ```json block",
            at + 1
        );
        let body: Vec<&str> = lines[at + 2..]
            .iter()
            .take_while(|l| l.trim() != "```")
            .copied()
            .collect();
        found.push((at + 1, name, body.join("\n")));
    }
    found
}

#[test]
fn doc_examples_round_trip_through_their_types() {
    let doc = std::fs::read_to_string(Path::new(DOC)).expect("read docs/api.md");
    let types = types();
    let mut seen = BTreeSet::new();
    for (line, name, text) in examples(&doc) {
        let json: Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("docs/api.md:{line}: {name}: not JSON: {err}"));
        let (_, check) = types
            .iter()
            .find(|(known, _)| *known == name)
            .unwrap_or_else(|| panic!("docs/api.md:{line}: unknown type {name}"));
        let again = check(&json).unwrap_or_else(|err| panic!("docs/api.md:{line}: {name}: {err}"));
        assert_eq!(
            again, json,
            "docs/api.md:{line}: {name} changed in a round trip"
        );
        seen.insert(name);
    }
    let missing: Vec<&str> = types
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !seen.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md has no example of {missing:?}"
    );
}

/// Request bodies refuse what a typo would make of them; responses read
/// fields a newer server adds.
#[test]
fn requests_are_strict_and_responses_tolerant() {
    let typo = serde_json::json!({"lease_id": "l", "dealy_ms": 5});
    assert!(serde_json::from_value::<NackBody>(typo).is_err());
    let inner_typo = serde_json::json!({"retry": {"intial_ms": 5}});
    assert!(serde_json::from_value::<QueuePutBody>(inner_typo).is_err());
    let flow_typo = serde_json::json!({"flow": {"rate": {"limit": 1, "period_ms": 1, "brust": 2}}});
    assert!(serde_json::from_value::<QueuePutBody>(flow_typo).is_err());
    let defer_typo = serde_json::json!({"lease_id": "l", "defered": true});
    assert!(serde_json::from_value::<NackBody>(defer_typo).is_err());
    let newer = serde_json::json!({"lease_until": 5, "lease_id": "l2"});
    let extended: Extended = serde_json::from_value(newer).expect("tolerant");
    assert_eq!(extended.lease_until, 5);
}

/// `null` reads as "absent" in request bodies, as the server always took it.
#[test]
fn null_means_absent_in_requests() {
    let lease: LeaseBody =
        serde_json::from_value(serde_json::json!({"max": null, "wait_ms": null})).expect("null");
    assert_eq!(lease, LeaseBody::default());
    let retry: RetryBody =
        serde_json::from_value(serde_json::json!({"initial_ms": 10, "multiplier": null}))
            .expect("null");
    assert_eq!(
        (retry.initial_ms, retry.max_ms, retry.multiplier),
        (10, 3_600_000, 2.0)
    );
    let put: QueuePutBody =
        serde_json::from_value(serde_json::json!({"push": null})).expect("null");
    assert_eq!(put.push, Some(None));
    let absent: QueuePutBody = serde_json::from_value(serde_json::json!({})).expect("absent");
    assert_eq!(absent.push, None);
    assert_eq!(absent.flow, None);
    let no_flow: QueuePutBody =
        serde_json::from_value(serde_json::json!({"flow": null})).expect("null");
    assert_eq!(no_flow.flow, Some(None));
    let nack: NackBody =
        serde_json::from_value(serde_json::json!({"lease_id": "l", "defer": null})).expect("null");
    assert!(!nack.defer);
    let body: EnqueueBody =
        serde_json::from_value(serde_json::json!({"payload": "", "headers": null})).expect("null");
    assert!(body.headers.is_empty());
}
