use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use super::*;

const LEN: u64 = 6 * STEP + 12_345;

/// A sparse file of `len` bytes (as fjall creates a journal), with a
/// front-to-back writer handle and the pre-zeroer's own handle.
fn sparse(len: u64) -> (tempfile::TempDir, File, Prezero) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.jnl");
    let writer = File::create_new(&path).unwrap();
    writer.set_len(len).unwrap();
    let mine = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    (dir, writer, Prezero::new(mine).unwrap())
}

fn contents(file: &File) -> Vec<u8> {
    let len = file.metadata().unwrap().len() as usize;
    let mut out = vec![0xAA; len];
    file.read_exact_at(&mut out, 0).unwrap();
    out
}

/// Whether every block of `from..to` is allocated (not a hole). Looks
/// through a handle of its own: `lseek` would move the writer's offset.
fn allocated(file: &File, from: u64, to: u64) -> bool {
    let probe = File::open(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
    hole_at(&probe, from).unwrap() >= to
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A writer appending chunks front to back while the pre-zeroer steps
    /// whenever due: the file always reads as exactly the writer's bytes
    /// followed by zeros, its length never changes, and almost every
    /// chunk lands on blocks that were zeroed ahead of it.
    #[test]
    fn never_changes_a_byte_and_runs_ahead(
        chunks in proptest::collection::vec((1usize..8_000, any::<u8>()), 1..2_000),
    ) {
        let (_dir, mut writer, mut prezero) = sparse(LEN);
        let mut model = Vec::new();
        let (mut landed_on_zeros, mut total) = (0, 0);
        for (size, byte) in chunks {
            let pos = model.len() as u64;
            if pos + size as u64 > LEN {
                break;
            }
            if prezero.after_group() && prezero.step().unwrap() {
                prezero.sync().unwrap();
            }
            total += 1;
            if allocated(&writer, pos, pos + size as u64) {
                landed_on_zeros += 1;
            }
            let bytes = vec![byte.max(1); size];
            writer.write_all(&bytes).unwrap();
            model.extend_from_slice(&bytes);
        }
        let mut expected = model.clone();
        expected.resize(LEN as usize, 0);
        prop_assert_eq!(writer.metadata().unwrap().len(), LEN);
        prop_assert!(contents(&writer) == expected, "the file differs from the writer's bytes");
        // Only the first chunk (written before any step) and the chunks
        // touching a tripwire block may meet a hole.
        let tripwires = model.len() as u64 / (STEP / 2) + 2;
        prop_assert!(
            total - landed_on_zeros <= tripwires * 2,
            "{landed_on_zeros} of {total} chunks landed on zeros"
        );
    }
}

#[test]
fn zeroes_ahead_of_the_data_and_not_beyond_the_length() {
    let (_dir, mut writer, mut prezero) = sparse(LEN);
    writer.write_all(&[7u8; 10_000]).unwrap();
    assert!(prezero.after_group());
    assert!(prezero.step().unwrap());
    // Zeroed from the block after the data, a step's worth, with the
    // tripwire left a hole in its middle.
    assert!(allocated(&writer, 0, 12_288));
    let tripwire = prezero.tripwire.unwrap();
    assert!(allocated(&writer, 12_288, tripwire));
    assert!(!allocated(&writer, tripwire, tripwire + TRIPWIRE));
    assert!(allocated(&writer, tripwire + TRIPWIRE, 12_288 + STEP));
    assert!(
        !prezero.after_group(),
        "the writer has not reached the tripwire"
    );
    assert!(
        !prezero.step().unwrap(),
        "a step before the tripwire zeroes nothing"
    );
    // Run to the end: the last step stops at the length.
    let mut steps = 0;
    while !prezero.done {
        writer
            .seek(std::io::SeekFrom::Start(prezero.tripwire.unwrap_or(0)))
            .unwrap();
        writer.write_all(&[9u8; 4096]).unwrap();
        for _ in 0..MIN_GROUPS_PER_STEP {
            assert!(prezero.after_group());
        }
        prezero.step().unwrap();
        steps += 1;
        assert!(steps < 20);
    }
    assert!(steps > 5, "ran to the end, not stopped early: {steps}");
    assert!(
        allocated(&writer, LEN - 4096, LEN),
        "zeroed up to the length"
    );
    assert_eq!(writer.metadata().unwrap().len(), LEN);
}

#[test]
fn leaves_an_appended_journal_alone() {
    // A journal fjall reopened after a restart: cut to its data and
    // written with O_APPEND, so it has no hole below its length.
    let (_dir, mut writer, _) = sparse(0);
    writer.write_all(&[5u8; 50_000]).unwrap();
    let mine = OpenOptions::new()
        .read(true)
        .write(true)
        .open(_dir.path().join("1.jnl"))
        .unwrap();
    let mut prezero = Prezero::new(mine).unwrap();
    assert!(!prezero.step().unwrap());
    assert!(prezero.done);
    assert_eq!(writer.metadata().unwrap().len(), 50_000);
    assert_eq!(contents(&writer), vec![5u8; 50_000]);
}

#[test]
fn stays_out_of_the_way_of_data_past_a_hole() {
    let (_dir, writer, mut prezero) = sparse(LEN);
    writer.write_all_at(&[3u8; 100], 0).unwrap();
    writer.write_all_at(&[4u8; 100], 3 * STEP).unwrap();
    let before = contents(&writer);
    assert!(!prezero.step().unwrap());
    assert!(prezero.done);
    assert!(!prezero.after_group());
    assert!(!allocated(&writer, 8192, 3 * STEP));
    assert_eq!(contents(&writer), before);
}

#[test]
fn large_groups_stop_it() {
    // 100 KB per group: five groups per half step, fewer than the
    // minimum, so the second step does not zero and the file is done.
    let (_dir, mut writer, mut prezero) = sparse(LEN);
    let mut steps = 0;
    for _ in 0..40 {
        if prezero.after_group() && prezero.step().unwrap() {
            steps += 1;
        }
        writer.write_all(&[6u8; 100_000]).unwrap();
    }
    assert_eq!(steps, 1, "only the first step zeroes");
    assert!(prezero.done);
    assert!(!prezero.after_group());
}
