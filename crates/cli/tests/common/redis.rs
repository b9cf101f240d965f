//! A real `redis-server` for the tests that need one.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use delayd_core::testkit::net::{free_port, redis_ping};

use super::{die_with_parent, Proc};

/// `redis-server` on a free port (never 6379) with persistence off, in its
/// own temporary directory; SIGKILLed when dropped or when the test dies.
pub struct Redis {
    _proc: Proc,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        let dir = tempfile::tempdir().expect("tempdir");
        for _ in 0..10 {
            let port = free_port();
            let mut command = Command::new("redis-server");
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--protected-mode", "no", "--dir"])
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            die_with_parent(&mut command);
            let mut proc = Proc(
                command
                    .spawn()
                    .expect("spawn redis-server (run scripts/ensure-redis.sh)"),
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if redis_ping(port) {
                    return Redis {
                        _proc: proc,
                        port,
                        _dir: dir,
                    };
                }
                if let Ok(Some(_)) = proc.0.try_wait() {
                    break; // port taken meanwhile: try another
                }
                // Polls: a starting redis-server has no event this test can await.
                std::thread::sleep(Duration::from_millis(10));
            }
            proc.kill9();
        }
        panic!("could not start redis-server");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}
