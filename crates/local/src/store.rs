//! The embedded store: fjall keyspaces, the write set one broker call
//! commits atomically, and the reads the broker needs.
//!
//! Every write of a call goes into one [`WriteSet`], merged under the
//! broker's state lock into the open commit group. The sync thread closes
//! a group under that lock and writes it as one fjall batch outside it,
//! holding the engine write lock (taken before the state lock is released),
//! so groups commit in the order of the state changes; until a group is in
//! the engine, reads see its writes through the state's overlay.
//! Durability (fsync) is shared by the group: see [`crate::sync`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use crate::codec::{self, MessageRecord, QueueRecord, RetainedRecord};
use crate::error::StoreError;
use crate::fault::Faults;
use crate::schedule_codec::{self, ScheduleHead};
use delayd_core::{MessageState, QueueName};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Space {
    Meta,
    Queues,
    Messages,
    Payloads,
    Due,
    Pinned,
    Schedules,
    Retained,
    Expiry,
    Events,
    Successors,
}

/// The writes of one broker call (or one commit group). Keyed, so that a
/// key touched twice is written once (a fjall batch gives all its items one
/// seqno, so duplicates inside one batch must not happen). One map per
/// keyspace, so that a read looks a key up by `&[u8]` without building an
/// owned key (reads of the open group happen per delivery).
#[derive(Default)]
pub(crate) struct WriteSet {
    ops: BTreeMap<Space, BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl WriteSet {
    pub fn put(&mut self, space: Space, key: impl Into<Vec<u8>>, value: Vec<u8>) {
        self.ops
            .entry(space)
            .or_default()
            .insert(key.into(), Some(value));
    }

    pub fn delete(&mut self, space: Space, key: impl Into<Vec<u8>>) {
        self.ops.entry(space).or_default().insert(key.into(), None);
    }

    pub fn is_empty(&self) -> bool {
        self.ops.values().all(BTreeMap::is_empty)
    }

    pub fn len(&self) -> usize {
        self.ops.values().map(BTreeMap::len).sum()
    }

    /// The pending write of a key: `Some(Some(value))` put, `Some(None)`
    /// deleted, `None` untouched (read the engine).
    pub fn get(&self, space: Space, key: &[u8]) -> Option<Option<&[u8]>> {
        self.ops.get(&space)?.get(key).map(|value| value.as_deref())
    }

    /// Adds a later set's writes: for a key both touch, the later one wins,
    /// which is what applying them one after the other would leave.
    pub fn merge(&mut self, later: WriteSet) {
        if self.ops.is_empty() {
            self.ops = later.ops;
            return;
        }
        for (space, writes) in later.ops {
            self.ops.entry(space).or_default().extend(writes);
        }
    }

    /// Records the index changes of a message going from `old` to `new`
    /// (`None`: absent). The `due` index holds exactly the stored-scheduled
    /// messages, `pinned` exactly the leased and dead ones and the
    /// scheduled ones that hold their flow key.
    pub fn message(
        &mut self,
        queue: &QueueName,
        old: Option<&MessageRecord>,
        new: Option<&MessageRecord>,
    ) -> Result<(), StoreError> {
        let Some(any) = new.or(old) else {
            return Ok(());
        };
        let key = codec::message_key(queue, &any.id);
        if let Some(old) = old {
            match old.stored_state() {
                MessageState::Scheduled => {
                    self.delete(Space::Due, codec::due_key(old.deliver_at, old.seq));
                    if old.holds_key() {
                        self.delete(Space::Pinned, codec::seq_key(old.seq));
                    }
                }
                _ => self.delete(Space::Pinned, codec::seq_key(old.seq)),
            }
        }
        match new {
            Some(new) => {
                let mut stored = new.clone();
                stored.state = new.stored_state();
                match stored.state {
                    MessageState::Scheduled => {
                        self.put(
                            Space::Due,
                            codec::due_key(new.deliver_at, new.seq),
                            key.clone(),
                        );
                        // A message holding its flow key is pinned too: it
                        // is loaded at start wherever its due time is.
                        if new.holds_key() {
                            self.put(Space::Pinned, codec::seq_key(new.seq), key.clone());
                        }
                    }
                    _ => self.put(Space::Pinned, codec::seq_key(new.seq), key.clone()),
                }
                self.put(Space::Messages, key, codec::encode_record(&stored)?);
            }
            None => {
                self.delete(Space::Messages, key);
                self.delete(Space::Payloads, codec::seq_key(any.seq));
            }
        }
        Ok(())
    }

    pub fn queue(&mut self, queue: &QueueName, record: &QueueRecord) -> Result<(), StoreError> {
        let value = codec::encode_record(record)?;
        self.put(Space::Queues, queue.as_str().as_bytes().to_vec(), value);
        Ok(())
    }
}

const MEMTABLE_BYTES: u64 = 8 * 1024 * 1024;

/// How the engine is opened.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EngineOptions {
    /// The block cache's size.
    pub cache_bytes: usize,
    /// The nice value of the engine's background threads (memtable
    /// flushes, compactions), see `LocalConfig::engine_nice`.
    pub nice: Option<i32>,
}

impl EngineOptions {
    /// A 1 MiB cache at the caller's nice value: for a store opened briefly
    /// (a check's scratch copy, a test).
    pub const SMALL: Self = Self {
        cache_bytes: 1 << 20,
        nice: None,
    };
}

/// Opens the database from a short-lived thread whose nice value is
/// `options.nice`: fjall starts its worker threads at open, and a thread
/// inherits its creator's nice value (on Linux each thread has its own).
/// If the nice value cannot be set, the workers run at the caller's.
fn open_in_background(dir: &Path, options: EngineOptions) -> Result<Database, fjall::Error> {
    let opener = || {
        if let Some(nice) = options.nice {
            if let Err(e) = rustix::process::setpriority_process(None, nice) {
                tracing::warn!(error = %e, nice, "cannot set the engine workers' nice value");
            }
        }
        Database::builder(dir)
            .cache_size(options.cache_bytes as u64)
            // Bounds journal replay at start-up (restart-to-first-delivery).
            .max_journaling_size(64 * 1024 * 1024)
            .open()
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("delayd-open".into())
            .spawn_scoped(scope, opener)
            .map_err(fjall::Error::Io)
            .and_then(|opening| {
                opening
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
    })
}

/// The `schedules` keyspace's memtable: its records are read one at a
/// time (a call, a fire), never scanned hot, so a smaller memtable costs
/// only more frequent small flushes, and it keeps the memory of many
/// schedules down (docs/storage.md, "Schedules", Memory).
const SCHEDULE_MEMTABLE_BYTES: u64 = 2 * 1024 * 1024;

/// A message key and that message's payload.
pub(crate) type KeyAndPayload = (Vec<u8>, Vec<u8>);
/// A stored key and its value.
pub(crate) type KeyAndValue = (Vec<u8>, Vec<u8>);

pub(crate) struct Store {
    dir: PathBuf,
    options: EngineOptions,
    /// Held by whoever writes a batch to the engine: the sync thread while
    /// it writes a closed group outside the state lock, and a scan's
    /// `flush_pending` (under the state lock), which must not overtake the
    /// group in flight. Order: state lock, then this, then `engine`.
    writer: Mutex<()>,
    /// The open engine. Replaced only by [`Store::reopen`] (with the state
    /// lock and the write lock held); `None` while a reopen failed, when
    /// every access answers [`StoreError::Closed`].
    engine: RwLock<Option<Engine>>,
    /// The test seam (no faults unless armed; nothing without the
    /// `fault-injection` feature).
    faults: Arc<Faults>,
}

/// One open fjall database and its keyspaces.
struct Engine {
    db: Database,
    meta: Keyspace,
    queues: Keyspace,
    messages: Keyspace,
    payloads: Keyspace,
    due: Keyspace,
    pinned: Keyspace,
    schedules: Keyspace,
    retained: Keyspace,
    expiry: Keyspace,
    events: Keyspace,
    successors: Keyspace,
}

/// What opening found about the journal tail.
pub(crate) struct OpenedStore {
    pub store: Store,
    /// Bytes the engine cut off the end of journal files at recovery (a
    /// torn or garbled last write).
    pub torn_tail_bytes: u64,
}

impl Engine {
    /// Opens the database; returns it with the bytes cut off the journal
    /// tail.
    fn open(dir: &Path, options: EngineOptions) -> Result<(Engine, u64), StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        // fjall silently truncates a damaged journal tail to the end of the
        // last whole batch. Journals are preallocated with zeros, so bytes
        // that were written (non-zero) beyond the size fjall leaves are
        // the damage; finding the last written byte before the open is how
        // we can report it.
        let (found, journals) = crate::check::before_open(dir)?;
        refuse_damage(found)?;
        if let Some((path, offset)) = &journals.torn_at {
            cut_torn_tail(path, *offset)?;
        }
        let db = open_in_background(dir, options).map_err(|e| name_damage(dir, e))?;
        let after = journal_sizes(dir)?;
        let torn_tail_bytes = journals
            .newest_written_end
            .and_then(|(path, end)| after.get(&path).map(|now| end.saturating_sub(*now)))
            .unwrap_or(0);
        // Small memtables: memory stays bounded by a few MiB per keyspace
        // rather than growing with the messages written (fjall's default
        // is 64 MiB each).
        let open_sized = |name: &str, bytes: u64| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(bytes)
            })
        };
        let open = |name: &str| open_sized(name, MEMTABLE_BYTES);
        let engine = Engine {
            meta: open("meta")?,
            queues: open("queues")?,
            messages: open("messages")?,
            payloads: open("payloads")?,
            due: open("due")?,
            pinned: open("pinned")?,
            // Created last: keyspace ids follow creation order, and `check`
            // names keyspaces by id.
            schedules: open_sized("schedules", SCHEDULE_MEMTABLE_BYTES)?,
            // Added with retention: a store from before gets them at its
            // first open, after the others, so every id stays.
            retained: open("retained")?,
            expiry: open("expiry")?,
            // Added with message history, after those.
            events: open("events")?,
            // Added with replace and debounce, after those.
            successors: open("successors")?,
            db,
        };
        Ok((engine, torn_tail_bytes))
    }

    fn space(&self, space: Space) -> &Keyspace {
        match space {
            Space::Meta => &self.meta,
            Space::Queues => &self.queues,
            Space::Messages => &self.messages,
            Space::Payloads => &self.payloads,
            Space::Due => &self.due,
            Space::Pinned => &self.pinned,
            Space::Schedules => &self.schedules,
            Space::Retained => &self.retained,
            Space::Expiry => &self.expiry,
            Space::Events => &self.events,
            Space::Successors => &self.successors,
        }
    }
}

impl Store {
    pub fn open(dir: &Path, options: EngineOptions) -> Result<OpenedStore, StoreError> {
        let (engine, torn_tail_bytes) = Engine::open(dir, options)?;
        let store = Store {
            dir: dir.to_path_buf(),
            options,
            writer: Mutex::new(()),
            engine: RwLock::new(Some(engine)),
            faults: Arc::default(),
        };
        Ok(OpenedStore {
            store,
            torn_tail_bytes,
        })
    }

    /// Closes the engine and opens it again on the same directory (fjall
    /// replays its journal; a torn tail is cut and its size returned):
    /// after a failed write or fsync the engine refuses writes, and what
    /// is on disk, not what memory says, is the truth to go on from.
    /// The caller holds the state lock, so no call uses the engine now.
    pub fn reopen(&self) -> Result<u64, StoreError> {
        let _writer = self.lock_writer();
        let mut engine = self.engine.write().unwrap_or_else(|e| e.into_inner());
        // Dropped before the new open: fjall holds a lock file until its
        // database is dropped (which also stops its background workers).
        *engine = None;
        let (fresh, torn_tail_bytes) = Engine::open(&self.dir, self.options)?;
        *engine = Some(fresh);
        Ok(torn_tail_bytes)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Faults reads from now on as `faults` plans (after recovery, so
    /// that tests fault the calls, not the open).
    pub fn arm_faults(&mut self, faults: Arc<Faults>) {
        self.faults = faults;
    }

    /// The faults this store's engine calls go through.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Runs the read `f` on the open engine, unless a read fault is due.
    fn read<T>(&self, f: impl FnOnce(&Engine) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.faults.read().map_err(|source| StoreError::Io {
            path: self.dir.clone(),
            source,
        })?;
        self.with(f)
    }

    /// Runs `f` on the open engine.
    fn with<T>(&self, f: impl FnOnce(&Engine) -> Result<T, StoreError>) -> Result<T, StoreError> {
        // The guard protects a handle, not an invariant a panic could break.
        let engine = self.engine.read().unwrap_or_else(|e| e.into_inner());
        match engine.as_ref() {
            Some(engine) => f(engine),
            None => Err(StoreError::Closed),
        }
    }

    /// Handles of every keyspace with its name, in creation order (what
    /// `delayd check` reads record by record).
    pub fn keyspaces(&self) -> Result<[(&'static str, Keyspace); 11], StoreError> {
        self.with(|e| {
            Ok([
                ("meta", e.meta.clone()),
                ("queues", e.queues.clone()),
                ("messages", e.messages.clone()),
                ("payloads", e.payloads.clone()),
                ("due", e.due.clone()),
                ("pinned", e.pinned.clone()),
                ("schedules", e.schedules.clone()),
                ("retained", e.retained.clone()),
                ("expiry", e.expiry.clone()),
                ("events", e.events.clone()),
                ("successors", e.successors.clone()),
            ])
        })
    }

    /// The block cache's fill and capacity in bytes (zeros while no engine
    /// is open).
    pub fn cache_usage(&self) -> (u64, u64) {
        self.with(|e| Ok((e.db.cache_size(), e.db.cache_capacity())))
            .unwrap_or((0, 0))
    }

    /// `fjall::Database::persist` on the open engine.
    pub fn persist(&self, mode: fjall::PersistMode) -> Result<(), StoreError> {
        self.with(|e| Ok(e.db.persist(mode)?))
    }

    /// Takes the engine write lock (see [`Store::writer`]).
    pub fn lock_writer(&self) -> MutexGuard<'_, ()> {
        // Guards no data: poisoning carries no meaning here.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `set` as one atomic batch (journal buffer + memtables; no
    /// fsync here).
    pub fn commit(&self, set: &WriteSet) -> Result<(), StoreError> {
        let writer = self.lock_writer();
        self.commit_with(set, &writer)
    }

    /// [`commit`](Self::commit) with the write lock already held.
    pub fn commit_with(
        &self,
        set: &WriteSet,
        _writer: &MutexGuard<'_, ()>,
    ) -> Result<(), StoreError> {
        if set.is_empty() {
            return Ok(());
        }
        self.with(|engine| {
            let mut batch = engine.db.batch();
            for (space, writes) in &set.ops {
                let keyspace = engine.space(*space);
                for (key, value) in writes {
                    match value {
                        Some(value) => batch.insert(keyspace, key.as_slice(), value.as_slice()),
                        None => batch.remove(keyspace, key.as_slice()),
                    }
                }
            }
            batch.commit()?;
            Ok(())
        })
    }

    pub fn format_version(&self) -> Result<Option<u8>, StoreError> {
        self.read(|e| {
            Ok(e.meta
                .get(codec::META_FORMAT)?
                .and_then(|v| v.first().copied()))
        })
    }

    pub fn init_format(&self) -> Result<(), StoreError> {
        let mut set = WriteSet::default();
        set.put(Space::Meta, codec::META_FORMAT, vec![codec::FORMAT_VERSION]);
        self.commit(&set)?;
        self.persist(fjall::PersistMode::SyncAll)
    }

    pub fn seq_high_water(&self) -> Result<u64, StoreError> {
        self.read(|e| match e.meta.get(codec::META_SEQ)? {
            Some(v) => codec::decode_u64(&v),
            None => Ok(0),
        })
    }

    pub fn message(&self, key: &[u8]) -> Result<Option<MessageRecord>, StoreError> {
        self.read(|e| {
            e.messages
                .get(key)?
                .map(|v| codec::decode_record(&v))
                .transpose()
        })
    }

    /// The payload of the message with `seq`, with that message's key.
    pub fn payload(&self, seq: u64) -> Result<Option<KeyAndPayload>, StoreError> {
        let Some(value) = self.read(|e| Ok(e.payloads.get(codec::seq_key(seq))?))? else {
            return Ok(None);
        };
        let (key, payload) = codec::decode_payload(&value)?;
        Ok(Some((key.to_vec(), payload.to_vec())))
    }

    pub fn all_queues(&self) -> Result<Vec<(QueueName, QueueRecord)>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.queues.iter() {
                let (k, v) = guard.into_inner()?;
                out.push((codec::decode_queue_key(&k)?, codec::decode_record(&v)?));
            }
            Ok(out)
        })
    }

    /// Keys of `pinned` (leased and dead messages), in seq order.
    pub fn pinned_keys(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.pinned.iter() {
                out.push(guard.value()?.to_vec());
            }
            Ok(out)
        })
    }

    /// Up to `limit` entries of `due` from key `from` (inclusive) to
    /// `deliver_at == until` (exclusive),
    /// in (deliver_at, seq) order: (deliver_at, seq, message key).
    pub fn due_range(
        &self,
        from: (u64, u64),
        until: u64,
        limit: usize,
    ) -> Result<Vec<(u64, u64, Vec<u8>)>, StoreError> {
        self.read(|e| time_range(&e.due, from, until, limit))
    }

    /// A stored schedule value by its key.
    pub fn schedule(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|e| Ok(e.schedules.get(key)?.map(|v| v.to_vec())))
    }

    /// Every schedule of `queue` as (key, value), in id order.
    pub fn queue_schedules(&self, queue: &QueueName) -> Result<Vec<KeyAndValue>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.schedules.prefix(codec::queue_prefix(queue)) {
                let (k, v) = guard.into_inner()?;
                out.push((k.to_vec(), v.to_vec()));
            }
            Ok(out)
        })
    }

    /// Every schedule's key and head (what its timer needs), for open.
    pub fn schedule_heads(&self) -> Result<Vec<(Vec<u8>, ScheduleHead)>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.schedules.iter() {
                let (k, v) = guard.into_inner()?;
                out.push((k.to_vec(), schedule_codec::decode_head(&v)?));
            }
            Ok(out)
        })
    }

    /// A retained message's record by its message key.
    pub fn retained(&self, key: &[u8]) -> Result<Option<RetainedRecord>, StoreError> {
        self.read(|e| {
            e.retained
                .get(key)?
                .map(|v| codec::decode_record(&v))
                .transpose()
        })
    }

    /// Up to `limit` entries of the `expiry` index from key `from`
    /// (inclusive) whose time is before `until`, oldest first: (time, seq,
    /// message key).
    pub fn expired(
        &self,
        from: (u64, u64),
        until: u64,
        limit: usize,
    ) -> Result<Vec<(u64, u64, Vec<u8>)>, StoreError> {
        self.read(|e| time_range(&e.expiry, from, until, limit))
    }

    /// Every retained message of `queue`, with its key.
    pub fn queue_retained(
        &self,
        queue: &QueueName,
    ) -> Result<Vec<(Vec<u8>, RetainedRecord)>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.retained.prefix(codec::queue_prefix(queue)) {
                let (k, v) = guard.into_inner()?;
                out.push((k.to_vec(), codec::decode_record(&v)?));
            }
            Ok(out)
        })
    }

    /// An event of a message's history by its key.
    pub fn event(&self, key: &[u8]) -> Result<Option<codec::EventRecord>, StoreError> {
        self.read(|e| {
            e.events
                .get(key)?
                .map(|v| codec::decode_record(&v))
                .transpose()
        })
    }

    /// Every message key of `queue`.
    /// Every successor of a leased message (recovery loads them all:
    /// there are at most as many as leases).
    pub fn all_successors(&self) -> Result<Vec<(Vec<u8>, codec::SuccessorRecord)>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.successors.iter() {
                let (k, v) = guard.into_inner()?;
                out.push((k.to_vec(), codec::decode_record(&v)?));
            }
            Ok(out)
        })
    }

    pub fn queue_message_keys(&self, queue: &QueueName) -> Result<Vec<Vec<u8>>, StoreError> {
        self.read(|e| {
            let mut out = Vec::new();
            for guard in e.messages.prefix(codec::queue_prefix(queue)) {
                out.push(guard.key()?.to_vec());
            }
            Ok(out)
        })
    }
}

/// Up to `limit` entries of a keyspace keyed `[time][seq]` (`due`,
/// `expiry`) from key `from` (inclusive) to `time == until` (exclusive), in
/// key order: (time, seq, value).
fn time_range(
    keyspace: &Keyspace,
    from: (u64, u64),
    until: u64,
    limit: usize,
) -> Result<Vec<(u64, u64, Vec<u8>)>, StoreError> {
    let mut out = Vec::new();
    if from.0 >= until {
        return Ok(out);
    }
    let range = codec::due_key(from.0, from.1).to_vec()..codec::due_key(until, 0).to_vec();
    for guard in keyspace.range(range).take(limit) {
        let (k, v) = guard.into_inner()?;
        let (at, seq) = codec::decode_due_key(&k)?;
        out.push((at, seq, v.to_vec()));
    }
    Ok(out)
}

/// Fails on damage other than a torn journal tail: fjall would refuse
/// some of it without naming the file, and silently cut a journal at a
/// batch it cannot decode, dropping the committed batches after it.
fn refuse_damage(found: Vec<crate::check::Finding>) -> Result<(), StoreError> {
    let damage: Vec<_> = found
        .into_iter()
        .filter(|f| f.severity == crate::check::Severity::Damage)
        .collect();
    if damage.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Damaged(damage))
    }
}

/// The engine failed to open: if files are damaged (a table fjall could
/// not read at open), say which, rather than fjall's bare error.
fn name_damage(dir: &Path, error: fjall::Error) -> StoreError {
    if matches!(error, fjall::Error::Locked) {
        return error.into();
    }
    match crate::check::files(dir).map(refuse_damage) {
        Ok(Err(damaged)) => damaged,
        _ => error.into(),
    }
}

/// Cuts the newest journal at its torn last batch, as fjall cuts a batch
/// it cannot decode: fjall *refuses* a last batch whose end marker is
/// whole but whose checksum does not match (a crash that wrote the end
/// page but not a middle one), which would keep the store closed over a
/// batch that was never acknowledged.
fn cut_torn_tail(path: &Path, offset: u64) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io)?;
    file.set_len(offset).map_err(io)?;
    file.sync_all().map_err(io)
}

fn journal_sizes(dir: &Path) -> Result<BTreeMap<PathBuf, u64>, StoreError> {
    let io = |path: &Path, source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut out = BTreeMap::new();
    for path in crate::check::journals(dir).map_err(|e| io(dir, e))? {
        let len = std::fs::metadata(&path).map_err(|e| io(&path, e))?.len();
        out.insert(path, len);
    }
    Ok(out)
}
