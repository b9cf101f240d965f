//! Human durations (`250ms`, `30s`, `48h`, `3650d`) and points in time
//! (`--at`: RFC 3339 or epoch milliseconds), parsed for clap.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses `250ms`, `30s`, `1m30s`, `48h`, `3650d`; a bare number is
/// rejected because its unit would be a guess.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|err| {
        format!("invalid duration {text:?} ({err}); use e.g. 250ms, 30s, 48h, 3650d")
    })
}

/// A duration as whole milliseconds (saturating: nobody waits 584 million years).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `--at`: epoch milliseconds (all digits), or an RFC 3339 time
/// (`2030-01-02T03:04:05Z`; without an offset it is read as UTC).
pub fn parse_at(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map_err(|err| format!("invalid epoch milliseconds {text:?}: {err}"));
    }
    let time = humantime::parse_rfc3339_weak(text).map_err(|err| {
        format!("invalid time {text:?} ({err}); use RFC 3339 (2030-01-02T03:04:05Z) or epoch ms")
    })?;
    let since_epoch = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("time {text:?} is before 1970"))?;
    Ok(millis(since_epoch))
}

/// Wall-clock now in epoch milliseconds, as the server reads it.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("48h"), Ok(Duration::from_secs(48 * 3600)));
        assert_eq!(
            parse_duration("3650d"),
            Ok(Duration::from_secs(3650 * 86_400))
        );
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_at("1700000000123"), Ok(1_700_000_000_123));
        assert_eq!(parse_at("1970-01-01T00:00:01Z"), Ok(1_000));
        assert_eq!(parse_at("1970-01-01T00:00:02"), Ok(2_000));
        assert!(parse_at("tomorrow").is_err());
    }
}
