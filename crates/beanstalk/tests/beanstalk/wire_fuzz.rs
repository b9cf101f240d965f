//! Bounded fuzzing of a real listener over TCP: each case opens a
//! connection, writes a generated stream (valid commands, commands with a
//! mangled word, `put`s whose byte count lies, overlong lines, random
//! bytes), closes its write half and reads everything back. The answer
//! must be a sequence of documented beanstalkd replies (job and YAML
//! frames with exactly the bytes they announce), never `INTERNAL_ERROR`,
//! and the server must still answer a fresh connection afterwards.
//!
//! The pure parser is fuzzed on its own in parser_props.rs and, coverage
//! guided, by scripts/fuzz.sh.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use delayd_beanstalk::proto::{is_valid_name, Command, MAX_LINE};
use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
use delayd_core::testkit::ModelBroker;
use proptest::prelude::*;

/// Small, so `JOB_TOO_BIG` and its discard path are cheap to reach.
const MAX_JOB_SIZE: usize = 512;

/// Reply lines without a body: the word and how many numeric arguments.
const REPLIES: &[(&str, usize)] = &[
    ("INSERTED", 1),
    ("BURIED", 0),
    ("BURIED", 1),
    ("WATCHING", 1),
    ("DELETED", 0),
    ("RELEASED", 0),
    ("TOUCHED", 0),
    ("KICKED", 0),
    ("KICKED", 1),
    ("PAUSED", 0),
    ("NOT_FOUND", 0),
    ("NOT_IGNORED", 0),
    ("TIMED_OUT", 0),
    ("DEADLINE_SOON", 0),
    ("DRAINING", 0),
    ("EXPECTED_CRLF", 0),
    ("JOB_TOO_BIG", 0),
    ("BAD_FORMAT", 0),
    ("UNKNOWN_COMMAND", 0),
];

fn server() -> SocketAddr {
    static ADDR: OnceLock<(tokio::runtime::Runtime, SocketAddr)> = OnceLock::new();
    ADDR.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let addr = runtime.block_on(async {
            let config = BeanstalkConfig {
                max_job_size: MAX_JOB_SIZE,
                ..BeanstalkConfig::default()
            };
            let addr = "127.0.0.1:0".parse().expect("an address");
            let server = BeanstalkServer::bind(addr, Arc::new(ModelBroker::new()), config)
                .await
                .expect("bind");
            let addr = server.local_addr();
            tokio::spawn(server.run(std::future::pending()));
            addr
        });
        (runtime, addr)
    })
    .1
}

fn tube() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&["default", "a", "b"][..]).prop_map(str::to_owned),
        1 => "[A-Za-z0-9+/;.$_()-]{0,210}",
    ]
}

/// Small ids and numbers, so commands meet the jobs earlier ones made.
fn small() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..20, 1 => any::<u64>()]
}

/// Commands that answer at once: `reserve` becomes `reserve-with-timeout
/// 0`, pauses and delays are short.
fn command() -> impl Strategy<Value = Command> {
    use Command as C;
    let put =
        (any::<u32>(), 0u32..2, any::<u32>(), "[ -~]{0,40}").prop_map(|(pri, delay, ttr, body)| {
            C::Put {
                pri,
                delay,
                ttr,
                body: body.into_bytes(),
            }
        });
    prop_oneof![
        4 => put,
        1 => tube().prop_map(C::Use),
        2 => Just(C::ReserveWithTimeout(0)),
        1 => small().prop_map(C::ReserveJob),
        2 => small().prop_map(C::Delete),
        1 => (small(), any::<u32>(), 0u32..2).prop_map(|(id, pri, delay)| C::Release { id, pri, delay }),
        1 => (small(), any::<u32>()).prop_map(|(id, pri)| C::Bury { id, pri }),
        1 => small().prop_map(C::Touch),
        1 => tube().prop_map(C::Watch),
        1 => tube().prop_map(C::Ignore),
        1 => small().prop_map(C::Peek),
        1 => Just(C::PeekReady),
        1 => Just(C::PeekDelayed),
        1 => Just(C::PeekBuried),
        1 => (0u32..5).prop_map(C::Kick),
        1 => small().prop_map(C::KickJob),
        1 => small().prop_map(C::StatsJob),
        1 => tube().prop_map(C::StatsTube),
        1 => Just(C::Stats),
        1 => Just(C::ListTubes),
        1 => Just(C::ListTubeUsed),
        1 => Just(C::ListTubesWatched),
        1 => (tube(), 0u32..2).prop_map(|(tube, delay)| C::PauseTube { tube, delay }),
    ]
}

/// One piece of the stream a client writes.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => command().prop_map(|c| c.encode()),
        // A valid command with one word replaced by random text.
        2 => (command(), any::<prop::sample::Index>(), "[ -~]{0,12}").prop_map(|(c, at, word)| {
            let wire = c.encode();
            let text = String::from_utf8_lossy(&wire).into_owned();
            let line = text.split("\r\n").next().unwrap_or_default();
            let mut words: Vec<&str> = line.split(' ').collect();
            *at.get_mut(&mut words) = &word;
            format!("{}\r\n", words.join(" ")).into_bytes()
        }),
        // A put whose announced size is wrong or beyond the limit.
        2 => (0usize..MAX_JOB_SIZE * 2, "[ -~]{0,40}", prop::bool::ANY).prop_map(|(n, body, crlf)| {
            let mut out = format!("put 1 0 10 {n}\r\n{body}").into_bytes();
            if crlf {
                out.extend_from_slice(b"\r\n");
            }
            out
        }),
        1 => (MAX_LINE - 4..MAX_LINE * 3).prop_map(|n| {
            let mut out = vec![b'x'; n];
            out.extend_from_slice(b"\r\n");
            out
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(b"\r\n".to_vec()),
    ]
}

/// Checks that `out` is a sequence of documented replies; `Err` says where
/// it stopped making sense.
fn check_replies(mut out: &[u8]) -> Result<usize, String> {
    let mut count = 0;
    while !out.is_empty() {
        let Some(end) = out.windows(2).position(|w| w == b"\r\n") else {
            return Err(format!(
                "unterminated reply {:?}",
                String::from_utf8_lossy(out)
            ));
        };
        let line = std::str::from_utf8(&out[..end]).map_err(|_| "non-UTF-8 reply line")?;
        out = &out[end + 2..];
        let words: Vec<&str> = line.split(' ').collect();
        let numeric = |w: &&str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit());
        let body_len: Option<usize> = match words[..] {
            ["RESERVED" | "FOUND", id, len] if numeric(&id) && numeric(&len) => len.parse().ok(),
            ["OK", len] if numeric(&len) => len.parse().ok(),
            ["USING", tube] if is_valid_name(tube.as_bytes()) => None,
            [word, ref args @ ..] => {
                let known = REPLIES
                    .iter()
                    .any(|&(w, n)| w == word && n == args.len() && args.iter().all(numeric));
                if !known {
                    return Err(format!("undocumented reply {line:?}"));
                }
                None
            }
            [] => return Err("empty reply".into()),
        };
        if let Some(len) = body_len {
            if out.len() < len + 2 || &out[len..len + 2] != b"\r\n" {
                return Err(format!("{line:?} not followed by {len} bytes and CRLF"));
            }
            out = &out[len + 2..];
        }
        count += 1;
    }
    Ok(count)
}

/// Writes `stream`, half-closes, reads until the server closes (or goes
/// quiet: a stream that ends in an incomplete `put` is still waited on).
fn exchange(stream: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut conn = TcpStream::connect(server())?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))?;
    conn.write_all(stream)?;
    conn.shutdown(Shutdown::Write)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(out)
            }
            // The server may reset a connection it closed with our bytes
            // unread (after `quit`-like endings); what came before counts.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn listener_answers_fuzzed_streams_only_with_documented_replies(
        frames in prop::collection::vec(frame(), 1..24)
    ) {
        let stream = frames.concat();
        let out = exchange(&stream).map_err(|e| TestCaseError::fail(format!("i/o: {e}")))?;
        if let Err(why) = check_replies(&out) {
            prop_assert!(false, "{why}\nsent {:?}\ngot {:?}",
                String::from_utf8_lossy(&stream), String::from_utf8_lossy(&out));
        }
        // The server is still up and answering.
        let alive = exchange(b"list-tube-used\r\n").map_err(|e| TestCaseError::fail(format!("i/o: {e}")))?;
        prop_assert!(alive.starts_with(b"USING "), "after the case: {:?}", String::from_utf8_lossy(&alive));
    }
}
