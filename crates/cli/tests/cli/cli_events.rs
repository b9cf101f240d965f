//! `delayd events QUEUE ID` end to end against a `delayd serve` child
//! process: a message's history as a table (time, type, attempt, details)
//! and, with `--json`, the API's object; an unknown id exits 1 with
//! `message_not_found`.

use crate::common::{delayd_cli, expect_json, expect_ok, local_serve_args, Server};

#[test]
fn events_table_and_json() {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let server = Server::start_with(&local_serve_args(dir, &[]), None, &[]);
    let url = server.url("");
    expect_ok(&delayd_cli(&url, &["put", "jobs", "--id", "m", "work"]));
    let leased = expect_json(&delayd_cli(&url, &["get", "jobs", "--json"]));
    let lease_id = leased["messages"][0]["lease_id"]
        .as_str()
        .expect("a leased message")
        .to_owned();
    expect_ok(&delayd_cli(
        &url,
        &[
            "nack",
            "jobs",
            "m",
            &lease_id,
            "--delay",
            "1h",
            "--error",
            "disk full",
        ],
    ));

    let table = expect_ok(&delayd_cli(&url, &["events", "jobs", "m"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    let columns = |line: &str| {
        line.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(columns(lines[0]), "TIME TYPE ATTEMPT", "{table}");
    assert!(lines[0].ends_with("DETAILS"), "{table}");
    assert!(lines[1].starts_with("20"), "a time first: {table}");
    assert!(columns(lines[1]).ends_with("enqueued 0"), "{table}");
    assert!(columns(lines[2]).ends_with("leased 1"), "{table}");
    assert!(lines[2].contains("via=http lease_until=20"), "{table}");
    assert!(columns(lines[3]).ends_with("nacked 1"), "{table}");
    assert!(
        lines[3].ends_with("delay_ms=3600000 error=\"disk full\""),
        "{table}"
    );

    let json = expect_json(&delayd_cli(&url, &["events", "jobs", "m", "--json"]));
    assert_eq!(json["dropped"], 0, "{json}");
    let types: Vec<&str> = json["events"]
        .as_array()
        .expect("an events list")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(types, ["enqueued", "leased", "nacked"], "{json}");
    assert_eq!(json["events"][2]["error"], "disk full", "{json}");
    assert_eq!(json["events"][2]["delay_ms"], 3_600_000, "{json}");

    let out = delayd_cli(&url, &["events", "jobs", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("message_not_found"), "{stderr}");
}
