//! Torn last batches, page by page: a crash during the write of the newest
//! journal's last batch (never acknowledged: with `Durability::Always` a
//! call returns only after its batch is fsynced, and the next batch is
//! written only after that fsync) can leave any of the batch's 4 KiB pages
//! unwritten (zeros) or garbled, in any combination. Open must keep every
//! earlier batch and drop exactly that one; damage in an earlier batch is
//! still refused and named (docs/storage.md, "Torn tails").

use std::path::{Path, PathBuf};

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, QueueName};
use delayd_local::{check, FileKind, LocalBroker, LocalConfig, Severity};

const PAGE: u64 = 4096;
const KEPT: usize = 10;
/// Two messages of 12 000 bytes: the batch's middle pages hold only
/// payload bytes, so losing one leaves every frame whole and only the
/// checksum wrong.
const LAST: usize = 2;
const LAST_PAYLOAD: usize = 12_000;

fn queue() -> QueueName {
    QueueName::new("pages").expect("queue name")
}

/// Just past the last non-zero byte (journals are preallocated zeros).
fn written_end(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| p as u64 + 1)
}

fn newest_journal(dir: &Path) -> PathBuf {
    let journals = check::journals(dir).expect("list journals");
    journals.last().cloned().expect("a journal")
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 255) as u8 + 1
        })
        .collect()
}

async fn enqueue(broker: &LocalBroker, ids: &[String], payload: usize) {
    let requests = ids
        .iter()
        .map(|id| EnqueueRequest {
            id: Some(MessageId::new(id.clone()).expect("id")),
            // Non-zero, incompressible bytes: the batch's size on disk is
            // the payload's, and a zeroed page is visible in it.
            payload: noise(id.len() as u64 + payload as u64, payload),
            ..EnqueueRequest::default()
        })
        .collect();
    let out = broker
        .enqueue(&queue(), requests, EnqueueOptions::default())
        .await
        .expect("enqueue");
    assert!(out.iter().all(|r| r.as_ref().is_ok_and(|o| o.created)));
}

/// A store whose newest journal ends in one multi-page batch: returns
/// the journal and that batch's byte range.
async fn base(dir: &Path) -> (PathBuf, std::ops::Range<u64>) {
    let broker = LocalBroker::open(LocalConfig::new(dir))
        .await
        .expect("open");
    for i in 0..KEPT {
        enqueue(&broker, &[format!("kept-{i}")], 300).await;
    }
    let journal = newest_journal(dir);
    let before = written_end(&std::fs::read(&journal).expect("read"));
    let last: Vec<String> = (0..LAST).map(|i| format!("last-{i}")).collect();
    enqueue(&broker, &last, LAST_PAYLOAD).await;
    let after = written_end(&std::fs::read(&journal).expect("read"));
    broker.shutdown().await.expect("shutdown");
    assert_eq!(newest_journal(dir), journal, "shutdown started no journal");
    let now = written_end(&std::fs::read(&journal).expect("read"));
    assert_eq!(now, after, "shutdown wrote nothing after the last batch");
    assert!(after - before > 3 * PAGE, "the last batch spans pages");
    (journal, before..after)
}

/// The byte ranges of the last batch in each 4 KiB page of the file (the
/// first page it shares with the batch before it: only its own bytes).
fn pages(batch: &std::ops::Range<u64>) -> Vec<std::ops::Range<u64>> {
    (batch.start / PAGE..batch.end.div_ceil(PAGE))
        .map(|p| (p * PAGE).max(batch.start)..((p + 1) * PAGE).min(batch.end))
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Harm {
    Zeroed,
    Garbage,
}

fn harm(bytes: &mut [u8], range: &std::ops::Range<u64>, how: Harm, salt: u64) {
    let mut x = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut bytes[range.start as usize..range.end as usize] {
        *b = match how {
            Harm::Zeroed => 0,
            Harm::Garbage => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            }
        };
    }
}

/// Copies the store; the journal only up to its written end (what
/// follows is preallocated zeros), so a case costs little disk.
fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_store(&src, &dst);
        } else if src.extension().is_some_and(|e| e == "jnl") {
            let bytes = std::fs::read(&src).expect("read journal");
            let end = written_end(&bytes) as usize;
            std::fs::write(&dst, &bytes[..end]).expect("write journal");
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

async fn present(broker: &LocalBroker, id: &str) -> bool {
    let id = MessageId::new(id).expect("id");
    broker.get(&queue(), &id).await.is_ok()
}

/// Damages `which` pages of the last batch in a copy, then checks that
/// `check` calls it a torn tail and open keeps exactly the earlier batches.
async fn torn_case(
    base: &Path,
    journal: &Path,
    batch: &std::ops::Range<u64>,
    which: &[(usize, Harm)],
) {
    let case = tempfile::tempdir().expect("tempdir");
    let dir = case.path().join("data");
    copy_store(base, &dir);
    let path = dir.join(journal.strip_prefix(base).expect("in base"));
    let mut bytes = std::fs::read(&path).expect("read");
    let pages = pages(batch);
    for (salt, (page, how)) in which.iter().enumerate() {
        harm(&mut bytes, &pages[*page], *how, salt as u64 + 7);
    }
    std::fs::write(&path, &bytes).expect("write");
    let whole_batch_zeroed = bytes[batch.start as usize..batch.end as usize]
        .iter()
        .all(|&b| b == 0);

    let report = check::check(&dir, &case.path().join("scratch")).expect("check");
    assert!(!report.damaged(), "{which:?}: {:#?}", report.findings);
    let torn: Vec<_> = report.findings.iter().map(|f| f.severity).collect();
    match whole_batch_zeroed {
        true => assert!(torn.is_empty(), "{which:?}: {torn:?}"),
        false => assert_eq!(torn, [Severity::TornTail], "{which:?}"),
    }

    let broker = LocalBroker::open(LocalConfig::new(&dir))
        .await
        .unwrap_or_else(|e| panic!("{which:?}: open refused a torn last batch: {e}"));
    assert_eq!(
        broker.recovery_report().torn_tail_detected(),
        !whole_batch_zeroed,
        "{which:?}: {:?}",
        broker.recovery_report()
    );
    for i in 0..KEPT {
        assert!(
            present(&broker, &format!("kept-{i}")).await,
            "{which:?}: kept-{i} lost"
        );
    }
    for i in 0..LAST {
        assert!(
            !present(&broker, &format!("last-{i}")).await,
            "{which:?}: last-{i} kept"
        );
    }
    let stats = broker.get_queue(&queue()).await.expect("queue").stats;
    assert_eq!(stats.ready, KEPT as u64, "{which:?}");
    // The store takes writes again, and they survive a reopen.
    enqueue(&broker, &["after".to_string()], 10).await;
    broker.shutdown().await.expect("shutdown");
    drop(broker);
    let broker = LocalBroker::open(LocalConfig::new(&dir))
        .await
        .expect("reopen");
    assert!(present(&broker, "after").await, "{which:?}");
    assert!(present(&broker, "kept-0").await, "{which:?}");
    broker.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn every_page_of_the_last_batch_torn_alone_or_together_drops_only_it() {
    let base_dir = tempfile::tempdir().expect("tempdir");
    let (journal, batch) = base(base_dir.path()).await;
    let n = pages(&batch).len();
    let mut cases: Vec<Vec<(usize, Harm)>> = Vec::new();
    for page in 0..n {
        cases.push(vec![(page, Harm::Zeroed)]);
        cases.push(vec![(page, Harm::Garbage)]);
    }
    cases.push((0..n).map(|p| (p, Harm::Zeroed)).collect());
    cases.push((0..n).map(|p| (p, Harm::Garbage)).collect());
    // Pairs, one page zeroed and the other garbled: neighbours, and the
    // first with the last (the end marker whole or not).
    for a in 0..n - 1 {
        cases.push(vec![(a, Harm::Zeroed), (a + 1, Harm::Garbage)]);
    }
    cases.push(vec![(0, Harm::Garbage), (n - 1, Harm::Zeroed)]);
    for which in &cases {
        torn_case(base_dir.path(), &journal, &batch, which).await;
    }
}

/// A middle page of the last batch missing while its end page is whole
/// gives a checksum mismatch (the case the old rule refused).
#[tokio::test]
async fn a_checksum_mismatch_in_the_last_batch_is_a_torn_tail() {
    let base_dir = tempfile::tempdir().expect("tempdir");
    let (journal, batch) = base(base_dir.path()).await;
    // Page 1 holds only payload bytes of the first message (12 000 long).
    let middle = 1;
    torn_case(base_dir.path(), &journal, &batch, &[(middle, Harm::Zeroed)]).await;
}

/// Damage in the batch before the last (fsynced before the last was
/// written, so acknowledged) is refused and named, torn tail or not.
#[tokio::test]
async fn damage_before_the_last_batch_is_still_refused_and_named() {
    let base_dir = tempfile::tempdir().expect("tempdir");
    let (journal, batch) = base(base_dir.path()).await;
    for tear_last_too in [false, true] {
        let case = tempfile::tempdir().expect("tempdir");
        let dir = case.path().join("data");
        copy_store(base_dir.path(), &dir);
        let path = dir.join(journal.strip_prefix(base_dir.path()).expect("in base"));
        let mut bytes = std::fs::read(&path).expect("read");
        // A payload byte of kept-9's batch, just before the last batch.
        bytes[batch.start as usize - 100] ^= 0x5a;
        if tear_last_too {
            let last_page = pages(&batch).pop().expect("a page");
            harm(&mut bytes, &last_page, Harm::Zeroed, 1);
        }
        std::fs::write(&path, &bytes).expect("write");
        let err = LocalBroker::open(LocalConfig::new(&dir))
            .await
            .err()
            .expect("damage before the last batch must be refused");
        let found = err.damage();
        assert!(
            found.iter().any(|f| f.kind == FileKind::Journal
                && f.severity == Severity::Damage
                && dir.join(&f.path) == path),
            "{found:#?}"
        );
    }
}
