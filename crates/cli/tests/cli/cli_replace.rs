//! Replace and debounce from the command line, end to end against a
//! `delayd serve` child process: `put --replace` and `put --debounce
//! [--debounce-max D]` change a live message (shown by `delayd message`),
//! the output says `replaced` (and `after_lease` when the message was
//! leased and the put became its successor); the combinations that make
//! no sense are usage errors naming the option.
//!
//! Due times are an hour or more away, or due at once, so no verdict
//! depends on the machine's speed.

use crate::common::{delayd_cli, expect_json, expect_ok, local_serve_args, Server};

fn start() -> (Server, tempfile::TempDir, String) {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let server = Server::start_with(&local_serve_args(dir, &[]), None, &[]);
    let url = server.url("");
    (server, data, url)
}

#[test]
fn put_replace_and_debounce() {
    let (_server, _data, url) = start();
    let first = expect_json(&delayd_cli(
        &url,
        &["put", "q", "--id", "m", "--delay", "1h", "v1", "--json"],
    ));
    assert_eq!(first["created"], true, "{first}");

    // Without --replace: unchanged.
    let same = expect_ok(&delayd_cli(&url, &["put", "q", "--id", "m", "no"]));
    assert!(same.starts_with("already live (unchanged): id m"), "{same}");

    // --replace: the text answer, then the message as stored.
    let replaced = expect_ok(&delayd_cli(
        &url,
        &["put", "q", "--id", "m", "--delay", "2h", "--replace", "v2"],
    ));
    assert!(replaced.starts_with("replaced: id m seq "), "{replaced}");
    assert!(!replaced.contains("after_lease"), "{replaced}");
    let m = expect_json(&delayd_cli(&url, &["message", "q", "m", "--json"]));
    assert_eq!(
        (&m["payload"], &m["seq"], &m["state"]),
        (
            &serde_json::json!("v2"),
            &first["seq"],
            &serde_json::json!("scheduled")
        ),
        "{m}"
    );
    assert!(
        m["deliver_at"].as_u64() > first["deliver_at"].as_u64(),
        "{m}"
    );

    // --replace --json: `replaced` present, `after_lease` absent.
    let json = expect_json(&delayd_cli(
        &url,
        &[
            "put",
            "q",
            "--id",
            "m",
            "--delay",
            "2h",
            "--replace",
            "v2b",
            "--json",
        ],
    ));
    assert_eq!(
        (&json["created"], &json["replaced"]),
        (&serde_json::json!(false), &serde_json::json!(true)),
        "{json}"
    );
    assert!(json.get("after_lease").is_none(), "{json}");

    // --debounce capped at the enqueue time: due at once.
    let debounced = expect_json(&delayd_cli(
        &url,
        &[
            "put",
            "q",
            "--id",
            "m",
            "--delay",
            "1h",
            "--debounce",
            "--debounce-max",
            "0s",
            "v3",
            "--json",
        ],
    ));
    assert_eq!(debounced["replaced"], true, "{debounced}");
    assert_eq!(debounced["deliver_at"], m["enqueued_at"], "{debounced}");

    // Leased: the put is its successor; the leased message is unchanged.
    let leased = expect_json(&delayd_cli(&url, &["get", "q", "--lease", "1h", "--json"]));
    assert_eq!(leased["messages"][0]["payload"], "v3", "{leased}");
    let successor = expect_ok(&delayd_cli(
        &url,
        &["put", "q", "--id", "m", "--delay", "1h", "--replace", "v4"],
    ));
    assert!(successor.starts_with("replaced after_lease"), "{successor}");
    let json = expect_json(&delayd_cli(
        &url,
        &[
            "put",
            "q",
            "--id",
            "m",
            "--delay",
            "1h",
            "--debounce",
            "v5",
            "--json",
        ],
    ));
    assert_eq!(
        (&json["replaced"], &json["after_lease"]),
        (&serde_json::json!(true), &serde_json::json!(true)),
        "{json}"
    );
    let m = expect_json(&delayd_cli(&url, &["message", "q", "m", "--json"]));
    assert_eq!(
        (&m["state"], &m["payload"]),
        (&serde_json::json!("leased"), &serde_json::json!("v3")),
        "{m}"
    );
}

#[test]
fn put_conflict_options_that_make_no_sense() {
    // Usage errors: exit 2 before any request (no server is needed).
    let url = "http://127.0.0.1:9";
    for (args, names) in [
        (
            &["put", "q", "--id", "m", "--debounce-max", "5m", "x"][..],
            "--debounce",
        ),
        (&["put", "q", "--replace", "x"][..], "--id"),
        (&["put", "q", "--debounce", "x"][..], "--id"),
        (
            &["put", "q", "--id", "m", "--replace", "--debounce", "x"][..],
            "--debounce",
        ),
        (
            &[
                "put",
                "q",
                "--id",
                "m",
                "--debounce",
                "--debounce-max",
                "5",
                "x",
            ][..],
            "--debounce-max",
        ),
    ] {
        let out = delayd_cli(url, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?} names {names}: {stderr}");
    }
}
