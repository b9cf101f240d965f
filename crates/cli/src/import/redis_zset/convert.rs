//! The ZSET import's pure rules: a score as `deliver_at`, a member's
//! delayd id, how many messages go in one request.

use clap::ValueEnum;
use delayd_client::Payload;
use sha2::{Digest as _, Sha256};

/// Messages per batch request: the server's batch limit (api.md).
pub(super) const BATCH: usize = 1000;
/// Upper bound of one batch request's JSON body, well below the server's
/// default body limit (64 MiB), so large payloads split a batch instead of
/// failing it whole.
pub(super) const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The unit of the ZSET's scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScoreUnit {
    /// Seconds since the epoch.
    S,
    /// Milliseconds since the epoch.
    Ms,
}

/// A score as `deliver_at` (epoch ms, rounded to the nearest ms). A time
/// before the epoch is 0: due long ago, delivered now like any past time.
pub(super) fn deliver_at(score_text: &str, unit: ScoreUnit) -> Result<u64, String> {
    let score: f64 = score_text
        .trim()
        .parse()
        .map_err(|_| format!("score {score_text:?} is not a number"))?;
    let ms = match unit {
        ScoreUnit::S => score * 1000.0,
        ScoreUnit::Ms => score,
    }
    .round();
    if ms.is_nan() {
        return Err(format!("score {score_text:?} is not a time"));
    }
    if ms <= 0.0 {
        return Ok(0);
    }
    // 9.2e18 ms is 292 million years: no delay queue means it.
    if ms >= 9.2e18 {
        return Err(format!("score {score_text:?} is beyond any deliver_at"));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a whole number in 0..9.2e18, checked above"
    )]
    Ok(ms as u64)
}

/// The delayd id of a member: with `--hash`, the member itself when it is
/// a valid delayd id (`[A-Za-z0-9._:-]{1,256}`); otherwise `zset-` and the
/// hex of [`member_digest`], the same on every run.
pub(super) fn message_id(key: &str, member: &[u8], member_is_id: bool) -> String {
    if member_is_id {
        if let Ok(id) = std::str::from_utf8(member) {
            if delayd_core::is_valid_message_id(id) {
                return id.to_owned();
            }
        }
    }
    format!("zset-{}", hex::encode(member_digest(key, member)))
}

/// The first 16 bytes of SHA-256 over the ZSET's key (its length first, so
/// key and member cannot trade bytes) and the member: equal payloads in
/// two ZSETs imported into one queue stay two messages.
pub(super) fn member_digest(key: &str, member: &[u8]) -> [u8; 16] {
    let digest = Sha256::new()
        .chain_update((key.len() as u64).to_be_bytes())
        .chain_update(key.as_bytes())
        .chain_update(member)
        .finalize();
    let mut prefix = [0; 16];
    prefix.copy_from_slice(&digest[..16]);
    prefix
}

/// How many of the next messages (their payloads in order; at least one
/// when there is one) go in one request: at most [`BATCH`], and no more
/// than [`MAX_BATCH_BYTES`] of estimated JSON.
pub(super) fn request_size<'a>(payloads: impl Iterator<Item = &'a Payload>) -> usize {
    let mut bytes = 0;
    let mut count = 0;
    for payload in payloads.take(BATCH) {
        // 128: the id, deliver_at and punctuation of one item, rounded up.
        bytes += json_size(payload) + 128;
        if bytes > MAX_BATCH_BYTES && count > 0 {
            break;
        }
        count += 1;
    }
    count
}

/// An upper bound of a payload's size in JSON: base64, or text where an
/// escaped byte takes at most 6 (`\u0000`).
fn json_size(payload: &Payload) -> usize {
    match payload {
        Payload::Text(text) => text
            .bytes()
            .map(|b| {
                if b < 0x20 || b == b'"' || b == b'\\' {
                    6
                } else {
                    1
                }
            })
            .sum(),
        Payload::Binary(bytes) => bytes.len().div_ceil(3) * 4,
    }
}

/// A member for a report line: at most 80 characters.
pub(super) fn shorten(chars: impl Iterator<Item = char>) -> String {
    const WIDTH: usize = 80;
    let mut chars = chars.peekable();
    let mut out: String = chars.by_ref().take(WIDTH).collect();
    if chars.peek().is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_keep_milliseconds() {
        let s = |text| deliver_at(text, ScoreUnit::S);
        assert_eq!(s("1700000000.123"), Ok(1_700_000_000_123));
        assert_eq!(s("1700000000.0005"), Ok(1_700_000_000_001));
        assert_eq!(s("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(s("1.7000000001239999e9"), Ok(1_700_000_000_124));
        let ms = |text| deliver_at(text, ScoreUnit::Ms);
        assert_eq!(ms("1700000000123"), Ok(1_700_000_000_123));
        assert_eq!(ms("12.6"), Ok(13));
    }

    #[test]
    fn before_the_epoch_is_due_now_and_nonsense_is_refused() {
        assert_eq!(deliver_at("-5", ScoreUnit::S), Ok(0));
        assert_eq!(deliver_at("-inf", ScoreUnit::Ms), Ok(0));
        assert!(deliver_at("inf", ScoreUnit::S).is_err());
        assert!(deliver_at("1e300", ScoreUnit::Ms).is_err());
        assert!(deliver_at("soon", ScoreUnit::Ms).is_err());
    }

    #[test]
    fn ids_are_stable_and_valid() {
        let digest_id = message_id("delayed", b"hello world", false);
        assert_eq!(digest_id, message_id("delayed", b"hello world", false));
        assert!(digest_id.starts_with("zset-") && digest_id.len() == 37);
        assert!(delayd_core::is_valid_message_id(&digest_id));
        // Another ZSET, another message; the key's length keeps bytes apart.
        assert_ne!(digest_id, message_id("other", b"hello world", false));
        assert_ne!(message_id("ab", b"c", false), message_id("a", b"bc", false));
        // A member that is an id stays itself; one that is not is digested.
        assert_eq!(message_id("k", b"job:42", true), "job:42");
        assert!(message_id("k", b"job 42", true).starts_with("zset-"));
        assert!(message_id("k", &[0xff], true).starts_with("zset-"));
        // Without --hash a member is a payload, even when it looks like an id.
        assert!(message_id("k", b"job:42", false).starts_with("zset-"));
    }

    #[test]
    fn batches_split_by_count_and_bytes() {
        let text = |len: usize| Payload::Text("x".repeat(len));
        let small: Vec<Payload> = (0..2500).map(|_| text(10)).collect();
        assert_eq!(request_size(small.iter()), BATCH);
        assert_eq!(request_size(small[..7].iter()), 7);
        let large: Vec<Payload> = (0..5).map(|_| text(3 * 1024 * 1024)).collect();
        assert_eq!(request_size(large.iter()), 2);
        let huge = [text(MAX_BATCH_BYTES * 2), text(1)];
        assert_eq!(request_size(huge.iter()), 1);
        assert_eq!(request_size(std::iter::empty()), 0);
    }

    #[test]
    fn escaped_bytes_count_at_their_widest() {
        assert_eq!(json_size(&Payload::Text("a\"\n".into())), 13);
        assert_eq!(json_size(&Payload::Binary(vec![0xff; 4])), 8);
    }

    #[test]
    fn members_are_described_briefly() {
        assert_eq!(shorten("a\"b".escape_debug()), "a\\\"b");
        let long = shorten("x".repeat(200).chars());
        assert_eq!((long.len(), long.ends_with("...")), (83, true));
        assert_eq!(shorten("x".repeat(80).chars()).len(), 80);
    }
}
