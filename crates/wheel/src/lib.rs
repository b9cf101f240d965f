//! A hierarchical hashed timing wheel (Varghese & Lauck) for delayd.
//!
//! The wheel holds values with `u64` deadlines, fires them in (deadline,
//! insertion) order, and never reads a clock: the caller passes time in and
//! sleeps until [`Wheel::next_deadline`] instead of ticking.
//!
//! ```
//! use delayd_wheel::Wheel;
//!
//! let mut wheel = Wheel::new();
//! let late = wheel.insert(300, "late");
//! wheel.insert(100, "early");
//! wheel.insert(u64::MAX, "someday"); // any u64 is accepted
//! assert_eq!(wheel.next_deadline(), Some(100));
//!
//! wheel.reschedule(late, 50).expect("handle is live");
//! let fired: Vec<_> = std::iter::from_fn(|| wheel.poll_expired(200))
//!     .map(|e| (e.deadline, e.value))
//!     .collect();
//! assert_eq!(fired, [(50, "late"), (100, "early")]);
//! assert_eq!(wheel.cancel(late), None, "fired handles are stale");
//! assert_eq!(wheel.len(), 1);
//! ```
//!
//! # Layout
//!
//! - `level` — slot arithmetic (which level/slot/list a tick belongs to,
//!   where a slot starts and ends) and the per-level lists plus occupancy
//!   bitmaps.
//! - `slab` — entry storage: `Vec` of generation-tagged slots with a free
//!   list; a 32-byte entry for `T = u64`.
//! - `ready` — the queue of due entries, ordered by (deadline, insertion).
//! - `wheel` — [`Wheel`]: insert/cancel/reschedule/advance/poll.
//! - `error` — [`StaleHandle`].
//!
//! Deliberately absent: a keyed layer and an async adapter. The one user,
//! `delayd-local`'s `timers.rs`, keys entries itself (an entry there is in
//! the wheel or staged out of it, and is re-armed after a clock jump), and
//! its driver owns the sleeping.
//!
//! # Implementation
//!
//! **Ticks.** A deadline `d` maps to tick `ceil((d - start) / tick)` and the
//! time `now` to elapsed tick `floor((now - start) / tick)` (with `u64::MAX`
//! mapping to the last tick), so an entry is never returned before its
//! deadline. With `tick == 1` both are exact.
//!
//! **Levels and slot math.** Eleven levels of 64 slots; level `L` indexes
//! bits `6L..6L+6` of the tick, so together they cover every `u64` and no
//! deadline is ever clamped. An entry with tick `t` lives on the level of the
//! highest bit in which `t` and `elapsed` differ, in slot `(t >> 6L) & 63`.
//! Thus all entries of a level agree with `elapsed` above that level, lie in
//! slots strictly after the current one, and the lowest set bit of the
//! level's `u64` bitmap is its earliest slot; the earliest slot overall is on
//! the lowest non-empty level. Finding it is O(levels), never a slot scan.
//!
//! **Overflow.** Levels 6..=10 (slots 2^36 ticks and wider, ~2.2 years at
//! 1 ms) are the overflow levels: decades-away deadlines and `u64::MAX` sit
//! there and are re-inserted into finer levels as time approaches, by the
//! same cascade as every other level. All arithmetic is checked or
//! saturating.
//!
//! **Lists.** Each slot holds `WAYS` (16) intrusive lists; an entry goes to
//! list `tick % 16` of its slot (level 0 uses one list: a level-0 slot is a
//! single tick). Equal ticks therefore share a list and keep insertion order,
//! while emptying a large slot walks 16 independent chains at once, so the
//! CPU overlaps their cache misses. Walks stop at a list's tail, so the head's
//! `prev` and the tail's `next` are never read and removing an end entry
//! touches no neighbour.
//!
//! **Cascade.** `advance(now)` only records the target tick. `poll_expired`
//! then, whenever the ready buffer is empty, takes the earliest slot whose
//! start is `<= target` and empties it. For a level-0 or level-1 slot,
//! `elapsed` jumps to `min(target, last tick of the slot)` and every entry due
//! by then becomes ready in one batch, sorted by (deadline, stamp) with a
//! counting sort on the tick; the rest go to level 0. A higher slot sets
//! `elapsed` to its start and re-places its entries on lower levels. The
//! jump is safe because the earliest slot's lower levels are empty and every
//! other slot starts after its end. Each entry cascades at most ten times.
//! Cancel recomputes an entry's slot (and list) from its deadline and
//! `elapsed`, so an entry needs no slot field.
//!
//! **Ordering.** A slot list is kept in insertion order (appends at the tail;
//! cascades move lists in order), and entries with the same tick always share
//! a list. Ready entries get a stamp from a global counter as they become
//! due, and the ready queue pops by (deadline, stamp), which equals
//! (deadline, insertion order). Rescheduling appends, so it counts as a new
//! insertion.
//!
//! **Handles.** [`Handle`] is `(index, generation)`; freeing a slot bumps its
//! generation, so a stale handle never reaches a later occupant.

mod error;
mod level;
mod ready;
mod slab;
mod wheel;

pub use error::StaleHandle;
pub use wheel::{Expired, Handle, Wheel, WheelConfig};
