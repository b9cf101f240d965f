//! A hash map whose every operation does bounded work: it never grows,
//! rehashes or compacts itself in one O(n) step.
//!
//! A standard hash table doubles when it is full: one insert allocates a
//! table twice the size and moves every entry into it. With steady churn it
//! also rehashes the whole table in place whenever its tombstones have used
//! up the spare room. Both cost O(n) in one call; under the broker's state
//! lock, with a million messages in memory, that was a 57 ms stall of every
//! call (docs/BENCHMARKS.md, "Where the tail came from").
//!
//! [`BoundedMap`] resizes incrementally instead (as Redis's `dict` does):
//! when the table it inserts into has no room left, it starts a new table
//! of twice the entries and keeps the full one as `old`. Every later insert
//! or remove moves the entries of at most [`STEP_BUCKETS`] buckets of `old`
//! into the new table, and lookups look in both. The new table is sized so
//! that it never fills before `old` is empty, so no operation ever moves
//! more than one step's entries. Tombstones go with the old table.
//!
//! The work per operation is bounded by [`STEP_BUCKETS`] plus one
//! allocation (the new table's control bytes are written when it is made:
//! one byte per bucket, about 2 MB for a million entries).

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

/// Buckets of the old table visited per insert or remove while a resize is
/// under way. A table of `n` entries has at most `16n / 7` buckets, so the
/// move ends within `n / 7` operations; the new table has room for `n`
/// more entries, more than those operations can add. Fewer buckets per step
/// make each operation of a resize cheaper and the resize longer: 64 put
/// the p99 of inserts during a resize of a million entries at 21 µs, 16 at
/// a quarter of that (`cargo bench -p delayd-local --bench insert_tail`).
pub const STEP_BUCKETS: usize = 16;

/// A hash map with bounded work per operation (see the module docs).
pub struct BoundedMap<K, V, S = RandomState> {
    hasher: S,
    /// Where inserts go.
    new: HashTable<(K, V)>,
    /// The table being emptied into `new`; empty when no resize runs.
    old: HashTable<(K, V)>,
    /// The next bucket of `old` to move.
    cursor: usize,
    /// Entries the last step moved (tests: the work of one operation).
    #[cfg(test)]
    moved: usize,
}

impl<K, V> Default for BoundedMap<K, V> {
    fn default() -> Self {
        Self {
            hasher: RandomState::new(),
            new: HashTable::new(),
            old: HashTable::new(),
            cursor: 0,
            #[cfg(test)]
            moved: 0,
        }
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> BoundedMap<K, V, S> {
    pub fn len(&self) -> usize {
        self.new.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let eq = |(k, _): &(K, V)| k.borrow() == key;
        self.new
            .find(hash, eq)
            .or_else(|| self.old.find(hash, eq))
            .map(|(_, v)| v)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let eq = |(k, _): &(K, V)| k.borrow() == key;
        match self.new.find_mut(hash, eq) {
            Some((_, v)) => Some(v),
            None => self.old.find_mut(hash, eq).map(|(_, v)| v),
        }
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Inserts `value` under `key`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.step();
        let hash = self.hash(&key);
        let eq = |(k, _): &(K, V)| *k == key;
        if let Some((_, v)) = self.new.find_mut(hash, eq) {
            return Some(std::mem::replace(v, value));
        }
        let replaced = match self.old.find_entry(hash, eq) {
            Ok(entry) => Some(entry.remove().0 .1),
            Err(_) => None,
        };
        self.make_room();
        let hasher = &self.hasher;
        self.new
            .insert_unique(hash, (key, value), |(k, _)| hasher.hash_one(k));
        replaced
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.step();
        let hash = self.hash(key);
        let eq = |(k, _): &(K, V)| k.borrow() == key;
        if let Ok(entry) = self.new.find_entry(hash, eq) {
            return Some(entry.remove().0 .1);
        }
        self.old
            .find_entry(hash, eq)
            .ok()
            .map(|entry| entry.remove().0 .1)
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.new.iter().chain(self.old.iter()).map(|(k, v)| (k, v))
    }

    /// Makes sure the next insert into `new` does not make hashbrown grow
    /// or rehash it: when `new` has no room left, it becomes `old` and a
    /// table of twice its entries (and at least a few) takes its place.
    fn make_room(&mut self) {
        if self.new.len() < self.new.capacity() {
            return;
        }
        if !self.old.is_empty() {
            // Unreachable by the sizing (module docs); finishing the move
            // keeps the map correct if it ever happens.
            debug_assert!(false, "a resize started before the last one ended");
            while !self.old.is_empty() {
                self.step();
            }
        }
        let entries = self.new.len();
        let table = HashTable::with_capacity((2 * entries).max(8));
        self.old = std::mem::replace(&mut self.new, table);
        self.cursor = 0;
    }

    /// Moves the entries of up to [`STEP_BUCKETS`] buckets of `old`.
    fn step(&mut self) {
        #[cfg(test)]
        {
            self.moved = 0;
        }
        if self.old.is_empty() {
            return;
        }
        let end = (self.cursor + STEP_BUCKETS).min(self.old.num_buckets());
        for index in self.cursor..end {
            let Ok(entry) = self.old.get_bucket_entry(index) else {
                continue;
            };
            let ((key, value), _) = entry.remove();
            let hasher = &self.hasher;
            let hash = hasher.hash_one(&key);
            debug_assert!(self.new.len() < self.new.capacity(), "new table full");
            self.new
                .insert_unique(hash, (key, value), |(k, _)| hasher.hash_one(k));
            #[cfg(test)]
            {
                self.moved += 1;
            }
        }
        self.cursor = end;
        if self.old.is_empty() {
            // Frees the old table's memory now.
            self.old = HashTable::new();
            self.cursor = 0;
        }
    }

    /// Whether a resize is under way (tests).
    #[cfg(test)]
    fn resizing(&self) -> bool {
        !self.old.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Get(u16),
        GetMut(u16, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a small range, so that inserts replace and removes hit.
        let key = 0u16..512;
        prop_oneof![
            4 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => key.clone().prop_map(Op::Remove),
            1 => key.clone().prop_map(Op::Get),
            1 => (key, any::<u32>()).prop_map(|(k, v)| Op::GetMut(k, v)),
        ]
    }

    proptest! {
        /// Every operation answers as a `HashMap` does, through resizes.
        #[test]
        fn behaves_as_a_hash_map(ops in proptest::collection::vec(op(), 1..2000)) {
            let mut map = BoundedMap::default();
            let mut model = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(map.get(&k), model.get(&k)),
                    Op::GetMut(k, v) => {
                        let got = map.get_mut(&k).map(|slot| std::mem::replace(slot, v));
                        let want = model.get_mut(&k).map(|slot| std::mem::replace(slot, v));
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                prop_assert_eq!(map.contains_key(&0), model.contains_key(&0));
            }
            let mut seen: Vec<_> = map.iter().map(|(k, v)| (*k, *v)).collect();
            let mut want: Vec<_> = model.into_iter().collect();
            seen.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(seen, want);
        }
    }

    /// With 1,000,000 live messages, no insert moves more than one step's
    /// buckets: the new table never fills while the old one is emptied, so
    /// hashbrown itself never resizes or rehashes (its capacity would
    /// change under our feet). The time it takes: `cargo bench -p
    /// delayd-local --bench insert_tail`.
    #[test]
    fn no_insert_moves_more_than_a_step() {
        const LIVE: u64 = 1_000_000;
        let mut map = BoundedMap::default();
        let (mut resizes, mut most_moved) = (0, 0);
        for i in 0..LIVE {
            let capacity = map.new.capacity();
            let was_resizing = map.resizing();
            // A message-sized record behind a box, as the broker keeps it.
            map.insert(i, Box::new([0u8; 200]));
            most_moved = most_moved.max(map.moved);
            if map.new.capacity() != capacity {
                // A new table: only when none was being emptied, and the
                // full one became `old` (never rehashed in place).
                assert!(
                    !was_resizing,
                    "resize {resizes} started before the last ended"
                );
                resizes += 1;
            }
        }
        assert!(resizes > 15, "only {resizes} resizes for {LIVE} inserts");
        assert!(
            most_moved <= STEP_BUCKETS,
            "an insert moved {most_moved} entries"
        );
        assert!(
            most_moved > 0,
            "no insert ever moved an entry: no resize ran"
        );
        assert_eq!(map.len() as u64, LIVE);
        assert!((0..LIVE).step_by(997).all(|i| map.get(&i).is_some()));
    }

    /// Steady churn (as many removes as inserts) never rehashes the table
    /// in place: its tombstones go with the old table.
    #[test]
    fn churn_keeps_the_size_and_every_entry() {
        let mut map = BoundedMap::default();
        for i in 0..10_000u64 {
            map.insert(i, i);
        }
        for i in 10_000..500_000u64 {
            map.insert(i, i);
            assert_eq!(map.remove(&(i - 10_000)), Some(i - 10_000));
            assert!(map.new.len() <= map.new.capacity());
        }
        assert_eq!(map.len(), 10_000);
        assert!(
            map.new.capacity() < 100_000,
            "grew under churn: {}",
            map.new.capacity()
        );
        assert!((490_000..500_000).all(|i| map.get(&i) == Some(&i)));
        assert!(!map.is_empty());
    }
}
