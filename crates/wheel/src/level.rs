//! Slot arithmetic and the per-level occupancy bitmaps.
//!
//! Ticks are `u64`. A level has 64 slots, so level `L` consumes bits
//! `6L .. 6L+6` of a tick. Eleven levels cover all 64 bits (the top level only
//! uses its low 4 bits), which is why no deadline ever needs clamping: levels
//! `OVERFLOW_FIRST..LEVELS` are the *overflow levels* that hold deadlines more
//! than 2^36 ticks (~2.2 years at 1 ms) away and re-insert them into finer
//! levels as time approaches.

/// Slots per level.
pub(crate) const SLOTS: usize = 64;
/// Bits of a tick consumed by one level.
const BITS: u32 = 6;
/// Number of levels: ceil(64 / 6).
pub(crate) const LEVELS: usize = 11;
/// First level whose slots are wider than 2^36 ticks; documented as overflow.
#[allow(dead_code)] // referenced by docs and tests
pub(crate) const OVERFLOW_FIRST: usize = 6;
/// Lists per slot. An entry goes to list `tick % WAYS` of its slot, so
/// entries with equal ticks share a list (and keep insertion order), while
/// emptying a big slot walks `WAYS` independent chains at once: the CPU
/// overlaps their cache misses instead of waiting for one at a time.
pub(crate) const WAYS: usize = 16;
const _: () = assert!(WAYS.is_power_of_two() && WAYS <= 32, "way masks are u32");
/// Sentinel for "no entry" in intrusive links.
pub(crate) const NIL: u32 = u32::MAX;

/// Level at which an entry due at `tick` lives while the wheel is at `elapsed`.
///
/// The level is chosen by the most significant bit in which `tick` and
/// `elapsed` differ (not by the distance between them): this guarantees that
/// every entry on level `L` agrees with `elapsed` on all bits above level `L`,
/// so its slot index can be compared directly with the current slot index.
/// Requires `tick > elapsed`.
pub(crate) fn level_for(elapsed: u64, tick: u64) -> usize {
    debug_assert!(
        tick > elapsed,
        "level_for: tick {tick} <= elapsed {elapsed}"
    );
    // `| 63` folds "same 64-tick block" into level 0.
    let masked = (elapsed ^ tick) | (SLOTS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    (significant / BITS) as usize
}

/// Slot index of `tick` on `level`.
pub(crate) fn slot_for(tick: u64, level: usize) -> usize {
    ((tick >> (BITS * level as u32)) & (SLOTS as u64 - 1)) as usize
}

/// First tick covered by `slot` of `level`, given the wheel is at `elapsed`.
///
/// Bits above the level come from `elapsed` (see [`level_for`]); for the top
/// level there are none, and the shift would overflow, hence `checked_shl`.
pub(crate) fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    let shift = BITS * level as u32;
    let span_bits = shift + BITS;
    let upper_mask = match 1u64.checked_shl(span_bits) {
        Some(span) => !(span - 1),
        None => 0,
    };
    (elapsed & upper_mask) | ((slot as u64) << shift)
}

/// Last tick covered by a slot of `level` that starts at `start`.
pub(crate) fn slot_end(start: u64, level: usize) -> u64 {
    let span_mask = 1u64
        .checked_shl(BITS * level as u32)
        .map_or(u64::MAX, |span| span - 1);
    start | span_mask
}

/// Which of a slot's lists holds `tick`.
pub(crate) fn way_for(tick: u64, level: usize) -> usize {
    if level < MULTI_WAY_LEVEL {
        return 0;
    }
    (tick as usize) & (WAYS - 1)
}

/// Lowest level whose slots spread entries over `WAYS` lists.
pub(crate) const MULTI_WAY_LEVEL: usize = 1;

/// Head and tail of one slot's intrusive doubly-linked list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl List {
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

/// One level: 64 slots of `WAYS` lists each, plus a bitmap of which slots are
/// non-empty.
pub(crate) struct Level {
    pub(crate) occupied: u64,
    /// Per slot, bit `w`: list `w` is non-empty. (`occupied` bit `s` is set
    /// iff `ways[s] != 0`.)
    pub(crate) ways: [u32; SLOTS],
    pub(crate) slots: [[List; WAYS]; SLOTS],
}

impl Level {
    pub(crate) fn new() -> Self {
        Level {
            occupied: 0,
            ways: [0; SLOTS],
            slots: [[List::EMPTY; WAYS]; SLOTS],
        }
    }

    /// Lowest occupied slot, if any. Because every entry on a level is ahead of
    /// `elapsed` and agrees with it above this level, the lowest set bit is
    /// also the earliest slot: no rotation is needed.
    pub(crate) fn first_occupied(&self) -> Option<usize> {
        (self.occupied != 0).then(|| self.occupied.trailing_zeros() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places `tick` relative to `elapsed` and checks the round trip: the
    /// slot start must not exceed the tick and must lie after `elapsed`.
    fn check(elapsed: u64, tick: u64, want_level: usize) {
        let level = level_for(elapsed, tick);
        assert_eq!(level, want_level, "elapsed={elapsed} tick={tick}");
        let slot = slot_for(tick, level);
        let start = slot_start(elapsed, level, slot);
        assert!(start <= tick, "start {start} > tick {tick}");
        assert!(start > elapsed, "start {start} <= elapsed {elapsed}");
        if level == 0 {
            assert_eq!(start, tick, "level 0 slots are exact");
        }
        assert!(slot > slot_for(elapsed, level), "slot must be ahead");
    }

    #[test]
    fn level_zero_boundaries() {
        check(0, 1, 0);
        check(0, 63, 0);
        check(0, 64, 1);
        check(0, 65, 1);
        check(63, 64, 1);
        check(64, 65, 0);
        check(64, 127, 0);
        check(64, 128, 1);
    }

    #[test]
    fn level_one_and_two_boundaries() {
        check(0, 4095, 1);
        check(0, 4096, 2);
        check(0, 4097, 2);
        check(4095, 4096, 2);
        check(4096, 4097, 0);
        check(4096, 4096 + 64, 1);
    }

    #[test]
    fn every_level_boundary() {
        for level in 1..LEVELS {
            let boundary = 1u64 << (6 * level as u32);
            check(0, boundary - 1, level - 1);
            check(0, boundary, level);
            if let Some(next) = boundary.checked_add(1) {
                check(0, next, level);
            }
            check(boundary - 1, boundary, level);
        }
    }

    #[test]
    fn top_of_range() {
        check(0, u64::MAX, LEVELS - 1);
        check(u64::MAX - 1, u64::MAX, 0);
        check(u64::MAX - 63, u64::MAX, 0);
        check(u64::MAX - 64, u64::MAX, 1);
        check(u64::MAX - 4095, u64::MAX, 1);
        check(u64::MAX - 4096, u64::MAX, 2);
        check(1 << 63, u64::MAX, 10);
        check((1 << 63) - 1, 1 << 63, 10);
        assert_eq!(slot_for(u64::MAX, LEVELS - 1), 15);
        assert_eq!(slot_start(0, LEVELS - 1, 15), 15 << 60);
    }

    #[test]
    fn overflow_levels_start_beyond_two_to_the_36() {
        check(0, 1 << 36, OVERFLOW_FIRST);
        check(0, (1 << 36) - 1, OVERFLOW_FIRST - 1);
    }

    #[test]
    fn first_occupied_is_lowest_bit() {
        let mut level = Level::new();
        assert_eq!(level.first_occupied(), None);
        level.occupied = 0b1010_0000;
        assert_eq!(level.first_occupied(), Some(5));
        level.occupied = 1 << 63;
        assert_eq!(level.first_occupied(), Some(63));
    }
}
