//! [`KeyedWheel`]: a [`Wheel`] addressed by caller keys instead of handles.

use std::collections::HashMap;
use std::hash::Hash;

use crate::error::DuplicateKey;
use crate::wheel::{Handle, Wheel, WheelConfig};

/// A timing wheel whose entries are named by unique keys.
///
/// Wraps `Wheel<(K, V)>` plus a `HashMap<K, Handle>`; a key is free again as
/// soon as its entry fires or is cancelled.
pub struct KeyedWheel<K: Hash + Eq + Clone, V> {
    wheel: Wheel<(K, V)>,
    handles: HashMap<K, Handle>,
}

impl<K: Hash + Eq + Clone, V> Default for KeyedWheel<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone, V> KeyedWheel<K, V> {
    pub fn new() -> Self {
        Self::with_config(WheelConfig::default())
    }

    pub fn with_config(cfg: WheelConfig) -> Self {
        KeyedWheel {
            wheel: Wheel::with_config(cfg),
            handles: HashMap::new(),
        }
    }

    /// Schedules `value` under `key`. Fails, handing the key back, if `key` is
    /// already scheduled (the existing entry is left alone).
    pub fn insert(&mut self, key: K, deadline: u64, value: V) -> Result<(), DuplicateKey<K>> {
        if self.handles.contains_key(&key) {
            return Err(DuplicateKey { key });
        }
        let handle = self.wheel.insert(deadline, (key.clone(), value));
        self.handles.insert(key, handle);
        Ok(())
    }

    pub fn cancel(&mut self, key: &K) -> Option<V> {
        let handle = self.handles.remove(key)?;
        let cancelled = self.wheel.cancel(handle);
        debug_assert!(
            cancelled.is_some(),
            "key map held a stale handle {handle:?}"
        );
        cancelled.map(|(_, value)| value)
    }

    /// Moves `key` to `deadline`; `false` if the key is not scheduled.
    pub fn reschedule(&mut self, key: &K, deadline: u64) -> bool {
        self.handles
            .get(key)
            .is_some_and(|&handle| self.wheel.reschedule(handle, deadline).is_ok())
    }

    pub fn contains(&self, key: &K) -> bool {
        self.handles.contains_key(key)
    }

    pub fn deadline(&self, key: &K) -> Option<u64> {
        self.wheel.deadline(*self.handles.get(key)?)
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.wheel.get(*self.handles.get(key)?).map(|(_, v)| v)
    }

    /// See [`Wheel::next_deadline`].
    pub fn next_deadline(&self) -> Option<u64> {
        self.wheel.next_deadline()
    }

    /// Next due `(key, deadline, value)`; see [`Wheel::poll_expired`].
    pub fn poll_expired(&mut self, now: u64) -> Option<(K, u64, V)> {
        let expired = self.wheel.poll_expired(now)?;
        let (key, value) = expired.value;
        let removed = self.handles.remove(&key);
        debug_assert_eq!(removed, Some(expired.handle), "key map out of sync");
        Some((key, expired.deadline, value))
    }

    pub fn advance(&mut self, now: u64) {
        self.wheel.advance(now);
    }

    pub fn now(&self) -> u64 {
        self.wheel.now()
    }

    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_key_is_rejected_with_the_key() {
        let mut w = KeyedWheel::new();
        assert!(w.insert("a", 10, 1).is_ok());
        let err = w.insert("a", 5, 2).unwrap_err();
        assert_eq!(err, DuplicateKey { key: "a" });
        assert_eq!(err.to_string(), "key is already scheduled");
        assert_eq!(w.get(&"a"), Some(&1));
        assert_eq!(w.deadline(&"a"), Some(10));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn cancel_and_reschedule_by_key() {
        let mut w = KeyedWheel::new();
        w.insert(1, 10, "one").unwrap();
        w.insert(2, 20, "two").unwrap();
        assert!(w.reschedule(&2, 5));
        assert!(!w.reschedule(&3, 5));
        assert_eq!(w.next_deadline(), Some(5));
        assert_eq!(w.cancel(&1), Some("one"));
        assert_eq!(w.cancel(&1), None);
        assert!(!w.contains(&1));
        assert_eq!(w.poll_expired(4), None);
        assert_eq!(w.poll_expired(5), Some((2, 5, "two")));
        assert!(w.is_empty());
    }

    #[test]
    fn key_is_free_again_after_firing() {
        let mut w = KeyedWheel::new();
        w.insert("k", 3, 1).unwrap();
        w.advance(3);
        assert_eq!(w.now(), 3);
        assert!(w.contains(&"k"), "advanced but not yet polled");
        assert_eq!(w.poll_expired(3), Some(("k", 3, 1)));
        assert!(!w.contains(&"k"));
        w.insert("k", 4, 2).unwrap();
        assert_eq!(w.poll_expired(100), Some(("k", 4, 2)));
        assert_eq!(w.poll_expired(100), None);
    }
}
