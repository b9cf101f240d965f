//! Zeroes written ahead of the journal writer, so that each group's
//! `fdatasync` writes data only, not block allocations.
//!
//! fjall creates a journal as a 64 MiB sparse file (`ftruncate`) and
//! writes it from offset 0. An `fdatasync` after a write into a hole must
//! also write the file system's allocation metadata: on this project's
//! machine that costs a third more time and CPU than a write into blocks
//! that already hold zeros (docs/BENCHMARKS.md, `delayd fsync-bench`).
//! The sync thread therefore writes zeros over the holes just ahead of
//! the writer, one [`STEP`] at a time, and fsyncs them while no caller
//! waits on them.
//!
//! **Architecture invariant: pre-zeroing never changes a byte of a
//! journal, nor its length.** It writes zeros only over holes (which read
//! as zeros already) and only below the file's length, so the files
//! fjall recovers, `delayd check` reads and the crash tests count are the
//! same bytes as without it; a crash mid-step leaves zeros, as before.
//! What makes it safe against the writer:
//! - the step runs with the engine write lock held, after the journal's
//!   buffer was handed to the OS, so no engine write is in flight and
//!   every byte fjall wrote is visible to `SEEK_DATA`;
//! - it zeroes only from the first hole after all data, and only when
//!   `SEEK_DATA` finds nothing beyond that point (fjall writes a journal
//!   front to back, so its data is all below the hole);
//! - it never extends the file, so a journal fjall reopened in append
//!   mode (after a restart: recovery cut it to its data) is never
//!   touched: it has no hole below its length.
//!
//! When the zeroed run needs extending: a [`TRIPWIRE`] block in the
//! middle of each step is left a hole; once the writer's data fills it,
//! the next step is due. Checking costs one `lseek` per group. Large groups
//! (fewer than [`MIN_GROUPS_PER_STEP`] between steps) stop it for the file:
//! for them the zeros would double the bytes written to save a constant.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::{seek, SeekFrom};
use rustix::io::Errno;

/// Bytes zeroed per step: the most the zeroed run reaches past the data.
pub(crate) const STEP: u64 = 1 << 20;
/// The tripwire hole's size (a file system block).
pub(crate) const TRIPWIRE: u64 = 4096;
/// Fewer groups than this between two steps (more than 32 KiB per group
/// on average) stop pre-zeroing the file: an fsync of a large group costs
/// its data's write anyway, the allocation it saves is about constant, and
/// zeroing ahead would double the bytes written.
pub(crate) const MIN_GROUPS_PER_STEP: u64 = 16;

/// What a step writes from. A zeroed static lives in `.bss`: reading it
/// maps the kernel's shared zero page, where a fresh 1 MiB allocation per
/// step could fault in (and clear) a new huge page each time.
static ZEROS: [u8; STEP as usize] = [0; STEP as usize];

/// The pre-zeroing state of one journal file.
pub(crate) struct Prezero {
    file: File,
    len: u64,
    /// The hole whose filling makes the next step due; `None` before the
    /// first step.
    tripwire: Option<u64>,
    /// Nothing more to zero in this file (its end reached, a layout this
    /// module does not expect, when it stays out of the way, or groups too
    /// large to gain from it).
    done: bool,
    /// Groups fsynced since the last step.
    groups: u64,
}

impl Prezero {
    /// Pre-zeroing of `file`, opened for writing without `O_APPEND`.
    pub fn new(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(Self {
            file,
            len,
            tripwire: None,
            done: false,
            groups: 0,
        })
    }

    /// Counts a fsynced group (call once per group) and says whether a
    /// step is due: the writer reached the tripwire (or no step ran yet). A racy look without the write lock:
    /// [`Prezero::step`] checks again.
    pub fn after_group(&mut self) -> bool {
        if self.done {
            return false;
        }
        self.groups += 1;
        match self.tripwire {
            None => true,
            Some(at) => hole_at(&self.file, at).map_or(true, |hole| hole != at),
        }
    }

    /// Zeroes the next [`STEP`] past the writer's data, leaving the next
    /// tripwire. Call with the engine write lock held and the journal's
    /// buffer flushed. Returns whether zeros were written (they want an
    /// `fdatasync`, which may run after the lock is released).
    pub fn step(&mut self) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        // The first hole after the tripwire (or the file's start): every
        // block below it holds data, the writer's or earlier zeros.
        let from = self.tripwire.unwrap_or(0);
        let start = hole_at(&self.file, from)?;
        if self.tripwire == Some(start) {
            // The writer has not reached the tripwire yet.
            return Ok(false);
        }
        if self.tripwire.is_some() && std::mem::take(&mut self.groups) < MIN_GROUPS_PER_STEP {
            self.done = true;
            return Ok(false);
        }
        self.groups = 0;
        if start >= self.len || data_at(&self.file, start)?.is_some_and(|d| d < self.len) {
            // The end, or data past a hole: not a layout fjall writes
            // (front to back); stay out of its way.
            self.done = true;
            return Ok(false);
        }
        let end = (start + STEP).min(self.len);
        let tripwire = (start + STEP / 2) & !(TRIPWIRE - 1);
        let zeros = &ZEROS[..];
        if end < self.len && tripwire > start && tripwire + TRIPWIRE < end {
            self.write_zeros(zeros, start, tripwire)?;
            self.write_zeros(zeros, tripwire + TRIPWIRE, end)?;
            self.tripwire = Some(tripwire);
        } else {
            self.write_zeros(zeros, start, end)?;
            self.done = true;
        }
        Ok(true)
    }

    /// fsyncs the zeros written by [`Prezero::step`].
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write_zeros(&self, zeros: &[u8], from: u64, to: u64) -> io::Result<()> {
        let len = usize::try_from(to - from).map_err(io::Error::other)?;
        self.file.write_all_at(&zeros[..len], from)
    }
}

/// The first hole at or after `at` (the file's length counts as one).
fn hole_at(file: &File, at: u64) -> io::Result<u64> {
    Ok(seek(file, SeekFrom::Hole(at))?)
}

/// The first data at or after `at`, if any.
fn data_at(file: &File, at: u64) -> io::Result<Option<u64>> {
    match seek(file, SeekFrom::Data(at)) {
        Ok(pos) => Ok(Some(pos)),
        Err(Errno::NXIO) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
#[path = "prezero_tests.rs"]
mod tests;
