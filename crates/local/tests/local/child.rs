//! A crash-test child process whose report lines are read as it runs,
//! killed with SIGKILL at the test's moment (the kill -9 tests share it).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Reporting {
    child: Child,
    lines: mpsc::Receiver<String>,
    reader: JoinHandle<()>,
}

impl Reporting {
    /// Starts `command` with its stdout read line by line.
    pub fn spawn(command: &mut Command) -> Reporting {
        let mut child = command.stdout(Stdio::piped()).spawn().expect("spawn child");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, lines) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Reporting {
            child,
            lines,
            reader,
        }
    }

    /// Waits for the child's `READY` line.
    pub fn wait_ready(&self) {
        let ready = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("child READY");
        assert_eq!(ready, "READY");
    }

    /// SIGKILLs the child, reaps it, and returns every line it printed
    /// after `READY`.
    pub fn kill(mut self) -> Vec<String> {
        self.child.kill().expect("SIGKILL child");
        self.child.wait().expect("reap child");
        self.reader.join().expect("reader thread");
        self.lines.try_iter().collect()
    }
}
