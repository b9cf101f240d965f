//! Retention from the command line, end to end against a `delayd serve`
//! child process: `queue set --retain` (shown by `queue show`), and
//! `delayd message` showing an acked and a cancelled message as retained,
//! with their end time and no payload; the usage and range errors.

use crate::common::{delayd_cli, expect_json, expect_ok, local_serve_args, Server};

fn start() -> (Server, tempfile::TempDir, String) {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let server = Server::start_with(&local_serve_args(dir, &[]), None, &[]);
    let url = server.url("");
    (server, data, url)
}

#[test]
fn queue_set_retain_and_message_shows_retained() {
    let (_server, _data, url) = start();
    let set = expect_json(&delayd_cli(
        &url,
        &["queue", "set", "kept", "--retain", "1d", "--json"],
    ));
    assert_eq!(set["config"]["retain_ms"], 86_400_000, "{set}");
    let shown = expect_ok(&delayd_cli(&url, &["queue", "show", "kept"]));
    assert!(shown.contains("retain     86400000ms"), "{shown}");
    // Another option leaves it as it is.
    let set = expect_json(&delayd_cli(
        &url,
        &["queue", "set", "kept", "--max-attempts", "3", "--json"],
    ));
    assert_eq!(set["config"]["retain_ms"], 86_400_000, "{set}");

    // A live message: its payload, no end.
    expect_ok(&delayd_cli(&url, &["put", "kept", "--id", "a", "secret"]));
    let live = expect_ok(&delayd_cli(&url, &["message", "kept", "a"]));
    assert!(live.contains("state       ready"), "{live}");
    assert!(
        live.contains("secret") && !live.contains("ended_at"),
        "{live}"
    );

    // Acked: retained, shown with its end and without its payload.
    expect_ok(&delayd_cli(&url, &["get", "kept", "--ack"]));
    let acked = expect_ok(&delayd_cli(&url, &["message", "kept", "a"]));
    assert!(acked.contains("state       acked"), "{acked}");
    assert!(acked.contains("ended_at    20"), "{acked}");
    assert!(
        acked.contains("none kept") && !acked.contains("secret"),
        "{acked}"
    );
    let json = expect_json(&delayd_cli(&url, &["message", "kept", "a", "--json"]));
    assert_eq!(json["state"], "acked", "{json}");
    assert!(json["ended_at"].is_u64(), "{json}");

    // Cancelled: the same, as `cancelled`.
    expect_ok(&delayd_cli(
        &url,
        &["put", "kept", "--id", "c", "--delay", "1h", "x"],
    ));
    expect_ok(&delayd_cli(&url, &["cancel", "kept", "c"]));
    let json = expect_json(&delayd_cli(&url, &["message", "kept", "c", "--json"]));
    assert_eq!(json["state"], "cancelled", "{json}");

    // Its id stays taken: a put is a duplicate.
    let again = expect_json(&delayd_cli(
        &url,
        &["put", "kept", "--id", "a", "new", "--json"],
    ));
    assert_eq!(again["created"], false, "{again}");

    // An unknown id: exit 1, message_not_found.
    let out = delayd_cli(&url, &["message", "kept", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("message_not_found"), "{stderr}");
}

#[test]
fn retain_errors_name_the_option_or_field() {
    let (_server, _data, url) = start();
    // Above 30 days: the server's 400 names the field; nothing is created.
    let out = delayd_cli(&url, &["queue", "set", "kept", "--retain", "31d"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("retain_ms"), "{stderr}");
    let out = delayd_cli(&url, &["queue", "show", "kept"]);
    assert_eq!(out.status.code(), Some(1), "not created");
    // Not a duration: a usage error naming the option.
    let out = delayd_cli(&url, &["queue", "set", "kept", "--retain", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--retain"), "{stderr}");
    // 0s turns retention off.
    let set = expect_json(&delayd_cli(
        &url,
        &["queue", "set", "kept", "--retain", "0s", "--json"],
    ));
    assert_eq!(set["config"]["retain_ms"], 0, "{set}");
}
