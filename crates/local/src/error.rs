//! Errors of the store and of opening a broker. Broker calls map these to
//! `BrokerError::Unavailable`: a client cannot fix a disk.

use std::path::PathBuf;

use crate::check::Finding;

/// A failure of the embedded store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage engine: {0}")]
    Engine(#[from] fjall::Error),
    #[error("i/o on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Bytes on disk that this version cannot read.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// Files of the store are damaged (checksum mismatch, or a journal
    /// batch that does not decode with whole batches after it); opening
    /// refuses rather than let the engine drop committed data.
    #[error("damaged: {}", summary(.0))]
    Damaged(Vec<Finding>),
    /// The engine is closed: reopening it after a failed write failed too
    /// (it is retried).
    #[error("storage engine closed after a failed write; reopening it failed and is retried")]
    Closed,
}

fn summary(found: &[Finding]) -> String {
    match found {
        [] => "no damaged file found".into(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first}; and {} more", rest.len()),
    }
}

/// Why loading the store into memory failed: at [`crate::LocalBroker::open`]
/// or at the sync thread's reopen after a failed write.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open store at {path}: {source}")]
    Store { path: PathBuf, source: StoreError },
    #[error("store at {path} has format version {found}, this build reads {expected}")]
    FormatVersion {
        path: PathBuf,
        found: u8,
        expected: u8,
    },
    /// The store was open a moment ago (the reopen after a failed write)
    /// and now has no format version: its files are gone, not new.
    #[error("store at {path} lost its format version while open")]
    FormatMissing { path: PathBuf },
}

impl OpenError {
    /// The damaged files and records open found, if that is why it failed.
    pub fn damage(&self) -> &[Finding] {
        match self {
            OpenError::Store {
                source: StoreError::Damaged(found),
                ..
            } => found,
            _ => &[],
        }
    }

    /// Whether another process has the store open (fjall's lock file is
    /// held): a running `delayd serve`, or another tool on the same
    /// directory.
    pub fn is_locked(&self) -> bool {
        matches!(
            self,
            OpenError::Store {
                source: StoreError::Engine(fjall::Error::Locked),
                ..
            }
        )
    }

    /// Whether the store's bytes are the problem (not permissions, a lock,
    /// a full disk): `delayd check` can say more.
    pub fn is_corruption(&self) -> bool {
        match self {
            OpenError::Store { source, .. } => matches!(
                source,
                StoreError::Damaged(_)
                    | StoreError::Corrupt(_)
                    | StoreError::Engine(
                        fjall::Error::JournalRecovery(_)
                            | fjall::Error::Storage(_)
                            | fjall::Error::InvalidTag(_)
                            | fjall::Error::InvalidTrailer
                            | fjall::Error::Decompress(_)
                            | fjall::Error::Unrecoverable
                    )
            ),
            OpenError::FormatVersion { .. } | OpenError::FormatMissing { .. } => false,
        }
    }
}
