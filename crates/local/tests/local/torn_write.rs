//! Torn-write test: damage the tail of the newest journal file; reopening
//! keeps every fully written batch, reports the damage, and starts.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use delayd_core::{Broker, BrokerError, EnqueueOptions, EnqueueRequest, MessageId, QueueName};
use delayd_local::{LocalBroker, LocalConfig};

fn newest_journal(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jnl"))
        .max_by_key(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .expect("a journal file")
}

/// Where the journal's written bytes end (fjall preallocates with zeros).
fn file_len(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let zeros = [0u8; 4096];
    let zero_tail = bytes.len()
        - bytes
            .rchunks(4096)
            .take_while(|c| *c == &zeros[..c.len()])
            .map(<[u8]>::len)
            .sum::<usize>();
    bytes[..zero_tail]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| p as u64 + 1)
}

/// Stands in for a crash: with `Always` durability every batch is already
/// in the journal and fsynced, so shutting down writes nothing more to it;
/// it only releases the store's lock file so the test can reopen.
async fn crash(broker: LocalBroker) {
    broker.shutdown().await.unwrap();
    drop(broker);
}

async fn enqueue(broker: &LocalBroker, queue: &QueueName, id: &str) {
    let request = EnqueueRequest {
        id: Some(MessageId::new(id).unwrap()),
        payload: vec![b'x'; 200],
        ..EnqueueRequest::default()
    };
    let results = broker
        .enqueue(queue, vec![request], EnqueueOptions::default())
        .await
        .unwrap();
    assert!(results[0].as_ref().unwrap().created);
}

async fn present(broker: &LocalBroker, queue: &QueueName, id: &str) -> bool {
    match broker.get(queue, &MessageId::new(id).unwrap()).await {
        Ok(_) => true,
        Err(BrokerError::MessageNotFound { .. }) => false,
        Err(e) => panic!("get {id}: {e}"),
    }
}

#[tokio::test]
async fn torn_last_batch_is_cut_and_earlier_batches_kept() {
    let dir = tempfile::tempdir().unwrap();
    let queue = QueueName::new("torn").unwrap();
    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    for i in 0..20 {
        enqueue(&broker, &queue, &format!("kept-{i}")).await;
    }
    let journal = newest_journal(dir.path());
    let before_last = file_len(&journal);

    enqueue(&broker, &queue, "torn").await;
    let after_last = file_len(&journal);
    assert!(
        after_last > before_last,
        "the last enqueue must have reached the journal"
    );
    crash(broker).await;
    // The last batch was only half written: its second half is zeros.
    let torn_at = before_last + (after_last - before_last) / 2;
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[torn_at as usize..after_last as usize].fill(0);
    std::fs::write(&journal, bytes).unwrap();

    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    let report = broker.recovery_report().clone();
    assert!(
        report.torn_tail_detected(),
        "damage must be reported: {report:?}"
    );
    for i in 0..20 {
        assert!(
            present(&broker, &queue, &format!("kept-{i}")).await,
            "kept-{i} lost"
        );
    }
    assert!(
        !present(&broker, &queue, "torn").await,
        "a half-written batch must not appear"
    );
    // The store takes writes again.
    enqueue(&broker, &queue, "after").await;
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn garbage_after_the_last_batch_is_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let queue = QueueName::new("garbage").unwrap();
    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    for i in 0..10 {
        enqueue(&broker, &queue, &format!("m-{i}")).await;
    }
    let journal = newest_journal(dir.path());
    let end = file_len(&journal);
    crash(broker).await;
    let mut file = OpenOptions::new().write(true).open(&journal).unwrap();
    file.seek(SeekFrom::Start(end)).unwrap();
    file.write_all(&[0xA5; 37]).unwrap();
    drop(file);

    let broker = LocalBroker::open(LocalConfig::new(dir.path()))
        .await
        .unwrap();
    assert!(
        broker.recovery_report().torn_tail_detected(),
        "{:?}",
        broker.recovery_report()
    );
    for i in 0..10 {
        assert!(
            present(&broker, &queue, &format!("m-{i}")).await,
            "m-{i} lost"
        );
    }
    assert_eq!(broker.get_queue(&queue).await.unwrap().stats.ready, 10);
    broker.shutdown().await.unwrap();
}
