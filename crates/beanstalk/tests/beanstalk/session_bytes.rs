//! The byte stream, not the commands: pipelining, and one fixed session
//! cut at arbitrary points must get byte-identical replies.

use proptest::prelude::*;

use crate::common::{start, Client};

/// A session touching most of the grammar: bodies, an empty body, a body
/// that looks like commands, errors in between, and a blocking reserve
/// that is answered at once.
pub const SESSION: &[u8] = b"use t1\r\n\
put 1 0 60 5\r\nhello\r\n\
put 0 0 60 0\r\n\r\n\
put 2 0 60 7\r\nstats\r\n\r\n\
watch t1\r\n\
ignore default\r\n\
reserve-with-timeout 0\r\n\
delete 2\r\n\
reserve\r\n\
release 1 5 0\r\n\
peek-ready\r\n\
bogus command\r\n\
put 1 0 60 3\r\nabcde\r\n\
delete x\r\n\
bury 1 1\r\n\
kick 5\r\n\
list-tubes-watched\r\n\
stats-job 3\r\n\
quit\r\n";

/// What SESSION must produce (ages and times are all 0 within a second).
const EXPECTED: &[u8] = b"USING t1\r\n\
INSERTED 1\r\n\
INSERTED 2\r\n\
INSERTED 3\r\n\
WATCHING 2\r\n\
WATCHING 1\r\n\
RESERVED 2 0\r\n\r\n\
DELETED\r\n\
RESERVED 1 5\r\nhello\r\n\
RELEASED\r\n\
FOUND 3 7\r\nstats\r\n\r\n\
UNKNOWN_COMMAND\r\n\
EXPECTED_CRLF\r\n\
UNKNOWN_COMMAND\r\n\
BAD_FORMAT\r\n\
NOT_FOUND\r\n\
KICKED 0\r\n\
OK 9\r\n---\n- t1\n\r\n";

/// Sends `chunks` one write each, then returns everything the server sent
/// until it closed.
async fn run_session(chunks: &[&[u8]]) -> Vec<u8> {
    let server = start().await;
    let mut c = Client::connect(server.addr).await;
    for chunk in chunks {
        c.send(chunk).await;
        // Let the server read this chunk before the next write, so chunks
        // tend to arrive as separate reads.
        tokio::task::yield_now().await;
    }
    c.read_to_end().await
}

/// Checks the transcript up to the `stats-job` reply, whose YAML is then
/// checked by shape (its `age` may tick over a second boundary).
pub fn check(transcript: &[u8]) {
    assert!(
        transcript.starts_with(EXPECTED),
        "got:\n{}",
        String::from_utf8_lossy(transcript)
    );
    let rest = String::from_utf8_lossy(&transcript[EXPECTED.len()..]).into_owned();
    assert!(rest.starts_with("OK "), "{rest}");
    assert!(
        rest.contains("\nid: 3\ntube: \"t1\"\nstate: ready\npri: 2\n"),
        "{rest}"
    );
    assert!(rest.ends_with("kicks: 0\n\r\n"), "{rest}");
}

#[tokio::test]
async fn pipelined_session_in_one_write() {
    check(&run_session(&[SESSION]).await);
}

#[tokio::test]
async fn session_one_byte_per_write() {
    let chunks: Vec<&[u8]> = SESSION.chunks(1).collect();
    check(&run_session(&chunks).await);
}

fn split_at_cuts(cuts: &[usize]) -> Vec<&'static [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % SESSION.len()).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([SESSION.len()]) {
        if cut > from {
            chunks.push(&SESSION[from..cut]);
            from = cut;
        }
    }
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn session_split_anywhere_gets_the_same_replies(cuts in prop::collection::vec(any::<usize>(), 0..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let chunks = split_at_cuts(&cuts);
        let whole = runtime.block_on(run_session(&[SESSION]));
        let split = runtime.block_on(run_session(&chunks));
        check(&split);
        // Byte-identical up to the time-dependent stats-job document.
        prop_assert_eq!(&whole[..EXPECTED.len()], &split[..EXPECTED.len()]);
    }
}
