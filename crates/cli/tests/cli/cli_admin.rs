//! The operator subcommands end to end: the `delayd` binary against a
//! `delayd serve` child process on 127.0.0.1:0 with a temporary data
//! directory (dead, redrive, pause, resume, reschedule, queue show/list/set,
//! delete-queue), and `--json` on every client subcommand.

use serde_json::Value;

use crate::common::{delayd_cli, expect_json, expect_ok, local_serve_args, Server};

/// A fresh server (push allowed to loopback, so `queue set --push-url`
/// can be exercised), its data directory and its base URL.
fn start() -> (Server, tempfile::TempDir, String) {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let args = local_serve_args(dir, &["--push-allow", "127.0.0.1"]);
    let server = Server::start_with(&args, None, &[]);
    let url = server.url("");
    (server, data, url)
}

/// Leases one message of `queue` and returns its lease id.
fn lease_one(url: &str, queue: &str, id: &str) -> String {
    let got = expect_json(&delayd_cli(url, &["get", queue, "--json"]));
    assert_eq!(got["messages"][0]["id"], id, "{got}");
    got["messages"][0]["lease_id"]
        .as_str()
        .expect("lease_id")
        .to_owned()
}

/// Enqueues `id` and fails its only allowed delivery, so it dies.
fn kill_message(url: &str, queue: &str, id: &str) {
    expect_ok(&delayd_cli(url, &["put", queue, "--id", id, "payload"]));
    let lease = lease_one(url, queue, id);
    expect_ok(&delayd_cli(url, &["nack", queue, id, &lease]));
}

fn stats(url: &str, queue: &str) -> Value {
    expect_json(&delayd_cli(url, &["queue", "show", queue, "--json"]))["stats"].clone()
}

#[test]
fn dead_lists_and_redrive_brings_back() {
    let (_server, _data, url) = start();
    expect_ok(&delayd_cli(
        &url,
        &["queue", "set", "jobs", "--max-attempts", "1"],
    ));
    for id in ["d1", "d2", "d3"] {
        kill_message(&url, "jobs", id);
    }
    let dead = expect_json(&delayd_cli(&url, &["dead", "jobs", "--json"]));
    let ids: Vec<&str> = dead["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["d1", "d2", "d3"], "{dead}");
    assert_eq!(dead["messages"][0]["state"], "dead", "{dead}");
    let page = expect_json(&delayd_cli(
        &url,
        &["dead", "jobs", "--limit", "1", "--after", "d1", "--json"],
    ));
    assert_eq!(page["messages"][0]["id"], "d2", "{page}");
    assert_eq!(page["messages"].as_array().map(Vec::len), Some(1), "{page}");
    let text = expect_ok(&delayd_cli(&url, &["dead", "jobs"]));
    assert!(text.contains("id d1") && text.contains("payload"), "{text}");

    let one = expect_json(&delayd_cli(&url, &["redrive", "jobs", "d2", "--json"]));
    assert_eq!(one["redriven"], 1, "{one}");
    assert_eq!(stats(&url, "jobs")["dead"], 2);
    let rest = expect_ok(&delayd_cli(&url, &["redrive", "jobs"]));
    assert_eq!(rest.trim(), "redriven 2");
    let counts = stats(&url, "jobs");
    assert_eq!((&counts["dead"], &counts["ready"]), (&0.into(), &3.into()));
    // Back with attempts reset: leasable again as a first attempt.
    let got = expect_json(&delayd_cli(&url, &["get", "jobs", "--json"]));
    assert_eq!(got["messages"][0]["attempt"], 1, "{got}");
}

#[test]
fn pause_stops_leases_until_resume() {
    let (_server, _data, url) = start();
    expect_ok(&delayd_cli(&url, &["put", "q", "--id", "p1", "x"]));
    let paused = expect_json(&delayd_cli(&url, &["pause", "q", "--json"]));
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["stats"]["ready"], 1, "{paused}");
    let none = expect_json(&delayd_cli(
        &url,
        &["get", "q", "--wait", "200ms", "--json"],
    ));
    assert_eq!(none["messages"], serde_json::json!([]), "{none}");
    let resumed = expect_ok(&delayd_cli(&url, &["resume", "q"]));
    assert_eq!(resumed.trim(), "resumed q");
    lease_one(&url, "q", "p1");
}

#[test]
fn reschedule_moves_deliver_at_and_priority() {
    let (_server, _data, url) = start();
    expect_ok(&delayd_cli(
        &url,
        &["put", "q", "--id", "r1", "--delay", "1h", "x"],
    ));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis();
    let at = (now_ms + 7_200_000).to_string();
    let at = at.as_str();
    let moved = expect_json(&delayd_cli(
        &url,
        &[
            "reschedule",
            "q",
            "r1",
            "--at",
            at,
            "--priority",
            "7",
            "--json",
        ],
    ));
    assert_eq!(moved["deliver_at"].to_string(), at, "{moved}");
    assert_eq!(moved["priority"], 7, "{moved}");
    // Due now: it becomes leasable at once.
    let text = expect_ok(&delayd_cli(
        &url,
        &["reschedule", "q", "r1", "--delay", "0s"],
    ));
    assert!(text.starts_with("rescheduled r1"), "{text}");
    lease_one(&url, "q", "r1");
    // A leased message cannot move: the API's 409 is exit code 1.
    let refused = delayd_cli(&url, &["reschedule", "q", "r1", "--delay", "1h"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid_state"));
    // Nothing to change, or two times: usage errors.
    for args in [
        &["reschedule", "q", "r1"][..],
        &["reschedule", "q", "r1", "--delay", "1s", "--at", at],
    ] {
        assert_eq!(delayd_cli(&url, args).status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn queue_set_then_show_reflects_the_change() {
    let (_server, _data, url) = start();
    let set = expect_json(&delayd_cli(
        &url,
        &[
            "queue",
            "set",
            "cfg",
            "--lease",
            "45s",
            "--max-attempts",
            "3",
            "--retry-initial",
            "2s",
            "--json",
        ],
    ));
    assert_eq!(set["config"]["lease_ms"], 45_000, "{set}");
    let shown = expect_json(&delayd_cli(&url, &["queue", "show", "cfg", "--json"]));
    let config = &shown["config"];
    assert_eq!(config["max_attempts"], 3, "{shown}");
    assert_eq!(config["retry"]["initial_ms"], 2_000, "{shown}");
    // Retry options not given keep their value.
    assert_eq!(config["retry"]["max_ms"], 3_600_000, "{shown}");
    let text = expect_ok(&delayd_cli(&url, &["queue", "show", "cfg"]));
    assert!(text.contains("45000ms"), "{text}");

    let push = [
        "queue",
        "set",
        "cfg",
        "--push-url",
        "http://127.0.0.1:9/hook",
        "--push-timeout",
        "5s",
        "--push-concurrency",
        "4",
        "--push-secret",
        "s3cret",
        "--json",
    ];
    let pushed = expect_json(&delayd_cli(&url, &push))["config"]["push"].clone();
    assert_eq!(pushed["url"], "http://127.0.0.1:9/hook", "{pushed}");
    assert_eq!(pushed["timeout_ms"], 5_000, "{pushed}");
    assert_eq!(pushed["concurrency"], 4, "{pushed}");
    assert_eq!(pushed["secret_set"], true, "{pushed}");
    let removed = expect_json(&delayd_cli(
        &url,
        &["queue", "set", "cfg", "--no-push", "--json"],
    ));
    assert_eq!(removed["config"]["push"], Value::Null, "{removed}");
    // Push options without a URL would replace push with nothing: refused.
    let lone = delayd_cli(&url, &["queue", "set", "cfg", "--push-timeout", "5s"]);
    assert_eq!(lone.status.code(), Some(2));

    let listed = expect_json(&delayd_cli(&url, &["queue", "list", "--json"]));
    assert_eq!(listed["queues"][0]["name"], "cfg", "{listed}");
}

#[test]
fn delete_queue_needs_yes() {
    let (_server, _data, url) = start();
    expect_ok(&delayd_cli(&url, &["put", "doomed", "x"]));
    let refused = delayd_cli(&url, &["delete-queue", "doomed"]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--yes") && stderr.contains("every message"),
        "{stderr}"
    );
    assert_eq!(stats(&url, "doomed")["ready"], 1, "refused means untouched");

    let done = expect_json(&delayd_cli(
        &url,
        &["delete-queue", "doomed", "--yes", "--json"],
    ));
    assert_eq!(done["deleted"], true, "{done}");
    let gone = delayd_cli(&url, &["queue", "show", "doomed", "--json"]);
    assert_eq!(gone.status.code(), Some(1));
    // With --json the API's error object goes to stderr.
    let error: Value = serde_json::from_slice(&gone.stderr).expect("JSON error on stderr");
    assert_eq!(error["error"]["code"], "queue_not_found", "{error}");
}

#[test]
fn every_client_subcommand_prints_json() {
    let (_server, _data, url) = start();
    let put = expect_json(&delayd_cli(&url, &["put", "j", "--id", "a", "x", "--json"]));
    assert_eq!(put["created"], true, "{put}");
    let lease = lease_one(&url, "j", "a");
    let acked = expect_json(&delayd_cli(&url, &["ack", "j", "a", &lease, "--json"]));
    assert_eq!(acked["acked"], true, "{acked}");
    expect_ok(&delayd_cli(&url, &["put", "j", "--id", "b", "x"]));
    let lease = lease_one(&url, "j", "b");
    let nacked = expect_json(&delayd_cli(
        &url,
        &["nack", "j", "b", &lease, "--delay", "1h", "--json"],
    ));
    assert_eq!(nacked["nacked"], true, "{nacked}");
    let cancelled = expect_json(&delayd_cli(&url, &["cancel", "j", "b", "--json"]));
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    // The rest: each prints one JSON document whose shape is the API's.
    let checks: [(&[&str], &str); 9] = [
        (&["queues", "--json"], "queues"),
        (&["stats", "j", "--json"], "stats"),
        (&["queue", "list", "--json"], "queues"),
        (&["queue", "show", "j", "--json"], "config"),
        (&["queue", "set", "j", "--json"], "config"),
        (&["dead", "j", "--json"], "messages"),
        (&["redrive", "j", "--json"], "redriven"),
        (&["pause", "j", "--json"], "paused"),
        (&["resume", "j", "--json"], "paused"),
    ];
    for (args, key) in checks {
        let value = expect_json(&delayd_cli(&url, args));
        assert!(value.get(key).is_some(), "{args:?}: {value}");
    }
    expect_ok(&delayd_cli(
        &url,
        &["put", "j", "--id", "c", "--delay", "1h", "x"],
    ));
    let moved = expect_json(&delayd_cli(
        &url,
        &["reschedule", "j", "c", "--delay", "2h", "--json"],
    ));
    assert_eq!(moved["state"], "scheduled", "{moved}");
    let deleted = expect_json(&delayd_cli(&url, &["delete-queue", "j", "--yes", "--json"]));
    assert_eq!(deleted["queue"], "j", "{deleted}");
}
