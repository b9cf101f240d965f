//! Reads fjall 3.1's journal files batch by batch and verifies each batch's
//! checksum, without fjall: fjall's own reader *truncates* a journal at the
//! first entry it cannot decode (a flipped tag byte, a mangled length), so
//! committed batches after a flipped byte would be dropped silently. This
//! reader says where the damage is and whether whole batches follow it.
//!
//! Format (fjall `journal/entry.rs`; little-endian):
//! ```text
//! batch  = Start Item{n} End
//! Start  = 0x01 item_count:u32 seqno:u64
//! Item   = 0x02 value_type:u8 compression:u8 keyspace:u64 key_len:u16
//!          value_len:u32 disk_len:u32 key value[disk_len]
//!        | 0x04 keyspace:u64                       (clear a keyspace)
//! End    = 0x03 xxh3_64(bytes of every Item):u64 "FJL" 0x03
//! ```
//! Files are preallocated with zeros; written bytes end at the last non-zero
//! byte (an End always ends with 0x03).

use xxhash_rust::xxh3::Xxh3;

const START: u8 = 1;
const ITEM: u8 = 2;
const END: u8 = 3;
const CLEAR: u8 = 4;
const MAGIC: &[u8] = b"FJL\x03";

/// One item of a batch: keyspace id and key, as read (a damaged batch's
/// keys may themselves be damaged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub keyspace: u64,
    pub key: Vec<u8>,
}

/// A region that is not a valid batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadBatch {
    pub offset: u64,
    /// Where the next valid batch starts, or the end of the written bytes.
    pub until: u64,
    pub seqno: Option<u64>,
    pub problem: String,
    /// What could be read of the batch before the problem.
    pub items: Vec<Item>,
    /// Written bytes follow the damage in this file (whole, valid batches,
    /// or the damaged batch's frame is whole and more follows it): it is
    /// not the file's last write, so not a torn tail but damage inside
    /// committed data.
    pub not_last: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct JournalScan {
    pub batches: u64,
    pub written_end: u64,
    pub bad: Vec<BadBatch>,
}

struct Batch {
    end: usize,
    /// The frame (tags, lengths, end marker) is whole; whether the items
    /// match the checksum.
    checksum_ok: bool,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("entry runs past the end at offset {}", self.pos))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn le(&mut self, n: usize) -> Result<u64, String> {
        let bytes = self.take(n)?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }
}

/// Parses the batch starting at `at`; on failure, the problem and what
/// was read of it.
/// Items are collected only when `items` is given (a damaged batch's
/// report); a whole batch copies nothing.
fn parse_batch(
    bytes: &[u8],
    at: usize,
    mut items: Option<&mut Vec<Item>>,
    seqno: &mut Option<u64>,
) -> Result<Batch, String> {
    let mut c = Cursor { bytes, pos: at };
    let tag = c.u8()?;
    if tag != START {
        return Err(format!("expected a batch start, found tag {tag:#04x}"));
    }
    let count = c.le(4)?;
    *seqno = Some(c.le(8)?);
    let mut hasher = Xxh3::new();
    for _ in 0..count {
        let entry_start = c.pos;
        match c.u8()? {
            ITEM => {
                let _value_type = c.u8()?;
                let _compression = c.u8()?;
                let keyspace = c.le(8)?;
                let key_len = c.le(2)? as usize;
                let _value_len = c.le(4)?;
                let disk_len = c.le(4)? as usize;
                let key = c.take(key_len)?;
                c.take(disk_len)?;
                if let Some(items) = items.as_deref_mut() {
                    items.push(Item {
                        keyspace,
                        key: key.to_vec(),
                    });
                }
            }
            CLEAR => {
                c.le(8)?;
            }
            tag => return Err(format!("expected an item, found tag {tag:#04x}")),
        }
        hasher.update(&bytes[entry_start..c.pos]);
    }
    let tag = c.u8()?;
    if tag != END {
        return Err(format!("expected the batch end, found tag {tag:#04x}"));
    }
    let expected = c.le(8)?;
    if c.take(MAGIC.len())? != MAGIC {
        return Err("batch end marker is damaged".into());
    }
    Ok(Batch {
        end: c.pos,
        checksum_ok: hasher.digest() == expected,
    })
}

/// Where the next whole, valid batch after `from` starts, if any.
fn next_valid(bytes: &[u8], from: usize, end: usize) -> Option<usize> {
    (from..end).find(|&q| {
        bytes[q] == START && parse_batch(bytes, q, None, &mut None).is_ok_and(|b| b.checksum_ok)
    })
}

/// Just past the last non-zero byte. Journals are 64 MiB of preallocated
/// zeros; comparing whole pages (a memcmp) skips them fast.
fn written_end(bytes: &[u8]) -> usize {
    const PAGE: usize = 4096;
    let zeros = [0u8; PAGE];
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(PAGE);
        if bytes[start..end] != zeros[..end - start] {
            break;
        }
        end = start;
    }
    bytes[..end]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| p + 1)
}

/// Scans a whole journal file's bytes.
pub(crate) fn scan(bytes: &[u8]) -> JournalScan {
    let end = written_end(bytes);
    let mut out = JournalScan {
        written_end: end as u64,
        ..JournalScan::default()
    };
    let mut pos = 0;
    while pos < end {
        match parse_batch(bytes, pos, None, &mut None) {
            Ok(batch) if batch.checksum_ok => {
                out.batches += 1;
                pos = batch.end;
            }
            Ok(batch) => {
                // The frame is whole: the damage ends with it, and bytes
                // written after it mean it was not the last write.
                let (mut items, mut seqno) = (Vec::new(), None);
                let _ = parse_batch(bytes, pos, Some(&mut items), &mut seqno);
                out.bad.push(BadBatch {
                    offset: pos as u64,
                    until: batch.end as u64,
                    seqno,
                    problem: "checksum mismatch".into(),
                    items,
                    not_last: batch.end < end,
                });
                pos = batch.end;
            }
            Err(problem) => {
                // Again, collecting what is readable of it for the report.
                let (mut items, mut seqno) = (Vec::new(), None);
                let _ = parse_batch(bytes, pos, Some(&mut items), &mut seqno);
                let next = next_valid(bytes, pos + 1, end);
                out.bad.push(BadBatch {
                    offset: pos as u64,
                    until: next.unwrap_or(end) as u64,
                    seqno,
                    problem,
                    items,
                    not_last: next.is_some(),
                });
                match next {
                    Some(next) => pos = next,
                    None => break,
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seqno: u64, keys: &[&[u8]]) -> Vec<u8> {
        let mut items = Vec::new();
        for key in keys {
            items.push(ITEM);
            items.extend([0, 0]);
            items.extend(3u64.to_le_bytes());
            items.extend((key.len() as u16).to_le_bytes());
            items.extend(2u32.to_le_bytes());
            items.extend(2u32.to_le_bytes());
            items.extend_from_slice(key);
            items.extend(b"vv");
        }
        let mut out = vec![START];
        out.extend((keys.len() as u32).to_le_bytes());
        out.extend(seqno.to_le_bytes());
        out.extend(&items);
        out.push(END);
        out.extend(xxhash_rust::xxh3::xxh3_64(&items).to_le_bytes());
        out.extend(MAGIC);
        out
    }

    fn journal() -> (Vec<u8>, usize) {
        let mut bytes = batch(1, &[b"a", b"b"]);
        let second = bytes.len();
        bytes.extend(batch(2, &[b"c"]));
        bytes.extend(batch(3, &[b"d"]));
        bytes.extend([0; 64]);
        (bytes, second)
    }

    #[test]
    fn a_clean_journal_has_no_bad_batch() {
        let scan = scan(&journal().0);
        assert_eq!((scan.batches, scan.bad.len()), (3, 0));
    }

    #[test]
    fn a_flipped_key_byte_is_a_checksum_mismatch_with_valid_batches_after() {
        let (mut bytes, second) = journal();
        bytes[second + 13 + 21] ^= 0x40; // the key "c"
        let scan = scan(&bytes);
        assert_eq!(scan.batches, 2);
        let bad = &scan.bad[0];
        assert_eq!((bad.offset, bad.seqno), (second as u64, Some(2)));
        assert_eq!(bad.problem, "checksum mismatch");
        assert!(bad.not_last, "{bad:?}");
    }

    #[test]
    fn a_flipped_tag_is_found_and_the_scan_resynchronises() {
        let (mut bytes, second) = journal();
        bytes[second + 13] = 0x7f;
        let scan = scan(&bytes);
        assert_eq!(scan.batches, 2, "{scan:?}");
        assert!(scan.bad[0].not_last);
        assert!(scan.bad[0].problem.contains("0x7f"), "{:?}", scan.bad[0]);
    }

    /// A checksum mismatch in a whole frame followed by a torn batch is
    /// still damage: the torn one was the last write, not the damaged one.
    #[test]
    fn a_mismatch_before_a_torn_last_batch_is_not_last() {
        let (mut bytes, second) = journal();
        bytes[second + 13 + 21] ^= 0x40; // the key "c" of batch 2
        let third = second + batch(2, &[b"c"]).len();
        bytes[third] = 0x7f; // batch 3 torn
        let scan = scan(&bytes);
        assert_eq!(scan.bad.len(), 2, "{scan:?}");
        assert!(scan.bad[0].not_last, "{:?}", scan.bad[0]);
        assert!(!scan.bad[1].not_last, "{:?}", scan.bad[1]);
    }

    /// A checksum mismatch in the last batch is its torn write.
    #[test]
    fn a_mismatch_in_the_last_batch_is_last() {
        let (mut bytes, second) = journal();
        let third = second + batch(2, &[b"c"]).len();
        bytes[third + 13 + 21] ^= 0x40; // the key "d" of batch 3
        let scan = scan(&bytes);
        assert_eq!((scan.batches, scan.bad.len()), (2, 1), "{scan:?}");
        assert!(!scan.bad[0].not_last, "{:?}", scan.bad[0]);
    }

    #[test]
    fn garbage_at_the_end_is_a_tail() {
        let (mut bytes, _) = journal();
        let end = scan(&bytes).written_end as usize;
        bytes[end..end + 5].fill(0xa5);
        let scan = scan(&bytes);
        assert_eq!(scan.batches, 3);
        assert!(!scan.bad[0].not_last);
    }
}
