//! `delayd schedule ...` end to end: the `delayd` binary against a `delayd
//! serve` child process on 127.0.0.1:0 with a temporary data directory
//! (put, get, list, pause, resume, trigger, delete, preview; text and
//! `--json`; a schedule firing in the server; usage and API errors).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::common::{delayd_cli, expect_json, expect_ok, local_serve_args, Server};

fn start() -> (Server, tempfile::TempDir, String) {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let server = Server::start_with(&local_serve_args(dir, &[]), None, &[]);
    let url = server.url("");
    (server, data, url)
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(since.as_millis()).expect("ms fit u64")
}

#[test]
fn schedule_lifecycle_in_text_and_json() {
    let (_server, _data, url) = start();
    let put = [
        "schedule",
        "put",
        "jobs",
        "nightly",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Paris",
        "--max-fires",
        "3",
        "--priority",
        "7",
        "--header",
        "k=v",
        "--overlap",
        "skip",
        "--jitter",
        "2s",
        "report",
    ];
    let text = expect_ok(&delayd_cli(&url, &put));
    assert!(
        text.starts_with("created: schedule nightly revision 1"),
        "{text}"
    );
    assert!(
        text.contains("cron \"30 2 * * *\" in Europe/Paris"),
        "{text}"
    );
    // Next fire times print in the zone with its offset, then in UTC.
    assert!(
        text.contains(":30:00.000+0") && text.contains(" Europe/Paris  "),
        "{text}"
    );
    let again = expect_ok(&delayd_cli(&url, &put));
    assert!(
        again.starts_with("replaced: schedule nightly revision 1"),
        "{again}"
    );

    let got = expect_json(&delayd_cli(
        &url,
        &["schedule", "get", "jobs", "nightly", "--json"],
    ));
    assert_eq!(got["cron"], "30 2 * * *", "{got}");
    assert_eq!(got["tz"], "Europe/Paris", "{got}");
    assert_eq!(got["max_fires"], 3, "{got}");
    assert_eq!(got["jitter_ms"], 2000, "{got}");
    assert_eq!(got["overlap"], "skip", "{got}");
    assert_eq!(got["message"]["priority"], 7, "{got}");
    assert_eq!(got["message"]["headers"]["k"], "v", "{got}");
    assert_eq!(got["message"]["payload"], "report", "{got}");
    assert_eq!(got["next_fires"].as_array().map(Vec::len), Some(3), "{got}");

    let every = [
        "schedule", "put", "jobs", "beat", "--every", "1m", "--paused", "tick",
    ];
    let beat = expect_json(&delayd_cli(&url, &[&every[..], &["--json"]].concat()));
    assert_eq!(
        (&beat["every_ms"], &beat["paused"]),
        (&60_000.into(), &true.into())
    );
    assert_eq!(beat["next_fire_at"], Value::Null, "{beat}");
    let list = expect_json(&delayd_cli(&url, &["schedule", "list", "jobs", "--json"]));
    let ids: Vec<&str> = list["schedules"]
        .as_array()
        .expect("schedules")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["beat", "nightly"], "{list}");
    let lines = expect_ok(&delayd_cli(&url, &["schedule", "list", "jobs"]));
    assert!(
        lines.contains("beat  every 60000ms  fires 0  next paused"),
        "{lines}"
    );

    let resumed = expect_json(&delayd_cli(
        &url,
        &["schedule", "resume", "jobs", "beat", "--json"],
    ));
    assert_eq!(
        (&resumed["paused"], &resumed["revision"]),
        (&false.into(), &2.into())
    );
    let paused = expect_ok(&delayd_cli(&url, &["schedule", "pause", "jobs", "beat"]));
    assert!(
        paused.contains("paused     yes") && paused.contains("next       none"),
        "{paused}"
    );

    let fired = expect_json(&delayd_cli(
        &url,
        &["schedule", "trigger", "jobs", "beat", "--json"],
    ));
    let id = fired["id"].as_str().expect("id");
    assert!(id.starts_with("beat:manual:"), "{fired}");
    assert_eq!(fired["created"], true, "{fired}");
    let leased = expect_json(&delayd_cli(&url, &["get", "jobs", "--json"]));
    assert_eq!(leased["messages"][0]["id"], id, "{leased}");
    assert_eq!(
        leased["messages"][0]["headers"]["delayd-schedule"], "beat",
        "{leased}"
    );

    let deleted = expect_ok(&delayd_cli(&url, &["schedule", "delete", "jobs", "beat"]));
    assert_eq!(deleted.trim(), "deleted schedule beat");
    let json = ["schedule", "delete", "jobs", "nightly", "--json"];
    let deleted = expect_json(&delayd_cli(&url, &json));
    assert_eq!(
        deleted,
        serde_json::json!({"queue": "jobs", "id": "nightly", "deleted": true})
    );
    let gone = delayd_cli(&url, &["schedule", "get", "jobs", "beat", "--json"]);
    assert_eq!(gone.status.code(), Some(1));
    let error: Value = serde_json::from_slice(&gone.stderr).expect("JSON error on stderr");
    assert_eq!(error["error"]["code"], "schedule_not_found", "{error}");
}

#[test]
fn a_schedule_fires_in_the_server() {
    let (_server, _data, url) = start();
    let start_at = (now_ms() + 300).to_string();
    expect_ok(&delayd_cli(
        &url,
        &[
            "schedule",
            "put",
            "q",
            "tick",
            "--every",
            "1s",
            "--start-at",
            &start_at,
            "--max-fires",
            "1",
            "payload",
        ],
    ));
    let got = expect_json(&delayd_cli(&url, &["get", "q", "--wait", "10s", "--json"]));
    let message = &got["messages"][0];
    assert_eq!(message["id"], format!("tick:{start_at}"), "{got}");
    assert_eq!(
        message["headers"]["delayd-scheduled-for"],
        start_at.as_str(),
        "{got}"
    );
    let s = expect_json(&delayd_cli(
        &url,
        &["schedule", "get", "q", "tick", "--json"],
    ));
    assert_eq!(
        (&s["fires"], &s["next_fire_at"]),
        (&1.into(), &Value::Null),
        "{s}"
    );
}

#[test]
fn preview_prints_zone_and_utc() {
    let (_server, _data, url) = start();
    let args = [
        "schedule",
        "preview",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Paris",
        "--start-at",
        "2026-03-28T00:00:00Z",
        "--count",
        "2",
    ];
    let text = expect_ok(&delayd_cli(&url, &args));
    // The night of 28 to 29 March 2026 moves Paris from +01:00 to +02:00.
    assert_eq!(
        text,
        "2026-03-28T09:00:00.000+01:00 Europe/Paris  2026-03-28T08:00:00.000Z\n\
         2026-03-29T09:00:00.000+02:00 Europe/Paris  2026-03-29T07:00:00.000Z\n"
    );
    let json = expect_json(&delayd_cli(&url, &[&args[..], &["--json"]].concat()));
    assert_eq!(
        json["fires"],
        serde_json::json!([1_774_684_800_000u64, 1_774_767_600_000u64])
    );
    let every = expect_ok(&delayd_cli(
        &url,
        &[
            "schedule",
            "preview",
            "--every",
            "90s",
            "--start-at",
            "0",
            "--count",
            "2",
        ],
    ));
    assert_eq!(
        every,
        "1970-01-01T00:00:00.000Z\n1970-01-01T00:01:30.000Z\n"
    );
}

#[test]
fn usage_and_api_errors() {
    let (_server, _data, url) = start();
    // Exactly one of --cron and --every; --tz only with --cron: usage (2).
    for args in [
        &["schedule", "put", "q", "s", "x"][..],
        &[
            "schedule", "put", "q", "s", "--cron", "@daily", "--every", "1m", "x",
        ],
        &[
            "schedule", "put", "q", "s", "--every", "1m", "--tz", "UTC", "x",
        ],
        &["schedule", "preview"],
    ] {
        assert_eq!(delayd_cli(&url, args).status.code(), Some(2), "{args:?}");
    }
    // The server's refusals: exit 1, naming the field.
    let bad = delayd_cli(
        &url,
        &["schedule", "put", "q", "s", "--cron", "61 * * * *", "x"],
    );
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("invalid_argument") && stderr.contains("cron"),
        "{stderr}"
    );
    let zone = delayd_cli(
        &url,
        &[
            "schedule",
            "preview",
            "--cron",
            "@daily",
            "--tz",
            "Mars/Base",
        ],
    );
    assert_eq!(zone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&zone.stderr).contains("tz"));
}
