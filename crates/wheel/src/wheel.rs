//! [`Wheel`]: the hierarchical timing wheel itself.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::StaleHandle;
use crate::level::{
    level_for, slot_end, slot_for, slot_start, way_for, Level, List, LEVELS, NIL, WAYS,
};
use crate::ready::{ReadyItem, ReadyQueue};
use crate::slab::Slab;

/// Wheel configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelConfig {
    /// Time units per tick. `0` is treated as `1`. With `tick > 1` entries
    /// fire on tick boundaries: never early, at most `tick - 1` units late.
    pub tick: u64,
    /// The wheel's initial time; deadlines before it are already due.
    pub start: u64,
}

impl Default for WheelConfig {
    fn default() -> Self {
        WheelConfig { tick: 1, start: 0 }
    }
}

/// Names one scheduled entry. Copyable; goes stale (and is then rejected by
/// every method) once the entry fires or is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

impl Handle {
    /// Slab index of the entry (reused after the entry goes away).
    pub fn index(self) -> u32 {
        self.index
    }

    /// Generation that distinguishes this entry from later occupants of the
    /// same index.
    pub fn generation(self) -> u32 {
        self.generation
    }
}

/// An entry returned by [`Wheel::poll_expired`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The (now stale) handle the entry had.
    pub handle: Handle,
    /// The exact deadline it was scheduled for.
    pub deadline: u64,
    pub value: T,
}

/// Cached earliest tick among entries in slot lists (0 = unknown: a listed
/// tick is always > `elapsed` >= 0, so 0 never names a real tick). Atomic only
/// so that `next_deadline(&self)` can fill it in without losing `Sync`;
/// concurrent readers compute and store the same value.
#[derive(Default)]
struct EarliestCache(AtomicU64);

impl EarliestCache {
    fn get(&self) -> Option<u64> {
        let v = self.0.load(Ordering::Relaxed);
        (v != 0).then_some(v)
    }
    fn set(&self, tick: u64) {
        self.0.store(tick, Ordering::Relaxed);
    }
    fn on_insert(&mut self, tick: u64) {
        let v = self.0.get_mut();
        if *v != 0 && tick < *v {
            *v = tick;
        }
    }
    fn on_remove(&mut self, tick: u64) {
        let v = self.0.get_mut();
        if *v == tick {
            *v = 0;
        }
    }
    fn on_advance(&mut self, target: u64) {
        let v = self.0.get_mut();
        if *v <= target {
            *v = 0;
        }
    }
}

/// A hierarchical hashed timing wheel holding values of type `T`.
///
/// See the crate docs for the design. Time is a `u64` in caller-chosen units
/// (milliseconds in delayd) and only ever passed in.
pub struct Wheel<T> {
    slab: Slab<T>,
    levels: Box<[Level; LEVELS]>,
    ready: ReadyQueue,
    tick: u64,
    start: u64,
    /// Largest time seen, in time units.
    now: u64,
    /// Ticks processed: every listed entry has tick > `elapsed`, every ready
    /// entry has tick <= `elapsed`. Lags `target` until slots are collected.
    elapsed: u64,
    /// `elapsed_for(now)`: slots starting at or before it are due.
    target: u64,
    /// Next ready stamp; orders ready entries with equal deadlines.
    stamp: u64,
    earliest: EarliestCache,
    /// Reused buffer for the entries a slot makes due (see `fire_slot`).
    batch: Vec<ReadyItem>,
    /// Scratch space for `sort_batch`.
    sort_buf: Vec<ReadyItem>,
    /// Ready-queue items whose entry was cancelled or rescheduled (dropped
    /// lazily by `trim_ready`).
    orphans: usize,
}

/// Highest level whose slots are made due in one batch when `target` reaches
/// into them (a level-1 slot spans 64 ticks). Making a whole level-2 slot
/// (4096 ticks) due at once measured slower: its entries fall out of cache
/// between being collected and being returned.
const BATCH_MAX_LEVEL: usize = 1;

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    /// A wheel with a 1-unit tick starting at time 0.
    pub fn new() -> Self {
        Self::with_config(WheelConfig::default())
    }

    pub fn with_config(cfg: WheelConfig) -> Self {
        Wheel {
            slab: Slab::new(),
            levels: Box::new(std::array::from_fn(|_| Level::new())),
            ready: ReadyQueue::default(),
            tick: cfg.tick.max(1),
            start: cfg.start,
            now: cfg.start,
            elapsed: 0,
            target: 0,
            stamp: 0,
            earliest: EarliestCache::default(),
            batch: Vec::new(),
            sort_buf: Vec::new(),
            orphans: 0,
        }
    }

    /// Schedules `value` for `deadline` (any `u64`; a past deadline fires at
    /// the next poll). O(1).
    pub fn insert(&mut self, deadline: u64, value: T) -> Handle {
        let (index, generation) = self.slab.alloc(deadline, value);
        self.place(index, self.tick_for(deadline));
        Handle { index, generation }
    }

    /// Removes a pending entry and returns its value; `None` if the handle is
    /// stale. O(1).
    pub fn cancel(&mut self, handle: Handle) -> Option<T> {
        let ready = self.slab.get(handle.index, handle.generation)?.ready;
        if ready {
            self.orphans += 1;
        } else {
            self.unlink(handle.index);
        }
        // A ready entry leaves a stale queue item behind; its stamp no longer
        // matches anything, and `trim_ready` drops it if it is at the front.
        let value = self.slab.free(handle.index).value;
        self.trim_ready();
        Some(value)
    }

    /// Moves a pending entry to `deadline`; the handle stays valid. Counts as
    /// a new insertion for same-deadline ordering. O(1).
    pub fn reschedule(&mut self, handle: Handle, deadline: u64) -> Result<(), StaleHandle> {
        let entry = self
            .slab
            .get_mut(handle.index, handle.generation)
            .ok_or(StaleHandle)?;
        if entry.ready {
            entry.set_pending(); // orphans its ready item (stamp cleared)
            self.orphans += 1;
        } else {
            self.unlink(handle.index);
        }
        self.slab.at_mut(handle.index).deadline = deadline;
        self.place(handle.index, self.tick_for(deadline));
        self.trim_ready();
        Ok(())
    }

    /// The exact deadline of a pending entry.
    pub fn deadline(&self, handle: Handle) -> Option<u64> {
        self.slab
            .get(handle.index, handle.generation)
            .map(|e| e.deadline)
    }

    pub fn get(&self, handle: Handle) -> Option<&T> {
        self.slab
            .get(handle.index, handle.generation)
            .map(|e| &e.value)
    }

    pub fn get_mut(&mut self, handle: Handle) -> Option<&mut T> {
        self.slab
            .get_mut(handle.index, handle.generation)
            .map(|e| &mut e.value)
    }

    /// The earliest time at which [`poll_expired`](Self::poll_expired) will
    /// return an entry, or `None` if the wheel is empty.
    ///
    /// With `tick == 1` this is exactly the smallest pending deadline. With a
    /// coarser tick it is that deadline rounded up to the tick grid (entries
    /// fire on tick boundaries). A value `<= now()` means entries are already
    /// due. Cost: O(levels); when the earliest occupied slot is above level 0
    /// its list is scanned once and the result cached until that minimum is
    /// cancelled or fires.
    pub fn next_deadline(&self) -> Option<u64> {
        if let Some(item) = self.ready.peek() {
            return Some(item.deadline);
        }
        let (level, slot, start) = self.next_slot()?;
        if level == 0 {
            return Some(self.fire_time(start));
        }
        let tick = match self.earliest.get() {
            Some(tick) => tick,
            None => {
                let tick = self.min_tick_in(&self.levels[level].slots[slot]);
                self.earliest.set(tick);
                tick
            }
        };
        Some(self.fire_time(tick))
    }

    /// Advances time to `now` and returns the next due entry, in (deadline,
    /// insertion) order. Call repeatedly until `None`.
    pub fn poll_expired(&mut self, now: u64) -> Option<Expired<T>> {
        self.advance(now);
        let item = loop {
            if let Some(item) = self.ready.pop() {
                break item;
            }
            if !self.collect_next() {
                return None;
            }
        };
        debug_assert!(self.is_live(item), "ready front is stale: {item:?}");
        let entry = self.slab.free(item.index);
        self.trim_ready();
        Some(Expired {
            handle: Handle {
                index: item.index,
                generation: entry.generation,
            },
            deadline: entry.deadline,
            value: entry.value,
        })
    }

    /// Moves time to `now` (ignored if not later than [`now`](Self::now)).
    /// Entries due by then are handed out by `poll_expired`.
    ///
    /// Collection is lazy: due slots are emptied into the ready buffer one at
    /// a time as `poll_expired` drains it, so an entry is still in cache when
    /// it is returned (eagerly collecting a million entries and then popping
    /// them costs a cache miss per entry twice). Nothing observable depends
    /// on when collection happens.
    pub fn advance(&mut self, now: u64) {
        if now <= self.now {
            return;
        }
        self.now = now;
        self.target = self.elapsed_for(now);
    }

    /// Empties the earliest slot due by `target` into lower levels or the
    /// ready buffer. Returns `false` (and catches `elapsed` up to `target`)
    /// once no slot is due.
    fn collect_next(&mut self) -> bool {
        match self.next_slot() {
            Some((level, slot, start)) if start <= self.target => {
                debug_assert!(
                    start > self.elapsed,
                    "slot L{level}/{slot} starts at {start}, not after elapsed {}",
                    self.elapsed
                );
                // Jump as far into the slot as `target` allows (at most to its
                // last tick): everything due by then goes straight to the
                // ready queue in one sorted batch instead of cascading level
                // by level. Safe because this is the earliest slot: lower
                // levels are empty, and every other slot starts after the
                // slot's end, so no other entry changes level.
                self.elapsed = if level <= BATCH_MAX_LEVEL {
                    slot_end(start, level).min(self.target)
                } else {
                    start
                };
                self.fire_slot(level, slot);
                self.earliest.on_advance(self.elapsed);
                true
            }
            _ => {
                // Nothing listed is due by `target`, so every listed entry has
                // tick > target and keeps its level (see `level_for`).
                self.elapsed = self.elapsed.max(self.target);
                false
            }
        }
    }

    /// The current time (the largest `now` seen, initially `start`).
    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    // ---- time arithmetic -------------------------------------------------

    /// Tick at which `deadline` fires: rounded *up*, so never early.
    fn tick_for(&self, deadline: u64) -> u64 {
        let Some(offset) = deadline.checked_sub(self.start) else {
            return 0;
        };
        if self.tick == 1 {
            return offset;
        }
        offset.div_ceil(self.tick)
    }

    /// Ticks elapsed at time `now`. `u64::MAX` maps to the last tick so that a
    /// deadline of `u64::MAX` can fire even when the tick grid overshoots it.
    fn elapsed_for(&self, now: u64) -> u64 {
        if now == u64::MAX {
            return u64::MAX;
        }
        now.saturating_sub(self.start) / self.tick
    }

    /// First time at which `tick` is elapsed (inverse of `elapsed_for`).
    fn fire_time(&self, tick: u64) -> u64 {
        self.start.saturating_add(tick.saturating_mul(self.tick))
    }

    // ---- placement ---------------------------------------------------------

    /// Puts a detached entry into the ready queue or the right slot list.
    fn place(&mut self, index: u32, tick: u64) {
        if tick <= self.elapsed {
            self.make_ready(index);
            return;
        }
        self.earliest.on_insert(tick);
        let level = level_for(self.elapsed, tick);
        self.link(level, slot_for(tick, level), way_for(tick, level), index);
    }

    fn make_ready(&mut self, index: u32) {
        let stamp = self.stamp;
        // 2^64 stamps would take centuries at a billion inserts per second.
        self.stamp = self.stamp.wrapping_add(1);
        let entry = self.slab.at_mut(index);
        entry.set_ready(stamp);
        let deadline = entry.deadline;
        self.ready.push(ReadyItem {
            deadline,
            stamp,
            index,
        });
    }

    /// Appends a detached entry to list `way` of a slot.
    fn link(&mut self, level: usize, slot: usize, way: usize, index: u32) {
        let lvl = &mut self.levels[level];
        let list = &mut lvl.slots[slot][way];
        let tail = list.tail;
        list.tail = index;
        if tail == NIL {
            list.head = index;
            lvl.ways[slot] |= 1 << way;
            lvl.occupied |= 1 << slot;
        } else {
            self.slab.at_mut(tail).next = index;
        }
        let entry = self.slab.at_mut(index);
        entry.set_pending();
        entry.prev = tail;
    }

    /// Detaches a listed entry from its slot list. Its slot is recomputed from
    /// its deadline (placement is a pure function of tick and `elapsed`).
    fn unlink(&mut self, index: u32) {
        let entry = self.slab.at(index);
        let (prev, next) = (entry.prev, entry.next);
        let tick = self.tick_for(entry.deadline);
        self.earliest.on_remove(tick);
        let level = level_for(self.elapsed, tick);
        let slot = slot_for(tick, level);
        let way = way_for(tick, level);
        let lvl = &mut self.levels[level];
        let list = &mut lvl.slots[slot][way];
        // The head's `prev` and the tail's `next` are never read (walks stop
        // at the tail), so removing an end entry touches no neighbour: cancels
        // in insertion order cost one access each.
        match (list.head == index, list.tail == index) {
            (true, true) => *list = List::EMPTY,
            (true, false) => list.head = next,
            (false, true) => list.tail = prev,
            (false, false) => {
                debug_assert!(
                    prev != NIL && next != NIL,
                    "L{level}/{slot}: bad links for tick {tick}"
                );
                self.slab.at_mut(prev).next = next;
                self.slab.at_mut(next).prev = prev;
            }
        }
        if list.head == NIL {
            lvl.ways[slot] &= !(1 << way);
            if lvl.ways[slot] == 0 {
                lvl.occupied &= !(1 << slot);
            }
        }
        self.slab.at_mut(index).set_pending();
    }

    /// Earliest non-empty slot: the first occupied level's lowest slot (a
    /// lower level's slots all start before any slot of a higher level).
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        self.levels.iter().enumerate().find_map(|(level, lvl)| {
            let slot = lvl.first_occupied()?;
            debug_assert!(
                slot > slot_for(self.elapsed, level),
                "L{level}: occupied slot {slot} not ahead of elapsed {}",
                self.elapsed
            );
            Some((level, slot, slot_start(self.elapsed, level, slot)))
        })
    }

    /// Empties one slot whose start is `<= elapsed`: entries with tick `<=
    /// elapsed` become ready, the rest cascade to a lower level. List order
    /// (= insertion order among equal ticks) becomes stamp order, and the due
    /// entries are sorted by `(deadline, stamp)` once and appended in order.
    fn fire_slot(&mut self, level: usize, slot: usize) {
        let lvl = &mut self.levels[level];
        let lists = std::mem::replace(&mut lvl.slots[slot], [List::EMPTY; WAYS]);
        let mut ways = std::mem::take(&mut lvl.ways[slot]);
        lvl.occupied &= !(1 << slot);
        let mut batch = std::mem::take(&mut self.batch);
        // A pointer chase, but over all non-empty lists of the slot at once,
        // so that their cache misses overlap. The order across lists does
        // not matter (equal ticks share a list; due entries are sorted below).
        let mut cursors = [List::EMPTY; WAYS];
        let mut live = 0;
        while ways != 0 {
            cursors[live] = lists[ways.trailing_zeros() as usize];
            live += 1;
            ways &= ways - 1;
        }
        while live > 0 {
            // Load every chain's current entry first (independent loads issued
            // back to back, so their misses overlap), then process them.
            let mut next = [NIL; WAYS];
            let mut deadline = [0u64; WAYS];
            for i in 0..live {
                let entry = self.slab.at(cursors[i].head);
                next[i] = entry.next;
                deadline[i] = entry.deadline;
            }
            for i in 0..live {
                self.fire_entry(cursors[i].head, deadline[i], &mut batch);
            }
            // Advance; drop finished chains (backwards, so swap-removal only
            // moves chains already advanced).
            for i in (0..live).rev() {
                if cursors[i].head == cursors[i].tail {
                    live -= 1;
                    cursors[i] = cursors[live];
                } else {
                    cursors[i].head = next[i];
                }
            }
        }
        if !batch.is_sorted() {
            self.sort_batch(&mut batch);
        }
        self.ready.extend(batch.drain(..));
        self.batch = batch;
    }

    /// Sorts a slot's due entries by `(deadline, stamp)`. They all lie in one
    /// 64-tick block (batches come from level 0 or 1, or are exactly one
    /// tick), so a stable counting sort on `tick % 64` orders them by tick in
    /// O(n) while keeping stamp order within a tick; with `tick > 1`,
    /// deadlines within a tick may still differ and a final sort fixes that.
    fn sort_batch(&mut self, batch: &mut Vec<ReadyItem>) {
        if batch.len() > 8 {
            let (start, tick) = (self.start, self.tick);
            let key = |item: &ReadyItem| {
                let offset = item.deadline.saturating_sub(start);
                let t = if tick == 1 {
                    offset
                } else {
                    offset.div_ceil(tick)
                };
                (t % 64) as usize
            };
            let mut starts = [0usize; 65];
            for item in batch.iter() {
                starts[key(item) + 1] += 1;
            }
            for k in 1..starts.len() {
                starts[k] += starts[k - 1];
            }
            let mut sorted = std::mem::take(&mut self.sort_buf);
            sorted.clear();
            sorted.resize(batch.len(), batch[0]);
            for item in batch.iter() {
                let at = &mut starts[key(item)];
                sorted[*at] = *item;
                *at += 1;
            }
            std::mem::swap(batch, &mut sorted);
            self.sort_buf = sorted;
        }
        if !batch.is_sorted() {
            batch.sort_unstable();
        }
    }

    /// One entry of a slot being emptied: into `batch` if due by `elapsed`,
    /// else onto a lower level. Called in list order.
    fn fire_entry(&mut self, index: u32, deadline: u64, batch: &mut Vec<ReadyItem>) {
        let tick = self.tick_for(deadline);
        if tick <= self.elapsed {
            let stamp = self.stamp;
            self.stamp = self.stamp.wrapping_add(1);
            self.slab.at_mut(index).set_ready(stamp);
            batch.push(ReadyItem {
                deadline,
                stamp,
                index,
            });
        } else {
            self.earliest.on_insert(tick);
            let level = level_for(self.elapsed, tick);
            self.link(level, slot_for(tick, level), way_for(tick, level), index);
        }
    }

    fn min_tick_in(&self, lists: &[List; WAYS]) -> u64 {
        let mut min = u64::MAX;
        for list in lists {
            let mut index = list.head;
            while index != NIL {
                let entry = self.slab.at(index);
                min = min.min(self.tick_for(entry.deadline));
                index = if index == list.tail { NIL } else { entry.next };
            }
        }
        min
    }

    // ---- ready queue hygiene -------------------------------------------------

    fn is_live(&self, item: ReadyItem) -> bool {
        self.slab
            .try_at(item.index)
            .is_some_and(|e| e.ready && e.stamp() == item.stamp)
    }

    /// Drops stale items from the front, keeping "the front is live" true so
    /// `next_deadline(&self)` and `poll_expired` can trust it.
    ///
    /// Without orphaned items in the queue every item is live, and the check
    /// (a load of the next entry) is skipped.
    fn trim_ready(&mut self) {
        while self.orphans > 0 {
            let Some(item) = self.ready.peek() else {
                break;
            };
            if self.is_live(item) {
                break;
            }
            self.ready.pop();
            self.orphans -= 1;
        }
    }
}
