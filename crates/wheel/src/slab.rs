//! Entry storage: slots in fixed-size chunks plus an intrusive free list.
//!
//! The slots live in chunks of [`CHUNK`] that are allocated once and never
//! move: growing adds a chunk, so no insert copies the entries already
//! stored (a `Vec` of slots doubled and moved them all in one insert, an
//! O(n) pause under the broker's lock; docs/wheel.md, "Memory").
//!
//! Every slot carries a generation that is bumped when the slot is freed, so a
//! [`Handle`](crate::Handle) naming an old occupant never matches a new one.
//! The entry is kept at 32 bytes for `T = u64` (the memory target): `u32`
//! links, `u32` generation, and no per-entry sequence number — insertion order
//! is carried by list order and by ready-queue stamps instead (see `ready.rs`).

use crate::level::NIL;

/// A live entry.
pub(crate) struct Entry<T> {
    pub(crate) value: T,
    /// Exact caller deadline, in time units.
    pub(crate) deadline: u64,
    pub(crate) generation: u32,
    /// While pending: next entry in the slot list (meaningless on the list's
    /// tail: walks stop at the tail). While ready: the low half of the ready
    /// stamp (the entry is in no list then).
    pub(crate) next: u32,
    /// While pending: previous entry in the slot list (meaningless on the
    /// list's head). While ready: the high half of the ready stamp.
    pub(crate) prev: u32,
    /// True while the entry sits in the ready queue rather than a slot list.
    pub(crate) ready: bool,
}

impl<T> Entry<T> {
    pub(crate) fn stamp(&self) -> u64 {
        debug_assert!(self.ready, "stamp read from a pending entry");
        (u64::from(self.prev) << 32) | u64::from(self.next)
    }

    pub(crate) fn set_ready(&mut self, stamp: u64) {
        self.ready = true;
        // Truncation is the point: the stamp is split over the two links.
        self.next = stamp as u32;
        self.prev = (stamp >> 32) as u32;
    }

    pub(crate) fn set_pending(&mut self) {
        self.ready = false;
        self.next = NIL;
        self.prev = NIL;
    }
}

pub(crate) enum Slot<T> {
    Vacant { generation: u32, next_free: u32 },
    Occupied(Entry<T>),
}

/// Slots per chunk (a power of two: an index splits into chunk and offset).
pub(crate) const CHUNK: usize = 1024;

/// Slots by index, in chunks that never move once allocated. Growing pushes
/// one chunk; the `Vec` of chunks that may reallocate holds one pointer per
/// [`CHUNK`] slots.
struct Chunks<T> {
    chunks: Vec<Vec<Slot<T>>>,
    len: usize,
}

impl<T> Chunks<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, slot: Slot<T>) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            debug_assert!(chunk.len() < CHUNK, "a chunk outgrew its allocation");
            chunk.push(slot);
        }
        self.len += 1;
    }

    fn get(&self, index: usize) -> Option<&Slot<T>> {
        self.chunks.get(index / CHUNK)?.get(index % CHUNK)
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut Slot<T>> {
        self.chunks.get_mut(index / CHUNK)?.get_mut(index % CHUNK)
    }
}

impl<T> std::ops::Index<usize> for Chunks<T> {
    type Output = Slot<T>;

    fn index(&self, index: usize) -> &Slot<T> {
        &self.chunks[index / CHUNK][index % CHUNK]
    }
}

impl<T> std::ops::IndexMut<usize> for Chunks<T> {
    fn index_mut(&mut self, index: usize) -> &mut Slot<T> {
        &mut self.chunks[index / CHUNK][index % CHUNK]
    }
}

pub(crate) struct Slab<T> {
    slots: Chunks<T>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab {
            slots: Chunks {
                chunks: Vec::new(),
                len: 0,
            },
            free_head: NIL,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores a new pending entry and returns `(index, generation)`.
    ///
    /// # Panics
    /// If more than `u32::MAX - 1` entries are live at once (index space).
    pub(crate) fn alloc(&mut self, deadline: u64, value: T) -> (u32, u32) {
        let mut entry = Entry {
            value,
            deadline,
            generation: 0,
            next: NIL,
            prev: NIL,
            ready: false,
        };
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let slot = &mut self.slots[index as usize];
            let Slot::Vacant {
                generation,
                next_free,
            } = *slot
            else {
                unreachable!("free list points at occupied slot {index}");
            };
            self.free_head = next_free;
            entry.generation = generation;
            *slot = Slot::Occupied(entry);
            return (index, generation);
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("delayd-wheel: more than u32::MAX - 1 live entries");
        self.slots.push(Slot::Occupied(entry));
        (index, 0)
    }

    /// Frees a live slot, bumping its generation so old handles go stale.
    pub(crate) fn free(&mut self, index: u32) -> Entry<T> {
        let slot = &mut self.slots[index as usize];
        let Slot::Occupied(entry) = slot else {
            unreachable!("free of vacant slot {index}");
        };
        let vacant = Slot::Vacant {
            generation: entry.generation.wrapping_add(1),
            next_free: self.free_head,
        };
        let Slot::Occupied(entry) = std::mem::replace(slot, vacant) else {
            unreachable!("slot {index} changed under us");
        };
        self.free_head = index;
        self.len -= 1;
        entry
    }

    /// The live entry at `index` if its generation matches.
    pub(crate) fn get(&self, index: u32, generation: u32) -> Option<&Entry<T>> {
        match self.slots.get(index as usize)? {
            Slot::Occupied(e) if e.generation == generation => Some(e),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut Entry<T>> {
        match self.slots.get_mut(index as usize)? {
            Slot::Occupied(e) if e.generation == generation => Some(e),
            _ => None,
        }
    }

    /// The live entry at an index known to be occupied (internal links only).
    pub(crate) fn at(&self, index: u32) -> &Entry<T> {
        match &self.slots[index as usize] {
            Slot::Occupied(e) => e,
            Slot::Vacant { .. } => unreachable!("link to vacant slot {index}"),
        }
    }

    pub(crate) fn at_mut(&mut self, index: u32) -> &mut Entry<T> {
        match &mut self.slots[index as usize] {
            Slot::Occupied(e) => e,
            Slot::Vacant { .. } => unreachable!("link to vacant slot {index}"),
        }
    }

    /// The live entry at `index` if it is occupied (any generation).
    pub(crate) fn try_at(&self, index: u32) -> Option<&Entry<T>> {
        match self.slots.get(index as usize)? {
            Slot::Occupied(e) => Some(e),
            Slot::Vacant { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_is_32_bytes_for_u64() {
        assert_eq!(std::mem::size_of::<Slot<u64>>(), 32);
    }

    #[test]
    fn reuse_bumps_generation() {
        let mut slab = Slab::new();
        let (i, g) = slab.alloc(5, 'a');
        assert_eq!(slab.free(i).value, 'a');
        let (j, h) = slab.alloc(6, 'b');
        assert_eq!((i, g + 1), (j, h));
        assert!(slab.get(i, g).is_none());
        assert_eq!(slab.get(j, h).map(|e| e.value), Some('b'));
        assert_eq!(slab.len(), 1);
    }

    /// Slots stay where they are as the slab grows past chunk boundaries.
    #[test]
    fn growing_never_moves_a_slot() {
        let mut slab = Slab::new();
        let (first, g) = slab.alloc(1, 7u64);
        let at = std::ptr::from_ref(slab.at(first));
        for i in 0..(3 * CHUNK as u64) {
            slab.alloc(i, i);
        }
        assert!(std::ptr::eq(at, slab.at(first)), "the first slot moved");
        assert_eq!(slab.get(first, g).map(|e| e.value), Some(7));
        assert_eq!(slab.len(), 3 * CHUNK + 1);
    }

    #[test]
    fn stamp_round_trips() {
        let mut slab = Slab::new();
        let (i, _) = slab.alloc(0, ());
        slab.at_mut(i).set_ready(0xDEAD_BEEF_0123_4567);
        assert_eq!(slab.at(i).stamp(), 0xDEAD_BEEF_0123_4567);
    }
}
