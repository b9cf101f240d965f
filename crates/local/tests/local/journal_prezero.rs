//! Zeros written ahead of the journal's writer (`prezero`, docs/storage.md
//! "The journal as written"): with fsyncing durability the newest
//! journal's blocks are allocated past its data, so a group's
//! `fdatasync` writes no allocations; the zeros change no byte the engine
//! recovers, `delayd check` reads, or a restart brings back.

use std::path::{Path, PathBuf};

use delayd_core::{Broker, EnqueueOptions, EnqueueRequest, MessageId, QueueName, Schedule};
use delayd_local::{check, Durability, LocalBroker, LocalConfig};
use rustix::fs::{seek, SeekFrom};

const MESSAGES: usize = 400;
const PAYLOAD: usize = 3_000;
const PER_CALL: usize = 4;

fn queue() -> QueueName {
    QueueName::new("prezero").expect("queue name")
}

/// Incompressible, non-zero bytes, different per message.
fn payload(i: usize) -> Vec<u8> {
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
    (0..PAYLOAD).map(|_| rng.random_range(1..=255u8)).collect()
}

fn newest_journal(dir: &Path) -> PathBuf {
    check::journals(dir)
        .expect("list journals")
        .pop()
        .expect("a journal")
}

/// (bytes up to the last non-zero byte, bytes written as zeros past the
/// block holding it). Counted with `SEEK_DATA`/`SEEK_HOLE`, which see
/// written blocks, not the file system's speculative reservations; only
/// blocks that read as all zeros count, so journal data the engine appends
/// between the two reads (the broker is still open) is not taken for
/// zeros.
fn journal_extent(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::FileExt as _;
    const BLOCK: u64 = 4096;
    let path = newest_journal(dir);
    let bytes = std::fs::read(&path).expect("read journal");
    let data = bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1) as u64;
    let file = std::fs::File::open(&path).expect("open journal");
    let mut at = data.div_ceil(BLOCK) * BLOCK;
    let mut zeroed = 0;
    let mut block = vec![0u8; BLOCK as usize];
    while let Ok(start) = seek(&file, SeekFrom::Data(at)) {
        let end = seek(&file, SeekFrom::Hole(start)).expect("seek hole");
        let mut offset = start;
        while offset < end {
            let len = (end - offset).min(BLOCK) as usize;
            file.read_exact_at(&mut block[..len], offset)
                .expect("read journal block");
            if block[..len].iter().all(|&b| b == 0) {
                zeroed += len as u64;
            }
            offset += len as u64;
        }
        at = end;
    }
    (data, zeroed)
}

/// Writes the messages in sequential calls, each waiting for its group;
/// returns the journal's extent before shutdown.
async fn fill(dir: &Path, durability: Durability) -> (u64, u64) {
    let mut config = LocalConfig::new(dir);
    config.durability = durability;
    let broker = LocalBroker::open(config).await.expect("open");
    for call in 0..MESSAGES / PER_CALL {
        let requests = (call * PER_CALL..(call + 1) * PER_CALL)
            .map(|i| EnqueueRequest {
                id: Some(MessageId::new(format!("m{i}")).expect("id")),
                payload: payload(i),
                schedule: Schedule::Delay(3_600_000),
                ..EnqueueRequest::default()
            })
            .collect();
        broker
            .enqueue(&queue(), requests, EnqueueOptions::default())
            .await
            .expect("enqueue");
    }
    let extent = journal_extent(dir);
    broker.shutdown().await.expect("shutdown");
    extent
}

async fn assert_all_back(dir: &Path) {
    let report = check::check(dir, &dir.join("..").join("scratch")).expect("check");
    assert!(!report.damaged(), "{:#?}", report.findings);
    let broker = LocalBroker::open(LocalConfig::new(dir))
        .await
        .expect("reopen");
    for i in 0..MESSAGES {
        let id = MessageId::new(format!("m{i}")).expect("id");
        let message = broker.get(&queue(), &id).await.expect("message back");
        assert_eq!(message.payload, payload(i), "m{i} changed");
    }
    broker.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn always_zeroes_ahead_of_the_writer_and_changes_no_byte() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("data");
    let (data, zeroed) = fill(&dir, Durability::Always).await;
    assert!(data > 1_000_000, "the journal holds the payloads: {data}");
    // The writer is at most at the tripwire, half a 1 MiB step into the
    // zeroed run: the other half lies ahead of it.
    assert!(zeroed >= 500 * 1024, "{zeroed} bytes zeroed past {data}");
    assert_all_back(&dir).await;
}

#[tokio::test]
async fn never_leaves_the_journal_sparse() {
    // No fsyncs, nothing to save: the preallocation stays holes.
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("data");
    let (data, zeroed) = fill(&dir, Durability::Never).await;
    assert_eq!(zeroed, 0, "zeros past {data}");
    assert_all_back(&dir).await;
}
