//! Scoped tokens with the real binary: `delayd serve --token-file` refuses a
//! bad file naming the file and the line, reads the file again on SIGHUP
//! (a bad file keeps the tokens in use), refuses a beanstalkd listener
//! beyond loopback while tokens protect HTTP (unless
//! `--beanstalk-unauthenticated`); `delayd token hash` prints what the file
//! stores; the CLI reports a 403 as `forbidden` naming the verb and queue.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{delayd_cli, expect_ok, local_serve_args, serve_command, Server};

fn token_hash(secret: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_delayd"))
        .args(["token", "hash", secret])
        .output()
        .expect("run delayd token hash");
    expect_ok(&output).trim().to_owned()
}

fn entry(name: &str, secret: &str, scopes: &str) -> String {
    format!(
        "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\nscopes = {scopes}\n\n",
        token_hash(secret)
    )
}

#[test]
fn token_hash_reads_the_secret_from_stdin_or_an_argument() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayd"))
        .args(["token", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"s3cret\n")
        .expect("write");
    let from_stdin = expect_ok(&child.wait_with_output().expect("wait"));
    use sha2::Digest as _;
    let expected = hex::encode(sha2::Sha256::digest(b"s3cret"));
    assert_eq!(
        from_stdin.trim(),
        expected,
        "the newline is not part of the secret"
    );
    assert_eq!(token_hash("s3cret"), expected);
}

fn serve_fails(args: &[&str]) -> (Option<i32>, String) {
    let output = serve_command(args, None, &[])
        .stdout(Stdio::null())
        .output()
        .expect("run delayd serve");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_bad_token_file_stops_serve_naming_the_file_and_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = dir.path().join("tokens.toml");
    let text = entry("worker", "w", "[\"consume:q\",\n  \"write:q\"]");
    std::fs::write(&file, text).expect("write");
    let data = data.to_str().expect("utf-8");
    let path = file.to_str().expect("utf-8");
    let (code, stderr) = serve_fails(&local_serve_args(data, &["--token-file", path]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(path) && stderr.contains("line 5"),
        "{stderr}"
    );
    assert!(stderr.contains("unknown verb \"write\""), "{stderr}");
}

#[test]
fn beanstalk_beyond_loopback_with_tokens_needs_beanstalk_unauthenticated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens.toml");
    std::fs::write(&file, entry("viewer", "v", "[\"read:*\"]")).expect("write");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let path = file.to_str().expect("utf-8");
    let exposed = |auth: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "--http",
            "127.0.0.1:0",
            "--beanstalk",
            "0.0.0.0:0",
            "--data",
            data,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(auth.iter().map(|s| s.to_string()));
        args
    };
    for auth in [vec!["--token", "full"], vec!["--token-file", path]] {
        let args = exposed(&auth);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = serve_fails(&args);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains("--beanstalk 0.0.0.0:0")
                && stderr.contains("no authentication")
                && stderr.contains("--beanstalk-unauthenticated"),
            "{stderr}"
        );
    }
    // Accepted explicitly, it starts; and loopback needs no flag.
    let args = exposed(&["--token-file", path, "--beanstalk-unauthenticated"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    drop(Server::start_with(&args, None, &[]));
    let loopback = [
        "--http",
        "127.0.0.1:0",
        "--beanstalk",
        "127.0.0.1:0",
        "--data",
        data,
        "--token-file",
        path,
    ];
    drop(Server::start_with(&loopback, None, &[]));
}

fn status(server: &Server, token: &str, path: &str) -> u16 {
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("authorization: Bearer {token}"))
        .arg(server.url(path))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&output.stdout).parse().unwrap_or(0)
}

fn sighup_and_wait_for(server: &Server, log_words: &str, seen_before: usize) {
    let sent = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.log().matches(log_words).count() <= seen_before {
        assert!(
            Instant::now() < deadline,
            "no {log_words:?}; log:\n{}",
            server.log()
        );
        // Polls: the server's log is the only event a reload has.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the token file");
}

#[test]
fn sighup_reads_the_token_file_again_and_a_bad_one_keeps_the_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens.toml");
    write(
        &file,
        &entry("old", "old-secret", "[\"read:*\", \"publish:orders\"]"),
    );
    let data = dir.path().join("data");
    let args = local_serve_args(data.to_str().expect("utf-8"), &[]);
    let mut args: Vec<&str> = args;
    let path = file.to_str().expect("utf-8");
    args.extend(["--token-file", path]);
    let server = Server::start_with(&args, None, &[]);
    assert_eq!(status(&server, "old-secret", "/v1/queues"), 200);
    assert_eq!(status(&server, "new-secret", "/v1/queues"), 401);

    // The CLI reports a refusal as forbidden, naming the verb and queue.
    let refused = delayd_cli(
        &server.url(""),
        &["put", "billing", "x", "--token", "old-secret"],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("forbidden")
            && stderr.contains("publish")
            && stderr.contains("\"billing\""),
        "{stderr}"
    );

    // Rotation: add the new token, reload, remove the old one, reload.
    let both = format!(
        "{}{}",
        entry("old", "old-secret", "[\"read:*\"]"),
        entry("new", "new-secret", "[\"read:*\"]")
    );
    write(&file, &both);
    sighup_and_wait_for(&server, "token file reloaded", 0);
    assert_eq!(status(&server, "old-secret", "/v1/queues"), 200);
    assert_eq!(status(&server, "new-secret", "/v1/queues"), 200);
    write(&file, &entry("new", "new-secret", "[\"read:*\"]"));
    sighup_and_wait_for(&server, "token file reloaded", 1);
    assert_eq!(status(&server, "old-secret", "/v1/queues"), 401);

    write(&file, "[[token]\nname = \"broken\"\n");
    sighup_and_wait_for(&server, "token file not reloaded", 0);
    assert!(server.log().contains("line 1"), "{}", server.log());
    assert_eq!(
        status(&server, "new-secret", "/v1/queues"),
        200,
        "the previous set stays"
    );
}
