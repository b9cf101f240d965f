//! `--max-connections` is the total of both listeners, exactly: with a
//! budget of 1 and the beanstalkd listener on, a beanstalkd client holding
//! the one connection leaves HTTP clients a quick 503 (before the fix each
//! listener rounded its share up to 1, and two connections were open), and
//! once it leaves an HTTP client is served. An HTTP connection holding it
//! likewise leaves beanstalkd clients closed at once.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::Server;

#[test]
fn a_budget_of_one_is_one_connection_over_both_listeners() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path().to_str().unwrap();
    let args = common::both_listeners_args(data, &["--max-connections", "1"]);
    let server = Server::try_start_with(&args, None, &[])
        .unwrap_or_else(|log| panic!("server did not start:\n{log}"));
    let beanstalk = beanstalk_addr(&server);

    let mut worker = TcpStream::connect(beanstalk).expect("connect beanstalkd");
    assert_eq!(
        beanstalk_command(&mut worker, "use orders\r\n"),
        "USING orders\r\n"
    );
    let answer = server.http_get("/healthz");
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "a second connection was served: {answer}\n{}",
        server.log()
    );
    assert_eq!(
        beanstalk_command(&mut worker, "use orders\r\n"),
        "USING orders\r\n",
        "the beanstalkd client keeps its connection"
    );

    // Once it leaves, an HTTP client gets the connection (kept open, idle,
    // for what follows).
    drop(worker);
    let started = Instant::now();
    let _idle = loop {
        let mut stream = TcpStream::connect(server.addr).expect("connect HTTP");
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n");
        let mut first = [0u8; 12];
        if stream.read_exact(&mut first).is_ok() && &first == b"HTTP/1.1 200" {
            break stream;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the freed connection was not reused: {}",
            String::from_utf8_lossy(&first)
        );
        // Polls: the server's release of a connection has no event this test can await.
        std::thread::sleep(Duration::from_millis(50));
    };

    // The idle HTTP connection holds the budget: a beanstalkd client is
    // closed.
    let mut refused = TcpStream::connect(beanstalk).expect("connect beanstalkd");
    refused
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = refused.write_all(b"use orders\r\n");
    let mut reply = Vec::new();
    let _ = refused.read_to_end(&mut reply);
    assert!(
        reply.is_empty(),
        "a second connection was served: {:?}",
        String::from_utf8_lossy(&reply)
    );
}

fn beanstalk_addr(server: &Server) -> SocketAddr {
    server
        .log()
        .lines()
        .filter(|line| line.contains("beanstalkd protocol listening"))
        .find_map(common::bound_addr)
        .unwrap_or_else(|| panic!("no beanstalkd address in the log:\n{}", server.log()))
}

fn beanstalk_command(stream: &mut TcpStream, command: &str) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(command.as_bytes()).expect("send");
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => reply.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&reply).into_owned()
}
