//! Turning what is on disk into memory: the one sequence (format check,
//! fresh state, recovery, persist, torn-tail bookkeeping) that both
//! [`crate::LocalBroker::open`] and the sync thread's in-process reopen
//! after a failed write run, so the two cannot drift apart.

use std::sync::Arc;

use delayd_core::Clock;

use crate::broker::RecoveryReport;
use crate::codec::FORMAT_VERSION;
use crate::consume::Failure;
use crate::driver;
use crate::error::{OpenError, StoreError};
use crate::state::{State, Tx};
use crate::store::Store;
use crate::sync::Reopen;

/// Why the engine's contents are being loaded.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Occasion {
    /// The broker's open: an empty directory is a new store.
    Start,
    /// The sync thread's reopen after a failed write: the store was open a
    /// moment ago, so a missing format version means its files are gone,
    /// not new. Seqs below `next_seq` were handed out, perhaps in groups
    /// the failure lost: they are skipped, not reused, because a caller
    /// told "maybe applied" may still hold one.
    Heal { next_seq: u64 },
}

/// Builds memory from the open engine `store`, whose opening cut
/// `torn_tail_bytes` off the journal: checks the format version, rebuilds
/// the state, makes recovery's writes (expired leases) durable, and
/// reports what it found.
pub(crate) fn load(
    store: &Store,
    torn_tail_bytes: u64,
    occasion: Occasion,
    now: u64,
    horizon_ms: u64,
    history: bool,
) -> Result<(State, RecoveryReport), OpenError> {
    let fail = |source: StoreError| OpenError::Store {
        path: store.dir().to_path_buf(),
        source,
    };
    match (store.format_version().map_err(fail)?, occasion) {
        (Some(FORMAT_VERSION), _) => {}
        (None, Occasion::Start) => store.init_format().map_err(fail)?,
        (None, Occasion::Heal { .. }) => {
            return Err(OpenError::FormatMissing {
                path: store.dir().to_path_buf(),
            })
        }
        (Some(found), _) => {
            return Err(OpenError::FormatVersion {
                path: store.dir().to_path_buf(),
                found,
                expected: FORMAT_VERSION,
            })
        }
    }
    let mut next_seq = store.seq_high_water().map_err(fail)? + 1;
    if let Occasion::Heal {
        next_seq: handed_out,
    } = occasion
    {
        next_seq = next_seq.max(handed_out);
    }
    let mut state = State::new(next_seq, history);
    let mut report = recover(&mut state, store, now, horizon_ms).map_err(fail)?;
    // Recovery changed records (expired leases): durable before serving.
    store.persist(fjall::PersistMode::SyncAll).map_err(fail)?;
    report.torn_tail_bytes = torn_tail_bytes;
    if report.torn_tail_detected() {
        tracing::warn!(
            bytes = report.torn_tail_bytes,
            "journal tail was damaged; cut off"
        );
    }
    Ok((state, report))
}

/// Rebuilds memory from the store: queues, the horizon's messages, dead
/// messages, and leases of the previous process (expired now).
fn recover(
    state: &mut State,
    store: &Store,
    now: u64,
    horizon_ms: u64,
) -> Result<RecoveryReport, StoreError> {
    let mut report = RecoveryReport::default();
    let queues = store.all_queues()?;
    // After a restart flow buckets start empty now, so a restart grants no
    // burst; a new store has nothing to protect (buckets start full).
    if !queues.is_empty() {
        state.flows.reopened(now);
    }
    for (name, record) in queues {
        report.messages_on_disk +=
            record.counts.waiting + record.counts.leased + record.counts.dead;
        state.restore_queue(name, record);
    }
    // Before the leases expire below: each applies its successor.
    state.load_successors(store.all_successors()?)?;
    let mut tx = Tx::default();
    // Horizon first: expired leases are placed relative to it.
    while driver::load_horizon_step(state, store, now, horizon_ms, &mut tx)? {}
    for key in store.pinned_keys()? {
        let (queue, _) = crate::codec::decode_message_key(&key)?;
        let Some(rec) = store.message(&key)? else {
            continue;
        };
        let leased = rec.state == delayd_core::MessageState::Leased;
        state.load(&queue, rec.clone(), now, &mut tx);
        if leased {
            report.leases_expired += 1;
            let failure = Failure {
                delay_ms: None,
                priority: None,
                may_die: true,
                event: delayd_core::EventKind::Expired,
                // A lease that ran out while the broker was down failed at
                // its expiry; one still running fails now.
                at: rec.lease_until.unwrap_or(now).min(now),
            };
            state
                .fail(&queue, rec, failure, now, &mut tx)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        }
    }
    report.schedules_armed = state.load_schedules(store, now)?;
    state.refresh_flow(now, &mut tx);
    state.absorb(tx);
    state.flush_pending(store)?;
    // Recovery's writes need no sync-thread round: `load` fsyncs them
    // (so they do not count as undurable for the first leases either).
    state.groups.recovered();
    report.messages_in_memory = state.queues.values().map(|q| q.messages.len() as u64).sum();
    Ok(report)
}

/// The in-process reopen the sync thread runs after a failed write: closes
/// and opens the engine, then replaces `state` (locked by the caller) with
/// memory loaded from the disk as at open. What memory held beyond the
/// disk was never durable, and its callers were answered `Unavailable`.
/// Leases come back expired, as after a restart; lease calls waiting now
/// get an empty answer (their wait ends).
pub(crate) fn reopener(store: Arc<Store>, clock: Arc<dyn Clock>, horizon_ms: u64) -> Reopen {
    Box::new(move |state: &mut State| {
        let history = state.keeps_history();
        let torn_tail_bytes = store.reopen().map_err(|source| OpenError::Store {
            path: store.dir().to_path_buf(),
            source,
        })?;
        let occasion = Occasion::Heal {
            next_seq: state.next_seq(),
        };
        let (fresh, report) = load(
            &store,
            torn_tail_bytes,
            occasion,
            clock.now_ms(),
            horizon_ms,
            history,
        )?;
        *state = fresh;
        tracing::warn!(
            torn_tail_bytes = report.torn_tail_bytes,
            messages_on_disk = report.messages_on_disk,
            leases_expired = report.leases_expired,
            "storage engine reopened; memory rebuilt from the disk"
        );
        Ok(())
    })
}
