//! The commit groups as memory sees them: the open group (writes not yet
//! in the engine), the group the sync thread is writing, and the numbers
//! callers wait on. Part of [`State`](crate::state::State), under its lock;
//! calls add to the open group ([`Groups::absorb`]), the sync thread closes
//! it ([`Groups::close`]) and reports it written ([`Groups::written`]).
//!
//! Invariants kept here: every write of a call is in the open group, the
//! group in flight or the engine, and reads ([`Groups::overlay`]) look in
//! that order; group numbers only grow; a group is closed whole, with the
//! records of the queues its calls changed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use delayd_core::{MessageId, QueueName};

use crate::codec::{self, QueueRecord};
use crate::error::StoreError;
use crate::store::{Space, Store, WriteSet};

pub(crate) struct Groups {
    /// Writes of the open commit group, not yet in the engine. Reads of
    /// the engine look here first, and scans call [`Groups::flush`] first.
    pending: WriteSet,
    /// Queues whose record changed in the open group (written when the
    /// group is closed, once however many calls changed them).
    pending_queues: BTreeSet<QueueName>,
    /// Writes of the open group went to the engine early (`flush`), so
    /// `pending` no longer lists them all.
    pending_flushed: bool,
    /// Number of the open group: the ticket of a call whose writes joined
    /// it.
    open: u64,
    /// Writes joined the open group since the sync thread last closed it
    /// (they may already be in the engine through `flush`, but they still
    /// need the group's fsync).
    sync_needed: bool,
    /// When the open group got its first write (the commit's `open` phase).
    opened_at: Option<Instant>,
    /// The last closed group, which the sync thread may still be writing
    /// to the engine outside the lock: reads look here after `pending`.
    committing: Option<Arc<WriteSet>>,
    /// The last group the sync thread closed: its number, its writes and
    /// whether writes of it were flushed early. Once `durable_upto`
    /// reaches it, it counts as gone ([`Groups::in_flight`]), so
    /// publishing a group takes no state lock.
    in_flight: Option<(u64, Arc<WriteSet>, bool)>,
    /// The last durable group, as the sync thread publishes it.
    durable_upto: Arc<AtomicU64>,
}

/// A group the sync thread closed, to write to the engine.
pub(crate) struct Closed {
    pub number: u64,
    pub writes: Arc<WriteSet>,
    /// When it got its first write.
    pub opened_at: Option<Instant>,
    /// The group closed before it, which memory no longer needs: dropped
    /// by the caller after it releases the state lock, so that freeing a
    /// group's memory never holds the lock.
    pub previous: Option<(u64, Arc<WriteSet>, bool)>,
}

impl Default for Groups {
    fn default() -> Self {
        Self {
            pending: WriteSet::default(),
            pending_queues: BTreeSet::new(),
            pending_flushed: false,
            open: 1,
            sync_needed: false,
            opened_at: None,
            committing: None,
            in_flight: None,
            durable_upto: Arc::default(),
        }
    }
}

impl Groups {
    /// Adds a call's writes (and the queues whose records it changed) to
    /// the open group. Returns the ticket the call waits on before it
    /// answers: the open group when anything was (or still is) pending,
    /// else the group before it (what the call saw may be that group's,
    /// possibly not yet fsynced).
    pub fn absorb(&mut self, writes: WriteSet, queues: BTreeSet<QueueName>) -> u64 {
        let wrote = !writes.is_empty() || !queues.is_empty();
        self.pending.merge(writes);
        self.pending_queues.extend(queues);
        if wrote && !self.sync_needed {
            self.sync_needed = true;
            self.opened_at = Some(Instant::now());
        }
        if self.sync_needed {
            self.open
        } else {
            self.open - 1
        }
    }

    /// Whether the open group has writes the sync thread must commit.
    pub fn sync_needed(&self) -> bool {
        self.sync_needed
    }

    /// Writes in the open group (backpressure: callers wait for the group
    /// to be written when it grows large).
    pub fn backlog(&self) -> usize {
        self.pending.len()
    }

    /// The number of the open group (every ticket handed out so far is at
    /// most this).
    pub fn open_number(&self) -> u64 {
        self.open
    }

    /// Whether the stored record of a message has a write that is not
    /// durable yet: in the open group or the one in flight (or possibly
    /// among writes flushed early, which are not listed).
    pub fn write_pending(&self, queue: &QueueName, id: &MessageId) -> bool {
        let in_flight = self.in_flight();
        if self.pending_flushed || in_flight.is_some_and(|(_, flushed)| flushed) {
            return true;
        }
        if self.pending.is_empty() && in_flight.is_none() {
            // Everything written is durable: no key to build (per lease).
            return false;
        }
        let key = codec::message_key(queue, id);
        self.pending.get(Space::Messages, &key).is_some()
            || in_flight.is_some_and(|(set, _)| set.get(Space::Messages, &key).is_some())
    }

    /// The group closed by the sync thread and not yet durable, with
    /// whether writes of it were flushed early.
    fn in_flight(&self) -> Option<(&WriteSet, bool)> {
        let durable = self.durable_upto.load(Ordering::Acquire);
        self.in_flight
            .as_ref()
            .filter(|(group, ..)| *group > durable)
            .map(|(_, set, flushed)| (&**set, *flushed))
    }

    /// A stored value as the open group, else the group in flight, else
    /// the engine has it (`None` here: ask the engine).
    pub fn overlay(&self, space: Space, key: &[u8]) -> Option<Option<&[u8]>> {
        self.pending.get(space, key).or_else(|| {
            self.committing
                .as_ref()
                .and_then(|group| group.get(space, key))
        })
    }

    /// Closes the open group (a new one opens): its writes, with the
    /// records of the queues its calls changed (`record` of each, `None`
    /// for a deleted queue). It stays readable as the group in flight
    /// until [`written`](Self::written).
    pub fn close<'q>(
        &mut self,
        record: impl Fn(&QueueName) -> Option<&'q QueueRecord>,
    ) -> Result<Closed, StoreError> {
        let number = self.open;
        let writes = Arc::new(self.take_pending(record)?);
        self.open += 1;
        self.sync_needed = false;
        let flushed = std::mem::take(&mut self.pending_flushed);
        self.committing = Some(Arc::clone(&writes));
        let previous = self
            .in_flight
            .replace((number, Arc::clone(&writes), flushed));
        Ok(Closed {
            number,
            writes,
            opened_at: self.opened_at.take(),
            previous,
        })
    }

    /// The sync thread wrote `writes` to the engine: reads find them there
    /// now (unless a later group is already the one being written).
    pub fn written(&mut self, writes: &Arc<WriteSet>) {
        if self
            .committing
            .as_ref()
            .is_some_and(|committing| Arc::ptr_eq(committing, writes))
        {
            self.committing = None;
        }
    }

    fn take_pending<'q>(
        &mut self,
        record: impl Fn(&QueueName) -> Option<&'q QueueRecord>,
    ) -> Result<WriteSet, StoreError> {
        let mut set = std::mem::take(&mut self.pending);
        for name in std::mem::take(&mut self.pending_queues) {
            match record(&name) {
                Some(record) => set.queue(&name, record)?,
                None => set.delete(Space::Queues, name.as_str().as_bytes().to_vec()),
            }
        }
        Ok(set)
    }

    /// Writes the open group's writes to the engine now (before a scan of
    /// an index, which must see them). The group stays open: its callers
    /// still wait for the sync thread's fsync of it.
    pub fn flush<'q>(
        &mut self,
        store: &Store,
        record: impl Fn(&QueueName) -> Option<&'q QueueRecord>,
    ) -> Result<(), StoreError> {
        // Waits for the group in flight: it must reach the engine first.
        let writer = store.lock_writer();
        self.committing = None;
        if self.pending.is_empty() && self.pending_queues.is_empty() {
            return Ok(());
        }
        let set = self.take_pending(record)?;
        self.pending_flushed = true;
        store.commit_with(&set, &writer)
    }

    /// Recovery flushed and fsynced its own writes: they need no sync
    /// round, and do not count as undurable for the first leases.
    pub fn recovered(&mut self) {
        self.sync_needed = false;
        self.pending_flushed = false;
        self.opened_at = None;
    }

    /// Reads the published "durable up to" from `handle` (the sync
    /// thread's, set once it starts and again after a reopen).
    pub fn follow_durable(&mut self, handle: Arc<AtomicU64>) {
        self.durable_upto = handle;
    }

    /// After a reopen rebuilt memory: numbers go on above `last_ticket`,
    /// so no ticket handed out before the reopen is reused. `last_ticket +
    /// 1` stands for what is on disk (durable); the open group is the next.
    pub fn continue_after(&mut self, last_ticket: u64) {
        self.open = last_ticket + 2;
    }
}
