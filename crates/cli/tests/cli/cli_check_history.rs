//! `delayd check-history FILE` end to end: a valid history passes (exit
//! 0), a broken one lists its violations (exit 1), a file that does not
//! parse is a usage error naming the line (exit 2).

use std::process::{Command, Output, Stdio};

fn check_history(lines: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("history.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("write the history");
    Command::new(env!("CARGO_BIN_EXE_delayd"))
        .arg("check-history")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .expect("run the delayd binary")
}

const ENQUEUE: &str = r#"{"op":"enqueue","invoke":10,"complete":11,"queue":"q","id":"a","outcome":"ok","seq":1,"deliver_at":500}"#;
const ACK: &str = r#"{"op":"ack","invoke":600,"complete":601,"queue":"q","id":"a","lease_id":"l1","outcome":"ok"}"#;

fn lease(invoke: u64) -> String {
    format!(
        r#"{{"op":"lease","invoke":{invoke},"complete":{},"queue":"q","id":"a","seq":1,"attempt":1,"lease_id":"l1","lease_until":{},"deliver_at":500}}"#,
        invoke + 1,
        invoke + 30_000
    )
}

#[test]
fn a_valid_history_passes() {
    let lease = lease(520);
    let out = check_history(&[
        ENQUEUE,
        &lease,
        ACK,
        r#"{"op":"stop","at":700,"drained":true}"#,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains(": ok"), "{stdout}");
}

#[test]
fn a_broken_history_lists_its_violations() {
    // Delivered at 20, due at 500.
    let lease = lease(20);
    let out = check_history(&[ENQUEUE, &lease, ACK]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout.contains("early q/a"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 violation(s)"),
        "{out:?}"
    );
}

#[test]
fn a_line_that_does_not_parse_is_a_usage_error() {
    let out = check_history(&[ENQUEUE, r#"{"op":"lease"}"#]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{out:?}"
    );
}
