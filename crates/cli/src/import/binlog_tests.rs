//! The binlog reader on hand-built files: each version, each replay rule,
//! and damaged input (a clear `Damage`, never a panic).

use std::path::Path;

use rand::{Rng as _, SeedableRng as _};

use super::*;

/// A `Jobrec` to encode; times in the version's own unit.
#[derive(Clone, Copy)]
struct Rec {
    id: u64,
    pri: u32,
    delay: i64,
    ttr: i64,
    body_size: i32,
    created_at: i64,
    deadline_at: i64,
    state: u8,
}

impl Rec {
    fn new(id: u64, state: u8, body: &[u8]) -> Rec {
        Rec {
            id,
            pri: 1024,
            delay: 0,
            ttr: 60_000_000_000,
            body_size: i32::try_from(body.len()).expect("small body"),
            created_at: 1_700_000_000_000_000_000,
            deadline_at: 1_700_000_100_123_456_789,
            state,
        }
    }

    /// The 80-byte C struct; padding bytes filled with 0xAA to prove they
    /// are skipped.
    fn v7(&self) -> Vec<u8> {
        let mut b = vec![0xAA; 80];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..12].copy_from_slice(&self.pri.to_le_bytes());
        b[16..24].copy_from_slice(&self.delay.to_le_bytes());
        b[24..32].copy_from_slice(&self.ttr.to_le_bytes());
        b[32..36].copy_from_slice(&self.body_size.to_le_bytes());
        b[40..48].copy_from_slice(&self.created_at.to_le_bytes());
        b[48..56].copy_from_slice(&self.deadline_at.to_le_bytes());
        for (i, counter) in (56..76).step_by(4).enumerate() {
            b[counter..counter + 4].copy_from_slice(&(i as u32 + 1).to_le_bytes());
        }
        b[76] = self.state;
        b
    }

    /// Version 5 reads the first 77 bytes (up to the state).
    fn v5(&self) -> Vec<u8> {
        self.v7()[..77].to_vec()
    }
}

fn file(version: i32, records: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = version.to_le_bytes().to_vec();
    for record in records {
        bytes.extend_from_slice(record);
    }
    bytes
}

fn full7(tube: &str, rec: Rec, body: &[u8]) -> Vec<u8> {
    let mut b = (tube.len() as i32).to_le_bytes().to_vec();
    b.extend_from_slice(tube.as_bytes());
    b.extend_from_slice(&rec.v7());
    b.extend_from_slice(body);
    b
}

fn short7(rec: Rec) -> Vec<u8> {
    let mut b = 0i32.to_le_bytes().to_vec();
    b.extend_from_slice(&rec.v7());
    b
}

fn full5(tube: &str, rec: Rec, body: &[u8]) -> Vec<u8> {
    let mut b = (tube.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(tube.as_bytes());
    b.extend_from_slice(&rec.v5());
    b.extend_from_slice(body);
    b
}

fn short5(rec: Rec) -> Vec<u8> {
    let mut b = 0u64.to_le_bytes().to_vec();
    b.extend_from_slice(&rec.v5());
    b
}

fn replay(files: &[Vec<u8>]) -> Binlog {
    let mut binlog = Binlog::default();
    for (n, bytes) in files.iter().enumerate() {
        binlog.read_file(Path::new(&format!("binlog.{}", n + 1)), bytes);
    }
    binlog
}

#[test]
fn version_7_full_record_keeps_every_field() {
    let body = b"he\x00llo\r\n";
    let mut rec = Rec::new(9, 4, body);
    rec.pri = 7;
    rec.delay = 30_000_000_000;
    let binlog = replay(&[file(7, &[full7("emails", rec, body)])]);
    assert!(binlog.damage.is_empty(), "{:?}", binlog.damage);
    assert_eq!(binlog.records, 1);
    let job = &binlog.jobs[&9];
    assert_eq!(
        job,
        &Job {
            id: 9,
            tube: "emails".into(),
            pri: 7,
            delay_ns: 30_000_000_000,
            ttr_ns: 60_000_000_000,
            created_at_ns: 1_700_000_000_000_000_000,
            deadline_at_ns: 1_700_000_100_123_456_789,
            state: JobState::Delayed,
            body: body.to_vec(),
        }
    );
    assert_eq!(job.payload(), b"he\x00llo");
}

#[test]
fn version_5_reads_77_byte_structs_and_microseconds() {
    let body = b"x\r\n";
    let mut rec = Rec::new(3, 3, body);
    rec.ttr = 5_000_000; // 5 s in µs
    rec.created_at = 1_600_000_000_000_000;
    rec.deadline_at = 1_600_000_001_000_001;
    let mut update = rec;
    update.state = 1;
    update.pri = 2;
    let binlog = replay(&[file(5, &[full5("old-tube", rec, body), short5(update)])]);
    assert!(binlog.damage.is_empty(), "{:?}", binlog.damage);
    let job = &binlog.jobs[&3];
    assert_eq!(job.tube, "old-tube");
    assert_eq!(job.ttr_ns, 5_000_000_000);
    assert_eq!(job.created_at_ns, 1_600_000_000_000_000_000);
    assert_eq!(job.deadline_at_ns, 1_600_000_001_000_001_000);
    assert_eq!((job.state, job.pri), (JobState::Ready, 2));
    assert_eq!(job.body, body);
}

#[test]
fn later_records_update_and_delete_across_files() {
    let (a, b, c) = (b"a\r\n", b"bb\r\n", b"ccc\r\n");
    let first = file(
        7,
        &[
            full7("t1", Rec::new(1, 1, a), a),
            full7("t2", Rec::new(2, 1, b), b),
            full7("t1", Rec::new(3, 1, c), c),
            short7(Rec::new(2, 2, b)), // reserved
        ],
    );
    let mut buried = Rec::new(1, 3, a);
    buried.pri = 42;
    let second = file(
        7,
        &[
            short7(buried),
            short7(Rec::new(3, 0, c)), // deleted
            // Compaction: job 2's full record again, in a newer file, under
            // a name that does not change its tube.
            full7("ignored", Rec::new(2, 2, b), b),
        ],
    );
    let binlog = replay(&[first, second]);
    assert!(binlog.damage.is_empty(), "{:?}", binlog.damage);
    assert_eq!(binlog.jobs.keys().copied().collect::<Vec<_>>(), [1, 2]);
    assert_eq!(binlog.jobs[&1].state, JobState::Buried);
    assert_eq!(binlog.jobs[&1].pri, 42);
    assert_eq!(binlog.jobs[&1].body, a);
    assert_eq!(binlog.jobs[&2].state, JobState::Reserved);
    assert_eq!(binlog.jobs[&2].tube, "t2");
    assert_eq!(binlog.records, 7);
}

#[test]
fn a_short_record_of_an_unknown_job_is_skipped() {
    let binlog = replay(&[file(7, &[short7(Rec::new(5, 1, b"z\r\n"))])]);
    assert!(binlog.damage.is_empty());
    assert!(binlog.jobs.is_empty());
}

#[test]
fn zeros_and_a_partial_length_end_a_file_cleanly() {
    let body = b"\r\n";
    let mut zeros = file(7, &[full7("t", Rec::new(1, 1, body), body)]);
    zeros.extend_from_slice(&[0; 4096]);
    let mut partial = file(7, &[full7("t", Rec::new(2, 1, body), body)]);
    partial.extend_from_slice(&[1, 0]);
    let binlog = replay(&[zeros, partial]);
    assert!(binlog.damage.is_empty(), "{:?}", binlog.damage);
    assert_eq!(binlog.jobs.len(), 2);
    assert_eq!(binlog.jobs[&1].payload(), b"");
}

#[test]
fn an_unknown_version_is_damage() {
    let binlog = replay(&[file(6, &[])]);
    assert_eq!(binlog.damage.len(), 1);
    assert!(
        binlog.damage[0]
            .problem
            .contains("unknown binlog version 6"),
        "{}",
        binlog.damage[0]
    );
    let empty = replay(&[Vec::new()]);
    assert!(empty.damage[0].problem.contains("format version"));
}

#[test]
fn bad_lengths_and_states_are_damage_and_the_next_file_still_counts() {
    let body = b"ok\r\n";
    let good = full7("t", Rec::new(1, 1, body), body);
    let mut negative = (-1i32).to_le_bytes().to_vec();
    negative.extend_from_slice(&[0; 100]);
    let mut overlong = 201i32.to_le_bytes().to_vec();
    overlong.extend_from_slice(&[b'a'; 300]);
    let bad_state = full7("t", Rec::new(7, 9, body), body);
    let mut huge = Rec::new(8, 1, body);
    huge.body_size = -5;
    let huge = full7("t", huge, body);
    let next = file(7, &[full7("u", Rec::new(2, 1, body), body)]);
    for (bad, expect) in [
        (negative, "is negative"),
        (overlong, "exceeds the maximum of 200"),
        (bad_state, "unknown state 9"),
        (huge, "body size -5"),
    ] {
        let binlog = replay(&[file(7, &[good.clone(), bad]), next.clone()]);
        assert_eq!(binlog.damage.len(), 1, "{expect}");
        let damage = &binlog.damage[0];
        assert!(damage.problem.contains(expect), "{damage}");
        assert_eq!(damage.offset, 4 + good.len() as u64, "{damage}");
        assert_eq!(binlog.jobs.keys().copied().collect::<Vec<_>>(), [1, 2]);
    }
}

#[test]
fn a_cut_body_drops_its_job_even_when_known_before() {
    let body = b"0123456789\r\n";
    let mut cut = full7("t", Rec::new(1, 3, body), body);
    cut.truncate(cut.len() - 3);
    let binlog = replay(&[
        file(7, &[full7("t", Rec::new(1, 1, body), body)]),
        file(7, &[cut]),
    ]);
    assert_eq!(binlog.damage.len(), 1);
    assert!(
        binlog.damage[0].problem.contains("job 1:"),
        "{}",
        binlog.damage[0]
    );
    assert!(binlog.damage[0].problem.contains("the job body"));
    assert!(binlog.jobs.is_empty());
}

#[test]
fn every_truncation_of_a_valid_file_is_read_without_panic() {
    let bodies: [&[u8]; 3] = [b"\r\n", b"abc\r\n", &[0xFF; 300]];
    let mut records = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        records.push(full7("tube", Rec::new(i as u64 + 1, 4, body), body));
        records.push(short7(Rec::new(i as u64 + 1, 2, body)));
    }
    let whole = file(7, &records);
    for len in 0..=whole.len() {
        let binlog = replay(&[whole[..len].to_vec()]);
        // Whatever is cut, what was read whole is kept, and a record cut
        // after its length is reported with its offset.
        assert!(binlog.jobs.len() <= bodies.len());
        for damage in &binlog.damage {
            assert!(damage.offset <= len as u64, "{damage}");
        }
    }
    let binlog = replay(&[whole]);
    assert!(binlog.damage.is_empty());
    assert_eq!(binlog.jobs.len(), 3);
}

#[test]
fn random_bytes_never_panic() {
    // Fixed seed: the same inputs on every run; printed for a failure.
    let seed = 0x5eed_b1d1_u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..2000 {
        let len = rng.random_range(0..600);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if bytes.len() >= 4 && case % 2 == 0 {
            let version: i32 = if case % 4 == 0 { 7 } else { 5 };
            bytes[..4].copy_from_slice(&version.to_le_bytes());
        }
        let binlog = replay(&[bytes]);
        assert!(binlog.damage.len() <= 1, "seed {seed:#x} case {case}");
    }
}

#[test]
fn file_numbers_are_decimal_suffixes() {
    assert_eq!(file_number("binlog.1"), Some(1));
    assert_eq!(file_number("binlog.0042"), Some(42));
    assert_eq!(file_number("binlog."), None);
    assert_eq!(file_number("binlog.1.tmp"), None);
    assert_eq!(file_number("lock"), None);
}

#[test]
fn read_dir_reads_files_in_numeric_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = b"v\r\n";
    let mut buried = Rec::new(1, 3, body);
    buried.pri = 5;
    // binlog.10 must come after binlog.9 (not as text, where it sorts first).
    std::fs::write(
        dir.path().join("binlog.9"),
        file(7, &[full7("t", Rec::new(1, 1, body), body)]),
    )
    .expect("write");
    std::fs::write(dir.path().join("binlog.10"), file(7, &[short7(buried)])).expect("write");
    std::fs::write(dir.path().join("lock"), b"").expect("write");
    let binlog = read_dir(dir.path()).expect("read");
    assert_eq!(binlog.files.len(), 2);
    assert_eq!(binlog.jobs[&1].state, JobState::Buried);
}
