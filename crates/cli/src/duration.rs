//! Values as people type them: durations (`250ms`, `30s`, `48h`, `3650d`),
//! sizes (`65536`, `64KiB`, `1MiB`) and points in time (`--at`: RFC 3339 or
//! epoch milliseconds). The one parser of each for every subcommand's flags
//! and for `delayd serve`'s flags, environment and config file alike, so a
//! value means the same wherever it is given.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses `250ms`, `30s`, `1m30s`, `48h`, `3650d`; a bare number is
/// rejected because its unit would be a guess.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "a duration needs a unit, got {text:?}; use e.g. 250ms, 30s, 48h, 3650d"
        ));
    }
    humantime::parse_duration(trimmed).map_err(|err| {
        format!("invalid duration {text:?} ({err}); use e.g. 250ms, 30s, 48h, 3650d")
    })
}

/// A size in bytes: `65536`, `64KiB`, `1MiB`, `1MB`, `2GiB`, `1 kb`. Units
/// are case-insensitive; `KB`/`MB`/`GB` are powers of 1000, `KiB`/`MiB`/`GiB`
/// powers of 1024.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| "not a size: expected a whole number of bytes or e.g. 1MiB".to_owned())?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| "size too large".to_owned())
}

/// A rate as `--rate` takes it: `limit` per `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub limit: u64,
    pub period_ms: u64,
}

/// `LIMIT/PERIOD`: `50/1s`, `600/1m`, `5/250ms`; a period without a number
/// means one of its unit (`50/s`). The period goes through
/// [`parse_duration`] and must be whole milliseconds, at least one. The
/// ranges (`limit` 1..=1000000, `period_ms` up to a day) are the server's
/// to check, so its message names the field.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (limit, period) = text
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("invalid rate {text:?}: expected LIMIT/PERIOD, e.g. 50/1s"))?;
    let limit: u64 = limit.trim().parse().map_err(|_| {
        format!("invalid rate {text:?}: the limit must be a whole number, e.g. 50/1s")
    })?;
    let period = period.trim();
    let period = if period.starts_with(|c: char| c.is_ascii_alphabetic()) {
        parse_duration(&format!("1{period}"))
    } else {
        parse_duration(period)
    }
    .map_err(|err| format!("invalid rate {text:?}: {err}"))?;
    if period.is_zero() || period.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!(
            "invalid rate {text:?}: the period must be whole milliseconds, at least 1ms"
        ));
    }
    Ok(Rate {
        limit,
        period_ms: millis(period),
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
        assert!(parse_duration("30").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1MB"), Ok(1_000_000));
        assert_eq!(parse_size("2 gib"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
        assert!(parse_size("12 parsecs").unwrap_err().contains("unit"));
    }

    #[test]
    fn rates() {
        let rate = |limit, period_ms| Ok(Rate { limit, period_ms });
        assert_eq!(parse_rate("50/1s"), rate(50, 1000));
        assert_eq!(parse_rate("50/s"), rate(50, 1000));
        assert_eq!(parse_rate("600/1m"), rate(600, 60_000));
        assert_eq!(parse_rate(" 5 / 250ms "), rate(5, 250));
        assert_eq!(parse_rate("1/1d"), rate(1, 86_400_000));
        assert!(parse_rate("50").unwrap_err().contains("LIMIT/PERIOD"));
        assert!(parse_rate("50/1").unwrap_err().contains("needs a unit"));
        assert!(parse_rate("x/1s").unwrap_err().contains("whole number"));
        assert!(parse_rate("5/0s").unwrap_err().contains("at least 1ms"));
        assert!(parse_rate("5/1500us")
            .unwrap_err()
            .contains("whole milliseconds"));
    }

    #[test]
    fn times() {
        assert_eq!(parse_at("1700000000123"), Ok(1_700_000_000_123));
        assert_eq!(parse_at("1970-01-01T00:00:01Z"), Ok(1_000));
        assert_eq!(parse_at("1970-01-01T00:00:02"), Ok(2_000));
        assert!(parse_at("tomorrow").is_err());
    }
}
