//! Helpers shared by the integration tests that run `delayd serve` as a
//! child process.

#![expect(dead_code, reason = "each test binary uses a different part")]

pub mod redis;

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process that is SIGKILLed and reaped when dropped, so a failing
/// test leaves nothing running.
pub struct Proc(pub Child);

impl Proc {
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Makes the kernel SIGKILL the child when the spawning thread dies, so
/// nothing is left running even when the test process itself is killed.
#[expect(unsafe_code, reason = "pre_exec and prctl(2) through libc")]
pub fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A `delayd serve` child process, SIGKILLed when dropped so a failing test
/// leaves nothing running.
pub struct Server {
    proc: Proc,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// `delayd serve ARGS` in `cwd` with `env` (and no other `DELAYD_*`
/// variable), logging at `info` to a piped stderr.
pub fn serve_command(args: &[&str], cwd: Option<&Path>, env: &[(&str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayd"));
    command.arg("serve").args(args);
    prepare(command, cwd, env)
}

/// [`serve_command`] under a soft and hard limit of `fd_limit` open files
/// (the shell's `ulimit -n`, then `exec`, so the server is the child).
pub fn serve_command_with_fd_limit(fd_limit: u32, args: &[&str]) -> Command {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(r#"ulimit -n {fd_limit} && exec "$0" serve "$@""#))
        .arg(env!("CARGO_BIN_EXE_delayd"))
        .args(args);
    prepare(command, None, &[])
}

fn prepare(mut command: Command, cwd: Option<&Path>, env: &[(&str, String)]) -> Command {
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DELAYD_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// `serve` arguments for a test: an ephemeral HTTP port, no beanstalkd
/// listener, the embedded store in `data`, then `extra`.
pub fn local_serve_args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    serve_args("off", data, extra)
}

/// [`local_serve_args`] with the beanstalkd listener on an ephemeral port
/// too.
pub fn both_listeners_args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    serve_args("127.0.0.1:0", data, extra)
}

fn serve_args<'a>(beanstalk: &'a str, data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--http",
        "127.0.0.1:0",
        "--beanstalk",
        beanstalk,
        "--data",
        data,
    ];
    args.extend_from_slice(extra);
    args
}

impl Server {
    /// Starts `delayd serve --http 127.0.0.1:0 --beanstalk off --data DIR`.
    pub fn start(data: &Path) -> Server {
        let data = data.to_str().unwrap();
        Server::start_with(&local_serve_args(data, &[]), None, &[])
    }

    /// Starts `delayd serve ARGS` in `cwd` with `env` (and no other
    /// `DELAYD_*` variable), and reads the bound HTTP address from its
    /// "HTTP API listening" line.
    pub fn start_with(args: &[&str], cwd: Option<&Path>, env: &[(&str, String)]) -> Server {
        Server::try_start_with(args, cwd, env).unwrap_or_else(|log| {
            panic!("no \"HTTP API listening\" line; log:\n{log}");
        })
    }

    /// [`Server::start_with`], or the log of a server that did not start.
    pub fn try_start_with(
        args: &[&str],
        cwd: Option<&Path>,
        env: &[(&str, String)],
    ) -> Result<Server, String> {
        Server::spawn(serve_command(args, cwd, env))
    }

    /// Spawns `command` (from [`serve_command`]) and reads the bound HTTP
    /// address from its "HTTP API listening" line, or returns the log of a
    /// server that did not start.
    pub fn spawn(mut command: Command) -> Result<Server, String> {
        let mut child = command.spawn().expect("spawn delayd serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let line = strip_ansi(&line);
                // Logged before the address is handed over, so a test that
                // reads the log once the server is up sees this line too.
                let addr = line
                    .contains("HTTP API listening")
                    .then(|| bound_addr(&line))
                    .flatten();
                lines.lock().unwrap().push(line);
                if let Some(addr) = addr {
                    let _ = tx.send(addr);
                }
            }
        });
        let mut server = Server {
            proc: Proc(child),
            addr: "127.0.0.1:1".parse().unwrap(),
            log,
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => server.addr = addr,
            Err(_) => return Err(server.log()),
        }
        Ok(server)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// One `GET path` on a fresh connection, read to the server's close
    /// (10 s at most): what arrived, empty if nothing did.
    pub fn http_get(&self, path: &str) -> String {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let request = format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
        // A refusing server may close before reading: what it answered is
        // the verdict, not the write.
        let _ = stream.write_all(request.as_bytes());
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The server process's id (to signal it).
    pub fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    /// Sends SIGTERM and waits up to `limit` for the process to exit.
    #[expect(unsafe_code, reason = "kill(2) through libc")]
    pub fn sigterm_and_wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let child = &mut self.proc.0;
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) with a valid signal on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill -TERM");
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return Some(status);
            }
            // Polls: a child process's exit has no event this test can await.
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn kill9(&mut self) {
        self.proc.kill9();
    }
}

pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The address after `bound=` in a log line.
pub fn bound_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("bound=")? + "bound=".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// Polls `/healthz` until it answers 2xx; panics after 20 s.
pub async fn wait_healthy(http: &reqwest::Client, server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = http.get(server.url("/healthz")).send().await {
            if response.status().is_success() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "/healthz never answered; log:\n{}",
            server.log()
        );
        // Polls: a starting server has no event this test can await.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `delayd ARGS --server URL` to completion, with no `DELAYD_*`
/// variable from the environment and stdin closed.
pub fn delayd_cli(url: &str, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_delayd"));
    command.args(args).args(["--server", url]);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DELAYD_") {
            command.env_remove(name);
        }
    }
    command
        .stdin(Stdio::null())
        .output()
        .expect("run the delayd binary")
}

/// The stdout of a run that must have succeeded.
pub fn expect_ok(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The stdout of a run that must have succeeded, parsed as one JSON value.
pub fn expect_json(output: &std::process::Output) -> serde_json::Value {
    let text = expect_ok(output);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"))
}
