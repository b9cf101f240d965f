//! `delayd serve`'s logs: without `RUST_LOG` dependencies log at `warn`
//! (no lsm-tree start-up chatter) and delayd's own crates at `info`;
//! `RUST_LOG` wins when set; `--log-format json` (or `DELAYD_LOG_FORMAT`)
//! prints one JSON object per line.

use std::io::{BufRead as _, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{local_serve_args, serve_command, strip_ansi, Proc};

/// Starts `delayd serve` with `extra` arguments and `env`, `RUST_LOG` as
/// given (removed when `None`), and returns its stderr lines up to and
/// including the "HTTP API listening" one; the server is then killed.
fn startup_log(extra: &[&str], env: &[(&str, String)], rust_log: Option<&str>) -> Vec<String> {
    let data = tempfile::tempdir().expect("temp dir");
    let dir = data.path().to_str().expect("utf-8 temp path");
    let mut command = serve_command(&local_serve_args(dir, extra), None, env);
    match rust_log {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    let mut child = Proc(command.spawn().expect("spawn delayd serve"));
    let stderr = child.0.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(strip_ansi(&line)).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        let done = line.contains("HTTP API listening");
        lines.push(line);
        if done {
            return lines;
        }
    }
    panic!("no \"HTTP API listening\" line; log:\n{}", lines.join("\n"));
}

fn mentions(lines: &[String], text: &str) -> bool {
    lines.iter().any(|line| line.contains(text))
}

#[test]
fn default_filter_hides_dependency_info() {
    let lines = startup_log(&[], &[], None);
    let log = lines.join("\n");
    assert!(!mentions(&lines, "lsm_tree"), "{log}");
    assert!(mentions(&lines, "store open"), "{log}");
    assert!(mentions(&lines, "INFO"), "{log}");
}

#[test]
fn rust_log_wins_over_the_default() {
    // The storage engine does log at info while opening: this is what the
    // default filter above hides.
    let lines = startup_log(&[], &[], Some("info"));
    assert!(mentions(&lines, "lsm_tree"), "{}", lines.join("\n"));
}

fn assert_json_lines(lines: &[String]) {
    for line in lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"));
        assert!(value["level"].is_string(), "{line}");
    }
    let last: serde_json::Value = serde_json::from_str(&lines[lines.len() - 1]).expect("JSON");
    assert_eq!(last["fields"]["message"], "HTTP API listening", "{last}");
    assert!(last["fields"]["bound"].is_string(), "{last}");
}

#[test]
fn json_log_format_prints_json_lines() {
    assert_json_lines(&startup_log(&["--log-format", "json"], &[], None));
    let env = [("DELAYD_LOG_FORMAT", "json".to_owned())];
    assert_json_lines(&startup_log(&[], &env, None));
}
