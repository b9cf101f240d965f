//! Finding damaged files and records in a data directory (`delayd check`,
//! and the cheap part of it that [`crate::LocalBroker::open`] runs).
//!
//! - `journal`: every journal batch, checksum-verified, read without fjall
//!   (fjall's reader truncates a journal at the first entry it cannot
//!   decode, so it must not see damage inside committed batches).
//! - `tables`: each keyspace's version file against the checksum in its
//!   `current` file, and every table file against the checksum the version
//!   file lists.
//! - `records`: every key and value read through fjall (block checksums)
//!   and decoded as a delayd record.
//!
//! What each layer detects, and what to do, is in docs/storage.md
//! ("Corruption").

mod journal;
mod records;
mod tables;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::StoreError;
use crate::store::Store;

/// What kind of file a finding is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A journal file (`N.jnl`): the most recent writes, not yet in tables.
    Journal,
    /// A table file (`keyspaces/K/tables/N`): flushed, sorted records.
    Table,
    /// A keyspace's version file (`keyspaces/K/vN` or `current`): the list
    /// of its tables.
    Version,
    /// A record that was read but is not a valid delayd record.
    Record,
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Journal => "journal",
            FileKind::Table => "table",
            FileKind::Version => "version",
            FileKind::Record => "record",
        })
    }
}

/// Whether a finding is lost committed data or a crash's torn last write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Bytes that were written and acknowledged do not read back.
    Damage,
    /// The newest journal ends in a partial or garbled batch: what a crash
    /// during a write leaves. The next open cuts it; nothing acknowledged
    /// under `Durability::Always` is in it.
    TornTail,
}

/// One damaged journal batch, file or record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Relative to the data directory.
    pub path: PathBuf,
    pub kind: FileKind,
    pub severity: Severity,
    /// Where in the file (`offset 4096, batch seqno 17`), or which key.
    pub location: String,
    pub problem: String,
    /// Which keyspace and, when readable, which queues, messages or seqs.
    pub affects: String,
    /// What the operator can do.
    pub action: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({}): {}; affects {}",
            self.kind,
            self.path.display(),
            self.location,
            self.problem,
            self.affects
        )
    }
}

/// What `delayd check` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    pub journals: u64,
    pub journal_batches: u64,
    pub tables: u64,
    /// Records read and decoded (0 if the engine could not open the copy).
    pub records: u64,
    /// Why records were not checked, if they were not.
    pub records_unchecked: Option<String>,
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// Any finding other than a torn tail, or a store the engine cannot
    /// open although no file was found damaged.
    pub fn damaged(&self) -> bool {
        self.records_unchecked.is_some()
            || self.findings.iter().any(|f| f.severity == Severity::Damage)
    }
}

const RESTORE: &str = "restore the data directory from a backup";

/// Keyspace ids are given by fjall in creation order, which `Store::open`
/// fixes (pinned by a test).
const KEYSPACES: [&str; 12] = [
    "fjall catalogue",
    "meta",
    "queues",
    "messages",
    "payloads",
    "due",
    "pinned",
    "schedules",
    "retained",
    "expiry",
    "events",
    "successors",
];

fn keyspace_name(id: u64) -> &'static str {
    KEYSPACES.get(id as usize).copied().unwrap_or("unknown")
}

/// What a keyspace's records are, for an operator.
fn keyspace_holds(id: u64) -> &'static str {
    match keyspace_name(id) {
        "fjall catalogue" => "fjall's list of keyspace names (every keyspace)",
        "meta" => "the format version and seq high-water mark",
        "queues" => "queue configs and counts",
        "messages" => "message records (state, schedule, attempts, headers)",
        "payloads" => "message payloads",
        "due" => "the due-time index of scheduled messages",
        "pinned" => "the index of leased and dead messages",
        "schedules" => "recurring schedules (definition, revision, cursor)",
        "retained" => "ended messages kept for their queue's retain_ms",
        "expiry" => "the index of retained messages by the time they go",
        "events" => "messages' histories (their last events)",
        "successors" => "leased messages' successors (replace and debounce)",
        _ => "an unknown keyspace",
    }
}

fn relative(dir: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(dir).unwrap_or(path).to_path_buf()
}

/// The journal files of `dir`, oldest first.
fn journal_files(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jnl") {
            let id = path.file_stem().and_then(|s| s.to_str()?.parse().ok());
            out.push((id.unwrap_or(u64::MAX), path));
        }
    }
    out.sort();
    Ok(out)
}

/// The journal files of a data directory, oldest first (the last is the
/// one being written).
pub fn journals(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    Ok(journal_files(dir)?.into_iter().map(|(_, p)| p).collect())
}

/// The journal being written (the newest), with its number.
pub(crate) fn newest_journal(dir: &Path) -> std::io::Result<Option<(u64, PathBuf)>> {
    Ok(journal_files(dir)?.pop())
}

/// Counts from a journal scan, and where the newest journal's written
/// bytes end (the only journal a crash can leave torn: fjall fsyncs a
/// journal before sealing it).
#[derive(Default)]
pub(crate) struct JournalTally {
    pub journals: u64,
    pub batches: u64,
    pub newest_written_end: Option<(PathBuf, u64)>,
    /// Where the newest journal's torn last batch starts, if it has one:
    /// open cuts the file there (fjall refuses a last batch whose checksum
    /// does not match instead of cutting it).
    pub torn_at: Option<(PathBuf, u64)>,
}

/// Checks every journal batch, counting into `tally`.
fn check_journals(dir: &Path, tally: &mut JournalTally) -> Result<Vec<Finding>, StoreError> {
    let files = journal_files(dir).map_err(|source| io(dir, source))?;
    let newest = files.last().map(|(_, p)| p.clone());
    let mut out = Vec::new();
    for (_, path) in &files {
        let bytes = std::fs::read(path).map_err(|source| io(path, source))?;
        let scan = journal::scan(&bytes);
        tally.journals += 1;
        tally.batches += scan.batches;
        if Some(path) == newest.as_ref() {
            tally.newest_written_end = Some((path.clone(), scan.written_end));
            tally.torn_at = scan
                .bad
                .last()
                .filter(|bad| !bad.not_last)
                .map(|bad| (path.clone(), bad.offset));
        }
        for bad in scan.bad {
            out.push(journal_finding(
                dir,
                path,
                Some(path) == newest.as_ref(),
                bad,
            ));
        }
    }
    Ok(out)
}

fn journal_finding(dir: &Path, path: &Path, newest: bool, bad: journal::BadBatch) -> Finding {
    // Only the newest journal is being written; a sealed one was fsynced
    // whole before the next was started, so any damage in it is rot.
    // In the newest one, a bad batch with nothing written after it is the
    // last write, which a crash may have left torn in any of its pages
    // (docs/storage.md, "Torn tails"): checksum mismatches included.
    let tail = newest && !bad.not_last;
    let mut keys: Vec<String> = bad
        .items
        .iter()
        .take(8)
        .map(|item| {
            let name = keyspace_name(item.keyspace);
            format!("{name}: {}", records::describe_key(name, &item.key))
        })
        .collect();
    if bad.items.len() > 8 {
        keys.push(format!("{} more", bad.items.len() - 8));
    }
    let read = if keys.is_empty() {
        "no item readable".to_string()
    } else {
        format!("items as read: {}", keys.join(", "))
    };
    let rel = relative(dir, path);
    Finding {
        location: match bad.seqno {
            Some(seqno) => format!("offset {}, batch seqno {seqno}", bad.offset),
            None => format!("offset {}", bad.offset),
        },
        problem: format!(
            "{} ({} bytes unreadable)",
            bad.problem,
            bad.until - bad.offset
        ),
        affects: format!("one commit group of the most recent writes; {read}"),
        action: if tail {
            "none: the next open cuts this torn last write".into()
        } else {
            format!(
                "{RESTORE}; or salvage, losing this batch and every later one in this file: \
                 `truncate -s {} {}` on a copy of the directory, then open the copy",
                bad.offset,
                rel.display()
            )
        },
        severity: if tail {
            Severity::TornTail
        } else {
            Severity::Damage
        },
        kind: FileKind::Journal,
        path: rel,
    }
}

/// Checks every keyspace's version file and, with `tables_too`, every
/// table file it lists.
fn check_tables(dir: &Path, tables_too: bool) -> Result<Vec<Finding>, StoreError> {
    let root = dir.join("keyspaces");
    let keyspaces = tables::keyspace_dirs(dir).map_err(|source| io(&root, source))?;
    let mut out = Vec::new();
    for (id, path) in keyspaces {
        for bad in tables::check_keyspace(&path, tables_too) {
            let name = keyspace_name(id);
            let (kind, location) = match bad.level {
                Some(level) => (FileKind::Table, format!("keyspace {name}, level {level}")),
                None => (FileKind::Version, format!("keyspace {name}")),
            };
            let affects = if bad.level.is_none() {
                format!(
                    "{name}: the list of its tables, so all of {}",
                    keyspace_holds(id)
                )
            } else {
                format!("{name}: part of {}", keyspace_holds(id))
            };
            out.push(Finding {
                path: relative(dir, &bad.path),
                kind,
                severity: Severity::Damage,
                location,
                problem: bad.problem,
                affects,
                action: RESTORE.into(),
            });
        }
    }
    Ok(out)
}

fn io(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The checks cheap enough for every open: journals (read anyway at open)
/// and version files (small). Table files are not read. Also returns the
/// journal tally (for the torn-tail report), so that open reads each
/// journal once.
pub(crate) fn before_open(dir: &Path) -> Result<(Vec<Finding>, JournalTally), StoreError> {
    let mut tally = JournalTally::default();
    let mut found = check_journals(dir, &mut tally)?;
    found.extend(check_tables(dir, false)?);
    Ok((found, tally))
}

/// Every file check, reading every table file whole (after an open
/// failed, to name the file).
pub(crate) fn files(dir: &Path) -> Result<Vec<Finding>, StoreError> {
    let mut found = check_journals(dir, &mut JournalTally::default())?;
    found.extend(check_tables(dir, true)?);
    Ok(found)
}

/// Checks the data directory `data` without changing it: files are read
/// in place; records are read from a copy made in `scratch` (an empty or
/// absent directory, left for the caller to remove), because opening the
/// engine writes (it cuts a torn journal tail and may flush or compact).
pub fn check(data: &Path, scratch: &Path) -> Result<CheckReport, StoreError> {
    let mut report = CheckReport::default();
    let mut tally = JournalTally::default();
    report.findings = check_journals(data, &mut tally)?;
    (report.journals, report.journal_batches) = (tally.journals, tally.batches);
    report.findings.extend(check_tables(data, true)?);
    report.tables = count_tables(data);
    copy_dir(data, scratch)?;
    match Store::open(scratch, crate::store::EngineOptions::SMALL) {
        Ok(opened) => {
            let (read, bad) = records::check(&opened.store);
            report.records = read;
            for bad in bad {
                report.findings.push(record_finding(bad));
            }
        }
        Err(e) => report.records_unchecked = Some(e.to_string()),
    }
    Ok(report)
}

fn record_finding(bad: records::BadRecord) -> Finding {
    Finding {
        path: PathBuf::from("keyspaces"),
        kind: FileKind::Record,
        severity: Severity::Damage,
        location: format!("keyspace {}", bad.keyspace),
        problem: bad.problem,
        affects: bad
            .key
            .unwrap_or_else(|| format!("{} (unknown keys)", bad.keyspace)),
        action: RESTORE.into(),
    }
}

fn count_tables(dir: &Path) -> u64 {
    let keyspaces = tables::keyspace_dirs(dir).unwrap_or_default();
    keyspaces
        .iter()
        .filter_map(|(_, path)| std::fs::read_dir(path.join("tables")).ok())
        .map(|entries| entries.count() as u64)
        .sum()
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(to).map_err(|source| io(to, source))?;
    for entry in std::fs::read_dir(from).map_err(|source| io(from, source))? {
        let entry = entry.map_err(|source| io(from, source))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            // The lock file too: fjall expects it (a copy holds no lock).
            std::fs::copy(&src, &dst).map_err(|source| io(&src, source))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `keyspace_name` assumes fjall numbers keyspaces in creation order.
    #[test]
    fn keyspace_ids_follow_creation_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opened = Store::open(dir.path(), crate::store::EngineOptions::SMALL).expect("open");
        let store = &opened.store;
        let spaces = store.keyspaces().expect("an open store");
        for (_, keyspace) in &spaces {
            assert_eq!(
                keyspace_name(keyspace.id()),
                keyspace.name().as_ref() as &str
            );
        }
    }

    /// The check of a store holding one value, `value` at `key` of `space`
    /// (written as a commit group would be, checksums and all).
    fn check_with_value(space: crate::store::Space, key: Vec<u8>, value: Vec<u8>) -> CheckReport {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let opened = Store::open(dir.path(), crate::store::EngineOptions::SMALL).expect("open");
            let mut set = crate::store::WriteSet::default();
            set.put(space, key, value);
            opened.store.commit(&set).expect("commit");
            opened
                .store
                .persist(fjall::PersistMode::SyncAll)
                .expect("persist");
        }
        let scratch = tempfile::tempdir().expect("tempdir");
        check(dir.path(), &scratch.path().join("copy")).expect("check")
    }

    /// A value that passes every checksum but is not a delayd record (a
    /// bug, or bytes from another version) is found by decoding.
    #[test]
    fn an_undecodable_record_is_named_by_its_message() {
        let queue = delayd_core::QueueName::new("orders").expect("queue");
        let id = delayd_core::MessageId::new("o-1").expect("id");
        let key = crate::codec::message_key(&queue, &id);
        let report = check_with_value(crate::store::Space::Messages, key, vec![1, 0xff, 0xff]);
        let finding = &report.findings[0];
        assert_eq!(
            (finding.kind, finding.severity),
            (FileKind::Record, Severity::Damage)
        );
        assert_eq!(finding.affects, "message orders/o-1");
        assert!(report.damaged());
    }

    /// A schedule record that does not decode is named by its schedule.
    #[test]
    fn an_undecodable_schedule_is_named_by_its_id() {
        let queue = delayd_core::QueueName::new("orders").expect("queue");
        let id = delayd_core::ScheduleId::new("nightly").expect("id");
        let key = crate::schedule_codec::schedule_key(&queue, &id);
        let report = check_with_value(crate::store::Space::Schedules, key, vec![1, 0xff]);
        let finding = &report.findings[0];
        assert_eq!(finding.location, "keyspace schedules");
        assert_eq!(finding.affects, "schedule orders/nightly");
        assert!(report.damaged());
    }
}
