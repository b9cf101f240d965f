//! Locking that ignores poisoning, for the brokers' std mutexes.
//!
//! A panic while a broker's lock is held is a bug, reported where it
//! happened; the state behind the lock is kept consistent by each critical
//! section (no section leaves it half-changed across a call that can
//! panic), so the next caller may go on rather than propagate the panic to
//! every later request.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poisoning.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
