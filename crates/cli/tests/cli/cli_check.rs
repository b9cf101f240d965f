//! `delayd check --data DIR` end to end, and `delayd serve`'s message on a
//! damaged store: a store written through `LocalBroker`, shut down
//! cleanly, then a byte flipped in a journal batch or a version file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, QueueName};
use delayd_local::{LocalBroker, LocalConfig};
use serde_json::Value;

use crate::common::{local_serve_args, serve_command};

fn delayd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_delayd"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the delayd binary")
}

fn store(messages: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let broker = LocalBroker::open(LocalConfig::new(dir.path()))
            .await
            .expect("open");
        let queue = QueueName::new("orders").expect("queue");
        for i in 0..messages {
            let request = EnqueueRequest {
                id: Some(MessageId::new(format!("o-{i}")).expect("id")),
                payload: vec![b'x'; 200],
                ..EnqueueRequest::default()
            };
            broker
                .enqueue(&queue, vec![request], EnqueueOptions::default())
                .await
                .expect("enqueue");
        }
        broker.shutdown().await.expect("shutdown");
    });
    dir
}

fn journal(dir: &Path) -> PathBuf {
    let journals = delayd_local::check::journals(dir).expect("read dir");
    journals.last().cloned().expect("a journal")
}

/// Flips a payload byte of a batch in the middle of the journal.
fn rot_journal(dir: &Path) -> PathBuf {
    let path = journal(dir);
    let mut bytes = std::fs::read(&path).expect("read");
    let ends: Vec<usize> = bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"FJL\x03")
        .map(|(i, _)| i + 4)
        .collect();
    bytes[ends[ends.len() / 2] + 300] ^= 0x5a;
    std::fs::write(&path, bytes).expect("write");
    path
}

fn check(dir: &Path, json: bool) -> Output {
    let dir = dir.to_str().expect("utf-8 path");
    let mut args = vec!["check", "--data", dir];
    if json {
        args.push("--json");
    }
    delayd(&args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_clean_store_checks_clean() {
    let dir = store(10);
    let out = check(dir.path(), false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).contains(": clean;"), "{}", stdout(&out));
    let json: Value = serde_json::from_slice(&check(dir.path(), true).stdout).expect("json");
    assert_eq!(json["findings"], Value::Array(Vec::new()), "{json}");
    assert!(json["records"].as_u64().unwrap_or(0) >= 10, "{json}");
}

#[test]
fn a_rotten_journal_batch_is_named_with_what_it_affects() {
    let dir = store(20);
    let journal = rot_journal(dir.path());
    let name = journal.file_name().and_then(|n| n.to_str()).expect("name");
    let out = check(dir.path(), false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains(&format!("damage: journal {name}")), "{text}");
    assert!(
        text.contains("message orders/o-"),
        "the affected message: {text}"
    );
    assert!(
        text.contains("restore the data directory from a backup"),
        "{text}"
    );

    let out = check(dir.path(), true);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    let finding = &json["findings"][0];
    assert_eq!(finding["kind"], "journal", "{json}");
    assert_eq!(finding["severity"], "damage", "{json}");
    assert_eq!(finding["path"], name, "{json}");
    // Checking changed nothing: the same damage is there to find again.
    assert_eq!(check(dir.path(), false).status.code(), Some(1));
}

#[test]
fn a_rotten_version_file_is_named() {
    let dir = store(3);
    let keyspace = dir.path().join("keyspaces").join("3");
    let current = std::fs::read(keyspace.join("current")).expect("current");
    let version = u64::from_le_bytes(current[..8].try_into().expect("8 bytes"));
    let path = keyspace.join(format!("v{version}"));
    let mut bytes = std::fs::read(&path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&path, bytes).expect("write");
    let out = check(dir.path(), false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    let expected = format!("damage: version keyspaces/3/v{version} (keyspace messages)");
    assert!(text.contains(&expected), "{text}");
}

#[test]
fn serve_on_a_damaged_store_says_to_run_check() {
    let dir = store(20);
    rot_journal(dir.path());
    let data = dir.path().to_str().expect("utf-8 path");
    let out = serve_command(&local_serve_args(data, &[]), None, &[])
        .stdin(Stdio::null())
        .output()
        .expect("run delayd serve");
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("run `delayd check --data {data}`")),
        "{stderr}"
    );
    assert!(
        stderr.contains("journal") && stderr.contains(".jnl"),
        "{stderr}"
    );
}

#[test]
fn check_of_a_missing_directory_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = check(&dir.path().join("absent"), false);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
