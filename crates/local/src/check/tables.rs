//! Verifies each keyspace's version file and table files by checksum,
//! without fjall: fjall checks a table's blocks only when it reads them (a
//! damaged data block surfaces when that key is read, possibly months
//! later) and does not check the version file against its checksum.
//!
//! Layout (lsm-tree 3.1): `keyspaces/<id>/current` = version id u64,
//! xxh3-128 of the version file u128, checksum type u8 (0 = xxh3);
//! `keyspaces/<id>/v<version id>` = an `sfa` archive whose `tables`
//! section lists, per level and run, `(table id u64, checksum type u8,
//! xxh3-128 of the whole table file u128, global seqno u64)`;
//! `keyspaces/<id>/tables/<table id>` = the table files.

use std::io::Read;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

/// A file whose bytes do not match the checksum recorded for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadFile {
    pub path: PathBuf,
    /// Level of a table in the LSM tree (0 newest); `None`: the keyspace's
    /// version file (`current` or the version it names).
    pub level: Option<usize>,
    pub problem: String,
}

/// A table listed by a keyspace's version file.
struct Listed {
    id: u64,
    level: usize,
    checksum: u128,
}

/// Every keyspace directory under `dir/keyspaces` with its id.
pub(crate) fn keyspace_dirs(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let root = dir.join("keyspaces");
    if !root.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root)? {
        let path = entry?.path();
        let id = path.file_name().and_then(|n| n.to_str()?.parse().ok());
        if let (Some(id), true) = (id, path.is_dir()) {
            out.push((id, path));
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn xxh3_128_of(path: &Path) -> std::io::Result<u128> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.digest128());
        }
        hasher.update(&buf[..n]);
    }
}

fn le(bytes: &[u8]) -> u128 {
    bytes
        .iter()
        .rev()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b))
}

/// Checks the version file of one keyspace; `tables`: also every table
/// file it lists (reads them whole).
pub(crate) fn check_keyspace(dir: &Path, tables: bool) -> Vec<BadFile> {
    let bad = |path: PathBuf, level, problem: String| BadFile {
        path,
        level,
        problem,
    };
    let current = dir.join("current");
    let bytes = match std::fs::read(&current) {
        Ok(bytes) if bytes.len() >= 25 => bytes,
        Ok(bytes) => {
            return vec![bad(
                current,
                None,
                format!("{} bytes, expected 25", bytes.len()),
            )]
        }
        Err(e) => return vec![bad(current, None, format!("unreadable: {e}"))],
    };
    let version = dir.join(format!("v{}", le(&bytes[..8])));
    match xxh3_128_of(&version) {
        Ok(sum) if sum == le(&bytes[8..24]) => {}
        Ok(_) => return vec![bad(version, None, "checksum mismatch".into())],
        Err(e) => return vec![bad(version, None, format!("unreadable: {e}"))],
    }
    if !tables {
        return Vec::new();
    }
    let listed = match listed_tables(&version) {
        Ok(listed) => listed,
        Err(problem) => return vec![bad(version, None, problem)],
    };
    let mut out = Vec::new();
    for table in listed {
        let path = dir.join("tables").join(table.id.to_string());
        let problem = match xxh3_128_of(&path) {
            Ok(sum) if sum == table.checksum => continue,
            Ok(_) => "checksum mismatch".to_string(),
            Err(e) => format!("unreadable: {e}"),
        };
        out.push(bad(path, Some(table.level), problem));
    }
    out
}

/// The tables a (checksum-verified) version file lists.
fn listed_tables(version: &Path) -> Result<Vec<Listed>, String> {
    let reader = sfa::Reader::new(version).map_err(|e| format!("unreadable: {e:?}"))?;
    let section = reader.toc().section(b"tables").ok_or("no tables section")?;
    let mut bytes = Vec::new();
    section
        .reader(version)
        .and_then(|mut r| r.read_to_end(&mut bytes))
        .map_err(|e| format!("unreadable: {e}"))?;
    parse_tables(&bytes).ok_or_else(|| "tables section is malformed".to_string())
}

fn parse_tables(bytes: &[u8]) -> Option<Vec<Listed>> {
    let mut pos = 0;
    let mut take = |n: usize| {
        let out = bytes.get(pos..pos + n)?;
        pos += n;
        Some(le(out))
    };
    let mut out = Vec::new();
    for level in 0..take(1)? as usize {
        for _run in 0..take(1)? {
            for _ in 0..take(4)? {
                let id = take(8)? as u64;
                let _checksum_type = take(1)?;
                let checksum = take(16)?;
                let _global_seqno = take(8)?;
                out.push(Listed {
                    id,
                    level,
                    checksum,
                });
            }
        }
    }
    Some(out)
}
