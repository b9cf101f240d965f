//! Bit rot: flip bytes in each kind of file of a cleanly shut down store
//! (a journal batch, a table, a version file) and check that open never
//! panics, refuses damage it would otherwise lose data over, and names the
//! damaged file and its kind; and that the documented journal salvage
//! (truncate at the damaged batch) works.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, QueueName};
use delayd_local::{FileKind, LocalBroker, LocalConfig, OpenError, Severity};

const QUEUE: &str = "rot";

async fn open(dir: &Path) -> Result<LocalBroker, OpenError> {
    LocalBroker::open(LocalConfig::new(dir)).await
}

async fn fill(dir: &Path, count: usize, payload_bytes: usize) {
    let broker = open(dir).await.expect("open a fresh store");
    let queue = QueueName::new(QUEUE).expect("queue name");
    for i in 0..count {
        let request = EnqueueRequest {
            id: Some(MessageId::new(format!("m-{i}")).expect("id")),
            payload: vec![b'x'; payload_bytes],
            ..EnqueueRequest::default()
        };
        let outcome = broker
            .enqueue(&queue, vec![request], EnqueueOptions::default())
            .await
            .expect("enqueue");
        assert!(outcome[0].is_ok());
    }
    broker.shutdown().await.expect("shutdown");
}

fn journal(dir: &Path) -> PathBuf {
    let journals = delayd_local::check::journals(dir).expect("read dir");
    journals.last().cloned().expect("a journal")
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

/// Offsets just past each batch's end marker (`FJL\x03`).
fn batch_ends(bytes: &[u8]) -> Vec<usize> {
    bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"FJL\x03")
        .map(|(i, _)| i + 4)
        .collect()
}

async fn expect_refused(dir: &Path, kind: FileKind, file: &Path) -> String {
    let err = open(dir)
        .await
        .err()
        .expect("open must refuse a damaged store");
    assert!(err.is_corruption(), "{err}");
    let found = err.damage();
    assert!(
        found
            .iter()
            .any(|f| f.kind == kind && dir.join(&f.path) == file),
        "expected {kind} {} in {found:#?}",
        file.display()
    );
    err.to_string()
}

async fn ids_present(dir: &Path) -> Vec<usize> {
    let broker = open(dir).await.expect("open");
    let queue = QueueName::new(QUEUE).expect("queue name");
    let mut present = Vec::new();
    for i in 0..20 {
        let id = MessageId::new(format!("m-{i}")).expect("id");
        if broker.get(&queue, &id).await.is_ok() {
            present.push(i);
        }
    }
    broker.shutdown().await.expect("shutdown");
    present
}

#[tokio::test]
async fn rot_in_a_journal_payload_is_refused_named_and_salvageable() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 20, 200).await;
    let path = journal(dir.path());
    let bytes = std::fs::read(&path).expect("read");
    let ends = batch_ends(&bytes);
    // A payload byte in the middle of the journal: covered by its
    // batch's checksum, with whole batches after it.
    let at = ends[ends.len() / 2] + 300;
    flip(&path, at);
    let message = expect_refused(dir.path(), FileKind::Journal, &path).await;
    assert!(message.contains("checksum mismatch"), "{message}");

    // The salvage docs/operations.md gives: truncate at the damaged batch.
    let err = open(dir.path()).await.err().expect("still refused");
    let offset: u64 = err.damage()[0]
        .location
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .expect("an offset in the location");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open journal");
    file.set_len(offset).expect("truncate");
    drop(file);
    let present = ids_present(dir.path()).await;
    assert!(!present.is_empty() && present.len() < 20, "{present:?}");
    assert_eq!(
        present,
        (0..present.len()).collect::<Vec<_>>(),
        "a prefix is kept"
    );
}

#[tokio::test]
async fn a_flipped_batch_tag_is_refused_not_silently_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 20, 200).await;
    let path = journal(dir.path());
    let bytes = std::fs::read(&path).expect("read");
    let ends = batch_ends(&bytes);
    // The start tag of a batch in the middle: fjall's reader would stop
    // there and truncate the file, dropping every later batch silently.
    flip(&path, ends[ends.len() / 2]);
    expect_refused(dir.path(), FileKind::Journal, &path).await;
}

fn keyspace_dir(dir: &Path, name_id: u64) -> PathBuf {
    dir.join("keyspaces").join(name_id.to_string())
}

/// The current version file of keyspace `id` (4 = payloads).
fn version_file(dir: &Path, id: u64) -> PathBuf {
    let current = std::fs::read(keyspace_dir(dir, id).join("current")).expect("current");
    let version = u64::from_le_bytes(current[..8].try_into().expect("8 bytes"));
    keyspace_dir(dir, id).join(format!("v{version}"))
}

#[tokio::test]
async fn rot_in_a_version_file_is_refused_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 5, 200).await;
    let path = version_file(dir.path(), 3);
    let len = std::fs::metadata(&path).expect("version file").len() as usize;
    flip(&path, len / 2);
    expect_refused(dir.path(), FileKind::Version, &path).await;
}

/// Writes enough payload bytes that the `payloads` memtable (8 MiB) is
/// flushed into a table file, and returns that file.
async fn store_with_a_table(dir: &Path) -> PathBuf {
    fill(dir, 20, 600_000).await;
    let tables = keyspace_dir(dir, 4).join("tables");
    // Generous: under a whole suite's writeback the flush worker's fsyncs
    // can take seconds (a positive wait; it cannot pass without a table).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir(&tables)
            .ok()
            .and_then(|mut entries| entries.next())
            .and_then(|e| e.ok().map(|e| e.path()));
        if let Some(table) = found {
            return table;
        }
        assert!(Instant::now() < deadline, "no table was flushed");
        // Polls: fjall's background flush has no event this test can await.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn rot_in_a_table_trailer_is_refused_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = store_with_a_table(dir.path()).await;
    let len = std::fs::metadata(&table).expect("table").len() as usize;
    // The end of a table: its table of contents and trailer, read at open.
    flip(&table, len - 20);
    expect_refused(dir.path(), FileKind::Table, &table).await;
}

#[tokio::test]
async fn rot_in_a_table_data_block_fails_reads_of_it_without_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = store_with_a_table(dir.path()).await;
    flip(&table, 4096);
    // fjall reads data blocks only when asked: open succeeds and a read
    // of the damaged block fails (Unavailable), reads of others succeed.
    let broker = open(dir.path()).await.expect("open reads no data block");
    let queue = QueueName::new(QUEUE).expect("queue name");
    let mut failed = 0;
    for i in 0..20 {
        let id = MessageId::new(format!("m-{i}")).expect("id");
        if let Err(e) = broker.get(&queue, &id).await {
            assert!(e.to_string().contains("Checksum"), "{e}");
            failed += 1;
        }
    }
    assert!((1..20).contains(&failed), "{failed} reads failed");
    broker.shutdown().await.expect("shutdown");
    drop(broker);
    // `check` finds it by the table's checksum.
    let scratch = tempfile::tempdir().expect("tempdir");
    let report =
        delayd_local::check::check(dir.path(), &scratch.path().join("copy")).expect("check runs");
    assert!(report.damaged());
    let table_finding = report
        .findings
        .iter()
        .find(|f| f.kind == FileKind::Table)
        .expect("the table is named");
    assert_eq!(dir.path().join(&table_finding.path), table);
    assert_eq!(table_finding.severity, Severity::Damage);
    assert!(
        table_finding.affects.contains("payloads"),
        "{table_finding:?}"
    );
}
