//! For tests that start servers of their own (`redis-server`, the `delayd`
//! binary): a free port and a Redis `PING`. Blocking std I/O, so they work
//! outside a runtime.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port of 127.0.0.1 that is free now, with port + 10000 (a Redis
/// Cluster bus port) free too. Never Redis's 6379. Another process may take
/// it before the caller binds it: callers retry with a new port when their
/// server fails to start.
pub fn free_port() -> u16 {
    loop {
        let port = rand::random_range(20_000..30_000u16);
        if bindable(port) && bindable(port + 10_000) {
            return port;
        }
    }
}

/// Whether a Redis server answers `PING` on 127.0.0.1:`port` within half a
/// second.
pub fn redis_ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_binds_and_nothing_answers_ping_there() {
        let port = free_port();
        assert!(!redis_ping(port), "nothing listens on a free port");
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
        // A listener that never answers: ping gives up after its timeout.
        assert!(!redis_ping(listener.local_addr().expect("addr").port()));
    }
}
