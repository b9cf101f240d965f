//! Errors of the store and of opening a broker. Broker calls map these to
//! `BrokerError::Unavailable`: a client cannot fix a disk.

use std::path::PathBuf;

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
    /// A commit or fsync failed earlier; the broker takes no more writes
    /// because what is on disk may no longer match what it acknowledged.
    #[error("store refuses writes after a failed commit or fsync: {0}")]
    Poisoned(String),
    /// The engine is closed: reopening it after a failed write failed too
    /// (it is retried).
    #[error("storage engine closed after a failed write; reopening it failed and is retried")]
    Closed,
}

/// Why [`crate::LocalBroker::open`] failed.
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
}
