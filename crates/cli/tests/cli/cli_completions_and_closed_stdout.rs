//! `delayd completions SHELL` prints a script that knows the subcommands,
//! and output into a pipe whose reader is gone (`delayd queues | head -0`)
//! ends the process quietly instead of with a panic message.

use std::process::{Command, Output, Stdio};

use crate::common::{delayd_cli, expect_ok, Server};

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let output = Command::new(env!("CARGO_BIN_EXE_delayd"))
            .args(["completions", shell])
            .output()
            .expect("run delayd completions");
        let script = expect_ok(&output);
        assert!(script.len() > 200, "{shell}: {script}");
        for subcommand in ["redrive", "delete-queue", "reschedule"] {
            assert!(script.contains(subcommand), "{shell} lacks {subcommand}");
        }
    }
    let unknown = Command::new(env!("CARGO_BIN_EXE_delayd"))
        .args(["completions", "tcsh"])
        .output()
        .expect("run delayd completions");
    assert_eq!(unknown.status.code(), Some(2));
}

/// Runs `delayd ARGS` with stdout a pipe whose read end is already closed,
/// so the first write fails with EPIPE whatever the timing.
fn with_closed_stdout(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let child = Command::new(env!("CARGO_BIN_EXE_delayd"))
        .args(args)
        .env_remove("DELAYD_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn delayd");
    child.wait_with_output().expect("wait for delayd")
}

fn assert_quiet_exit(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(stderr.is_empty(), "{what}: {stderr}");
    // 141 = 128 + SIGPIPE: what a shell shows for a producer cut short.
    assert!(
        matches!(output.status.code(), Some(0 | 141)),
        "{what}: {:?}",
        output.status
    );
}

#[test]
fn closed_stdout_exits_without_a_panic() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path());
    let url = server.url("");
    expect_ok(&delayd_cli(&url, &["put", "q", "x"]));
    for args in [
        &["stats", "q", "--server", &url][..],
        &["queues", "--server", &url],
        &["queues", "--json", "--server", &url],
        &["completions", "bash"],
    ] {
        assert_quiet_exit(&with_closed_stdout(args), &format!("{args:?}"));
    }
}
