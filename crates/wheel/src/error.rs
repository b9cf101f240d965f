//! Error types.

/// The handle names an entry that already fired or was cancelled (its slot may
/// since have been reused; the generation check keeps the new occupant safe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale wheel handle: the entry already fired or was cancelled")]
pub struct StaleHandle;
