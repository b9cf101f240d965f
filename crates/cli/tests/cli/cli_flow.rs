//! Flow control from the command line, end to end against a `delayd serve`
//! child process: `queue set`'s flow options (merged into the queue's
//! current flow, `--no-flow`), `put --key`, `get` showing the key,
//! `delayd key`, `nack --defer`, and the usage errors.

use serde_json::{json, Value};

use crate::common::{delayd_cli, expect_json, expect_ok, local_serve_args, Server};

fn start() -> (Server, tempfile::TempDir, String) {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let server = Server::start_with(&local_serve_args(dir, &[]), None, &[]);
    let url = server.url("");
    (server, data, url)
}

fn flow_of(url: &str, args: &[&str]) -> Value {
    expect_json(&delayd_cli(url, &[args, &["--json"]].concat()))["config"]["flow"].clone()
}

#[test]
fn queue_set_builds_and_merges_the_flow() {
    let (_server, _data, url) = start();
    let flow = flow_of(
        &url,
        &[
            "queue",
            "set",
            "mail",
            "--rate",
            "50/1s",
            "--burst",
            "5",
            "--key-concurrency",
            "2",
        ],
    );
    assert_eq!(
        flow,
        json!({"rate": {"limit": 50, "period_ms": 1000, "burst": 5}, "key_rate": null,
               "concurrency": null, "key_concurrency": 2, "ordered": false, "max_deferrals": 100}),
    );
    // Options not given keep their value (api.md replaces flow whole).
    let flow = flow_of(
        &url,
        &[
            "queue",
            "set",
            "mail",
            "--key-rate",
            "5/s",
            "--concurrency",
            "20",
            "--max-deferrals",
            "7",
        ],
    );
    assert_eq!(
        flow["rate"],
        json!({"limit": 50, "period_ms": 1000, "burst": 5}),
        "{flow}"
    );
    assert_eq!(
        flow["key_rate"],
        json!({"limit": 5, "period_ms": 1000, "burst": 2}),
        "{flow}"
    );
    assert_eq!(
        (&flow["concurrency"], &flow["key_concurrency"]),
        (&json!(20), &json!(2))
    );
    assert_eq!(flow["max_deferrals"], 7, "{flow}");
    // Other queue options leave flow alone.
    let flow = flow_of(&url, &["queue", "set", "mail", "--max-attempts", "3"]);
    assert_eq!(flow["concurrency"], 20, "{flow}");
    // --ordered implies one slot per key, so the kept key_concurrency goes.
    let flow = flow_of(&url, &["queue", "set", "mail", "--ordered"]);
    assert_eq!(
        (&flow["ordered"], &flow["key_concurrency"]),
        (&json!(true), &Value::Null)
    );

    let text = expect_ok(&delayd_cli(&url, &["stats", "mail"]));
    assert!(
        text.contains("flow       rate 50/1s burst 5, key rate 5/1s burst 2, concurrency 20, ordered, max deferrals 7"),
        "{text}"
    );
    assert!(
        text.contains("keys       0 with state, 0 cooling down"),
        "{text}"
    );

    assert_eq!(
        flow_of(&url, &["queue", "set", "mail", "--no-flow"]),
        Value::Null
    );
    let text = expect_ok(&delayd_cli(&url, &["stats", "mail"]));
    assert!(text.contains("flow       none"), "{text}");
}

#[test]
fn bad_flow_options_are_refused() {
    let (_server, _data, url) = start();
    // Caught by the CLI: exit 2, nothing sent.
    for args in [
        &["queue", "set", "q", "--rate", "50"][..],
        &["queue", "set", "q", "--rate", "50/1"],
        &["queue", "set", "q", "--burst", "2"],
        &["queue", "set", "q", "--no-flow", "--concurrency", "2"],
    ] {
        let out = delayd_cli(&url, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Caught by the server: exit 1, the message names the field.
    let out = delayd_cli(&url, &["queue", "set", "q", "--rate", "0/1s"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("limit"), "{stderr}");
    let out = delayd_cli(
        &url,
        &["queue", "set", "q", "--ordered", "--key-concurrency", "2"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key_concurrency"));
    // A negative number is the option's value, not an unknown argument:
    // the value's check answers, naming the option and its range...
    let out = delayd_cli(&url, &["queue", "set", "q", "--key-concurrency", "-1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'-1' for '--key-concurrency <N>'")
            && stderr.contains("0..=4294967295")
            && !stderr.contains("unexpected argument"),
        "{stderr}"
    );
    // ...and where the option's type holds it, the server's rule does.
    let out = delayd_cli(&url, &["queue", "set", "q", "--retry-multiplier", "-1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("retry.multiplier must be a number >= 1.0, got -1"),
        "{stderr}"
    );
}

#[test]
fn keys_and_deferral() {
    let (_server, _data, url) = start();
    expect_ok(&delayd_cli(
        &url,
        &["queue", "set", "jobs", "--key-concurrency", "1"],
    ));
    for id in ["a1", "a2"] {
        expect_ok(&delayd_cli(
            &url,
            &["put", "jobs", "--id", id, "--key", "tenant-a", "x"],
        ));
    }
    let text = expect_ok(&delayd_cli(&url, &["get", "jobs", "--max", "10"]));
    assert!(
        text.contains("id a1") && text.contains("key tenant-a"),
        "{text}"
    );
    assert!(
        !text.contains("id a2"),
        "key_concurrency 1 holds the second: {text}"
    );
    let lease_id = text
        .split("lease_id ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a lease id")
        .to_owned();

    let key = expect_json(&delayd_cli(&url, &["key", "jobs", "tenant-a", "--json"]));
    assert_eq!(
        key,
        json!({"key": "tenant-a", "scheduled": 0, "ready": 1, "leased": 1, "dead": 0, "cooling_until": null})
    );

    let done = expect_json(&delayd_cli(
        &url,
        &[
            "nack", "jobs", "a1", &lease_id, "--defer", "--delay", "1h", "--json",
        ],
    ));
    assert_eq!(done, json!({"id": "a1", "deferred": true}));
    let message = expect_json(&delayd_cli(&url, &["get", "jobs", "--json"]));
    assert_eq!(
        message["messages"],
        json!([]),
        "the key cools down: a2 is held too"
    );
    let text = expect_ok(&delayd_cli(&url, &["key", "jobs", "tenant-a"]));
    assert!(
        text.contains("scheduled  1") && text.contains("ready      1"),
        "{text}"
    );
    assert!(
        text.contains("cooling    until ") && text.contains("(in 59m"),
        "{text}"
    );
    let other = expect_ok(&delayd_cli(&url, &["key", "jobs", "nobody"]));
    assert!(
        other.contains("scheduled  0") && other.contains("cooling    no"),
        "{other}"
    );
    let stats = expect_json(&delayd_cli(&url, &["stats", "jobs", "--json"]));
    assert_eq!(stats["stats"]["cooling_keys"], 1, "{stats}");
}

#[test]
fn defer_on_a_queue_without_flow_is_an_api_error() {
    let (_server, _data, url) = start();
    expect_ok(&delayd_cli(&url, &["put", "plain", "--id", "p", "x"]));
    let got = expect_json(&delayd_cli(&url, &["get", "plain", "--json"]));
    let lease_id = got["messages"][0]["lease_id"].as_str().expect("lease_id");
    let out = delayd_cli(&url, &["nack", "plain", "p", lease_id, "--defer"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_argument"));
}
