//! A reader of beanstalkd's binlog (its write-ahead log, `beanstalkd -b
//! DIR`), accepting exactly what beanstalkd 1.12's own reader (`file.c`,
//! `walg.c`) accepts, written from its format rather than its code.
//!
//! # Format
//!
//! The directory holds `binlog.N` files (N decimal), read in increasing N.
//! Each file starts with a format version, a C `int`, then records until
//! the end of the file. beanstalkd writes everything raw from memory, so
//! integers are in the host's byte order and structs carry the host's C
//! padding: this reader assumes the x86_64 (LP64, little-endian) layout,
//! the one Debian's and the upstream builds write on x86_64 and aarch64.
//!
//! Version 7 (what 1.12 and later write), one record:
//!
//! ```text
//! int32   namelen      tube name length; 0: a short (update) record
//! u8[n]   tube name    namelen bytes, no NUL
//! Jobrec  (80 bytes)
//! u8[]    body         body_size bytes, in full records only (namelen > 0)
//!
//! Jobrec   offset size
//!   id          0   8  u64; 0 marks the zeroed, preallocated rest of a file
//!   pri         8   4  u32   (4 bytes padding at 12)
//!   delay      16   8  i64 ns
//!   ttr        24   8  i64 ns
//!   body_size  32   4  i32, body bytes including the trailing "\r\n"
//!                          (4 bytes padding at 36)
//!   created_at 40   8  i64 ns, wall clock (gettimeofday)
//!   deadline_at 48  8  i64 ns, wall clock: when a delayed job is due
//!   reserve_ct 56   4  u32
//!   timeout_ct 60   4  u32
//!   release_ct 64   4  u32
//!   bury_ct    68   4  u32
//!   kick_ct    72   4  u32
//!   state      76   1  0 invalid (deleted), 1 ready, 2 reserved,
//!                      3 buried, 4 delayed
//!                          (3 bytes tail padding: sizeof = 80)
//! ```
//!
//! Version 5 (older releases) differs in three places: `namelen` is a
//! `size_t` (8 bytes), the struct is read as its first 77 bytes (up to
//! its state byte, same offsets as above), and the four times are in
//! microseconds.
//!
//! # Replay, as beanstalkd does it
//!
//! - A full record of an unknown job creates it in its tube; of a known
//!   job (compaction moves jobs to a newer file) it replaces the fields
//!   and the body, the tube staying the first one.
//! - A short record updates the known job's fields; a short record of an
//!   unknown job is skipped (its full record was in a file since deleted,
//!   so the job is gone).
//! - State 0 removes the job. A reserved job comes back ready.
//! - A record with `id` 0 ends the file (preallocated zeros), as does a
//!   partial `namelen` at the end. Anything else malformed (a negative or
//!   overlong `namelen`, an unknown state, a record cut short) is damage:
//!   beanstalkd stops reading that file there (dropping the job the bad
//!   record named) and goes on with the next file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// beanstalkd's `MAX_TUBE_NAME_LEN`: names are at most 200 bytes.
const MAX_TUBE_NAME_LEN: u64 = 201;
/// beanstalkd's largest `-z` (`JOB_DATA_SIZE_LIMIT_MAX`, 1 GiB): a bigger
/// `body_size` of a new job is damage, not an allocation to attempt.
pub const MAX_BODY_SIZE: i64 = 1 << 30;
const JOBREC7_SIZE: usize = 80;
const JOBREC5_SIZE: usize = 77;

/// A job's state as the binlog last recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobState {
    Ready,
    /// Reserved when beanstalkd stopped; beanstalkd makes it ready again.
    Reserved,
    Buried,
    Delayed,
}

/// One live job after replaying every file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: u64,
    pub tube: String,
    pub pri: u32,
    pub delay_ns: i64,
    pub ttr_ns: i64,
    pub created_at_ns: i64,
    /// Wall-clock ns: when a delayed job becomes ready.
    pub deadline_at_ns: i64,
    pub state: JobState,
    /// As stored: ends with beanstalkd's `\r\n`.
    pub body: Vec<u8>,
}

impl Job {
    /// The body a client put, without the `\r\n` that ends it on the wire.
    pub fn payload(&self) -> &[u8] {
        self.body.strip_suffix(b"\r\n").unwrap_or(&self.body)
    }
}

/// Where a file stopped being readable, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: at byte {offset}: {problem}", path.display())]
pub struct Damage {
    pub path: PathBuf,
    pub offset: u64,
    pub problem: String,
}

/// A whole binlog directory, replayed.
#[derive(Debug, Default)]
pub struct Binlog {
    /// Live jobs by id.
    pub jobs: BTreeMap<u64, Job>,
    /// The `binlog.N` files read, in order.
    pub files: Vec<PathBuf>,
    /// Records read (full and short, including deletions).
    pub records: u64,
    /// Files that stopped early, at the start of the bad record; what
    /// beanstalkd would restore is `jobs`.
    pub damage: Vec<Damage>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot list {}: {source}", path.display())]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Reads every `binlog.N` of `dir` in increasing N.
pub fn read_dir(dir: &Path) -> Result<Binlog, ReadError> {
    let list = |source| ReadError::List {
        path: dir.to_path_buf(),
        source,
    };
    let mut numbered = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list)? {
        let name = entry.map_err(list)?.file_name();
        if let Some(n) = name.to_str().and_then(file_number) {
            numbered.push((n, dir.join(&name)));
        }
    }
    numbered.sort();
    let mut binlog = Binlog::default();
    for (_, path) in numbered {
        let bytes = std::fs::read(&path).map_err(|source| ReadError::Read {
            path: path.clone(),
            source,
        })?;
        binlog.read_file(&path, &bytes);
        binlog.files.push(path);
    }
    Ok(binlog)
}

/// N of `binlog.N`: decimal digits only.
fn file_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("binlog.")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl Binlog {
    /// Replays one file's bytes onto `self.jobs`; damage is recorded and
    /// ends this file, as in beanstalkd.
    pub fn read_file(&mut self, path: &Path, bytes: &[u8]) {
        let mut cursor = Cursor { bytes, at: 0 };
        if let Err(problem) = self.replay(&mut cursor) {
            self.damage.push(Damage {
                path: path.to_path_buf(),
                offset: cursor.at as u64,
                problem,
            });
        }
    }

    fn replay(&mut self, cursor: &mut Cursor<'_>) -> Result<(), String> {
        let version = cursor.take(4, "the format version")?;
        let version = i32::from_le_bytes(array(version));
        let format = match version {
            7 => Format::V7,
            5 => Format::V5,
            other => {
                return Err(format!(
                    "unknown binlog version {other} (this reads 5 and 7)"
                ))
            }
        };
        loop {
            // Damage is reported at the start of the record it is in.
            let start = cursor.at;
            let read = format.record(cursor).and_then(|record| match record {
                Some(record) => self.apply(record, cursor).map(|()| true),
                None => Ok(false),
            });
            match read {
                Ok(true) => self.records += 1,
                Ok(false) => return Ok(()),
                Err(problem) => {
                    cursor.at = start;
                    return Err(problem);
                }
            }
        }
    }

    /// One record onto the jobs; reads its body from `cursor` when full.
    fn apply(&mut self, record: Record, cursor: &mut Cursor<'_>) -> Result<(), String> {
        let Record { tube, rec } = record;
        let known = self.jobs.contains_key(&rec.id);
        if !known && tube.is_none() {
            return Ok(());
        }
        let state = match rec.state {
            0 => {
                self.jobs.remove(&rec.id);
                return Ok(());
            }
            1 => JobState::Ready,
            2 => JobState::Reserved,
            3 => JobState::Buried,
            4 => JobState::Delayed,
            other => {
                self.jobs.remove(&rec.id);
                return Err(format!("job {}: unknown state {other}", rec.id));
            }
        };
        if !known && !(0..=MAX_BODY_SIZE).contains(&i64::from(rec.body_size)) {
            return Err(format!(
                "job {}: body size {} is outside 0..={MAX_BODY_SIZE}",
                rec.id, rec.body_size
            ));
        }
        let job = self.jobs.entry(rec.id).or_insert_with(|| Job {
            id: rec.id,
            tube: tube.clone().unwrap_or_default(),
            pri: 0,
            delay_ns: 0,
            ttr_ns: 0,
            created_at_ns: 0,
            deadline_at_ns: 0,
            state,
            body: Vec::new(),
        });
        job.pri = rec.pri;
        job.delay_ns = rec.delay_ns;
        job.ttr_ns = rec.ttr_ns;
        job.created_at_ns = rec.created_at_ns;
        job.deadline_at_ns = rec.deadline_at_ns;
        job.state = state;
        if tube.is_some() {
            let size = usize::try_from(rec.body_size).unwrap_or(usize::MAX);
            match cursor.take(size, "the job body") {
                Ok(body) => job.body = body.to_vec(),
                Err(problem) => {
                    self.jobs.remove(&rec.id);
                    return Err(format!("job {}: {problem}", rec.id));
                }
            }
        }
        Ok(())
    }
}

/// The fields of a `Jobrec` the import uses, times in ns.
#[derive(Debug)]
struct Jobrec {
    id: u64,
    pri: u32,
    delay_ns: i64,
    ttr_ns: i64,
    body_size: i32,
    created_at_ns: i64,
    deadline_at_ns: i64,
    state: u8,
}

struct Record {
    /// `None`: a short record.
    tube: Option<String>,
    rec: Jobrec,
}

#[derive(Clone, Copy)]
enum Format {
    V5,
    V7,
}

impl Format {
    /// The next record's name and struct, or `None` at the end of the file.
    fn record(self, cursor: &mut Cursor<'_>) -> Result<Option<Record>, String> {
        let width = match self {
            Format::V7 => 4,
            Format::V5 => 8,
        };
        // A partial length at the very end is an end, not damage.
        let Some(raw) = cursor.take_whole(width) else {
            return Ok(None);
        };
        let namelen = match self {
            Format::V7 => i64::from(i32::from_le_bytes(array(raw))),
            Format::V5 => i64::try_from(u64::from_le_bytes(array(raw))).unwrap_or(i64::MAX),
        };
        if namelen < 0 {
            return Err(format!("tube name length {namelen} is negative"));
        }
        if namelen.unsigned_abs() >= MAX_TUBE_NAME_LEN {
            return Err(format!(
                "tube name length {namelen} exceeds the maximum of {}",
                MAX_TUBE_NAME_LEN - 1
            ));
        }
        let name = cursor.take(namelen.unsigned_abs() as usize, "the tube name")?;
        // beanstalkd's names are ASCII; other bytes (which its protocol
        // never lets in) become U+FFFD, and no queue name holds those.
        let tube = match name {
            [] => None,
            name => Some(String::from_utf8_lossy(name).into_owned()),
        };
        let size = match self {
            Format::V7 => JOBREC7_SIZE,
            Format::V5 => JOBREC5_SIZE,
        };
        let raw = cursor.take(size, "the job struct")?;
        let rec = self.jobrec(raw);
        if rec.id == 0 {
            return Ok(None);
        }
        Ok(Some(Record { tube, rec }))
    }

    /// Decodes a `Jobrec` (offsets in the module docs).
    fn jobrec(self, raw: &[u8]) -> Jobrec {
        let u64_at = |at: usize| u64::from_le_bytes(array(&raw[at..at + 8]));
        let i64_at = |at: usize| i64::from_le_bytes(array(&raw[at..at + 8]));
        // Version 5 stores microseconds, as u64; 1.12 multiplies by 1000.
        let ns_at = |at: usize| match self {
            Format::V7 => i64_at(at),
            Format::V5 => (u64_at(at) as i64).wrapping_mul(1000),
        };
        Jobrec {
            id: u64_at(0),
            pri: u32::from_le_bytes(array(&raw[8..12])),
            delay_ns: ns_at(16),
            ttr_ns: ns_at(24),
            body_size: i32::from_le_bytes(array(&raw[32..36])),
            created_at_ns: ns_at(40),
            deadline_at_ns: ns_at(48),
            state: raw[76],
        }
    }
}

/// `bytes[..N]` as an array; callers slice exactly N bytes.
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// Exactly `n` bytes, or damage naming `what` was cut short.
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        self.take_whole(n).ok_or_else(|| {
            format!(
                "the file ends {} byte(s) into {what} of {n} byte(s)",
                self.bytes.len() - self.at
            )
        })
    }

    /// Exactly `n` bytes, or `None` (consuming nothing) when fewer are left.
    fn take_whole(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }
}

#[cfg(test)]
#[path = "binlog_tests.rs"]
mod tests;
