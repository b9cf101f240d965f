//! Message history on Redis (api.md, "Message history"; docs/redis.md,
//! "History"): the events follow the packed record in the same stored
//! value, written by the transition functions (`record` in
//! `lua/common.lua`), and the `events` function answers them as stored.
//! This decodes that tail: one msgpack integer, the number of events ever
//! recorded, then the kept events, oldest first, each a msgpack array
//! `[code, at - enqueued_at, attempt, extra...]`.

use delayd_core::{
    BrokerError, BrokerResult, DeathReason, DeferReason, Event, EventKind, History, Via,
};

/// Each event type's code in the stored array (`EV_*` in lua/common.lua).
mod code {
    pub(super) const ENQUEUED: i64 = 0;
    pub(super) const REPLACED: i64 = 1;
    pub(super) const RESCHEDULED: i64 = 2;
    pub(super) const LEASED: i64 = 3;
    pub(super) const ACKED: i64 = 4;
    pub(super) const NACKED: i64 = 5;
    pub(super) const DEFERRED: i64 = 6;
    pub(super) const EXPIRED: i64 = 7;
    pub(super) const PUSH_FAILED: i64 = 8;
    pub(super) const DEAD: i64 = 9;
    pub(super) const REDRIVEN: i64 = 10;
    pub(super) const CANCELLED: i64 = 11;
}

/// The frontend's code as the lease functions take it.
pub(crate) fn via_code(via: Via) -> &'static str {
    match via {
        Via::Http => "0",
        Via::Beanstalk => "1",
        Via::Push => "2",
    }
}

/// A deferral reason's code as `defer.lua` takes it.
pub(crate) fn defer_code(reason: DeferReason) -> &'static str {
    match reason {
        DeferReason::Nack => "0",
        DeferReason::Push429 => "1",
        DeferReason::Push503 => "2",
    }
}

fn corrupt(what: &str) -> BrokerError {
    tracing::error!(what, "unexpected stored history");
    BrokerError::unavailable(format!("unexpected stored history: {what}"))
}

/// One msgpack value of the subset `cmsgpack` writes for a history.
#[derive(Debug, PartialEq)]
enum Value<'a> {
    Int(i64),
    Str(&'a [u8]),
    Nil,
    Bool(bool),
    Array(usize),
}

/// Reads msgpack values from `buf` in order.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> BrokerResult<&'a [u8]> {
        if self.buf.len() < n {
            return Err(corrupt("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn be(&mut self, n: usize) -> BrokerResult<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn str(&mut self, len: usize) -> BrokerResult<Value<'a>> {
        self.take(len).map(Value::Str)
    }

    fn next(&mut self) -> BrokerResult<Value<'a>> {
        let tag = self.take(1)?[0];
        let signed = |v: u64, bits: u32| {
            let shift = 64 - bits;
            ((v << shift) as i64) >> shift
        };
        Ok(match tag {
            0x00..=0x7f => Value::Int(i64::from(tag)),
            0x90..=0x9f => Value::Array(usize::from(tag & 0x0f)),
            0xa0..=0xbf => return self.str(usize::from(tag & 0x1f)),
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4 | 0xd9 => {
                let len = self.be(1)? as usize;
                return self.str(len);
            }
            0xc5 | 0xda => {
                let len = self.be(2)? as usize;
                return self.str(len);
            }
            0xc6 | 0xdb => {
                let len = self.be(4)? as usize;
                return self.str(len);
            }
            // Lua numbers are doubles: cmsgpack writes an integral one as
            // an integer, anything else as a float (never for a history).
            0xca => Value::Int(f32::from_bits(self.be(4)? as u32) as i64),
            0xcb => Value::Int(f64::from_bits(self.be(8)?) as i64),
            0xcc => Value::Int(self.be(1)? as i64),
            0xcd => Value::Int(self.be(2)? as i64),
            0xce => Value::Int(self.be(4)? as i64),
            0xcf => Value::Int(i64::try_from(self.be(8)?).map_err(|_| corrupt("uint64"))?),
            0xd0 => Value::Int(signed(self.be(1)?, 8)),
            0xd1 => Value::Int(signed(self.be(2)?, 16)),
            0xd2 => Value::Int(signed(self.be(4)?, 32)),
            0xd3 => Value::Int(self.be(8)? as i64),
            0xdc => Value::Array(self.be(2)? as usize),
            0xdd => Value::Array(self.be(4)? as usize),
            0xe0..=0xff => Value::Int(i64::from(tag as i8)),
            _ => return Err(corrupt("unexpected msgpack type")),
        })
    }

    fn int(&mut self) -> BrokerResult<i64> {
        match self.next()? {
            Value::Int(i) => Ok(i),
            _ => Err(corrupt("expected an integer")),
        }
    }
}

/// An event's extra fields, decoded.
struct Extra<'a>(Vec<Value<'a>>);

impl<'a> Extra<'a> {
    fn int(&self, i: usize) -> BrokerResult<i64> {
        match self.0.get(i) {
            Some(Value::Int(v)) => Ok(*v),
            _ => Err(corrupt("expected an integer field")),
        }
    }

    /// A non-negative integer, `None` for a negative one.
    fn opt(&self, i: usize) -> BrokerResult<Option<u64>> {
        Ok(u64::try_from(self.int(i)?).ok())
    }

    fn text(&self, i: usize) -> Option<String> {
        match self.0.get(i) {
            Some(Value::Str(s)) => Some(String::from_utf8_lossy(s).into_owned()),
            _ => None,
        }
    }
}

fn add(at: u64, delta: i64) -> u64 {
    at.saturating_add_signed(delta)
}

/// The event of `code` at `at`, or `None` for a code this version does
/// not know (a newer node's event: left out).
fn kind(code: i64, at: u64, x: &Extra<'_>) -> BrokerResult<Option<EventKind>> {
    Ok(Some(match code {
        code::ENQUEUED => EventKind::Enqueued,
        code::REPLACED => EventKind::Replaced {
            after_lease: x.int(0)? != 0,
        },
        code::RESCHEDULED => EventKind::Rescheduled,
        code::LEASED => EventKind::Leased {
            lease_until: add(at, x.int(0)?),
            via: match x.int(1)? {
                1 => Via::Beanstalk,
                2 => Via::Push,
                _ => Via::Http,
            },
        },
        code::ACKED => EventKind::Acked,
        code::NACKED => EventKind::Nacked {
            delay_ms: x.opt(0)?,
            error: x.text(1).filter(|e| !e.is_empty()),
        },
        code::DEFERRED => EventKind::Deferred {
            until: add(at, x.int(0)?),
            reason: match x.int(1)? {
                1 => DeferReason::Push429,
                2 => DeferReason::Push503,
                _ => DeferReason::Nack,
            },
        },
        code::EXPIRED => EventKind::Expired,
        code::PUSH_FAILED => EventKind::PushFailed {
            status: x.opt(0)?.and_then(|s| u16::try_from(s).ok()),
            error: x.text(1).unwrap_or_default(),
            duration_ms: x.opt(2)?.unwrap_or(0),
        },
        code::DEAD => EventKind::Dead {
            reason: match x.int(0)? {
                1 => DeathReason::MaxDeferrals,
                2 => DeathReason::Buried,
                _ => DeathReason::MaxAttempts,
            },
        },
        code::REDRIVEN => EventKind::Redriven,
        code::CANCELLED => EventKind::Cancelled,
        _ => return Ok(None),
    }))
}

/// The history stored as `tail` after the record of a message enqueued at
/// `enqueued_at` (`b""`: none, a record written before history).
pub(crate) fn decode(enqueued_at: u64, tail: &[u8]) -> BrokerResult<History> {
    let mut history = History::default();
    if tail.is_empty() {
        return Ok(history);
    }
    let mut reader = Reader { buf: tail };
    let total = u64::try_from(reader.int()?).map_err(|_| corrupt("negative count"))?;
    let mut kept = 0u64;
    while !reader.buf.is_empty() {
        let Value::Array(n) = reader.next()? else {
            return Err(corrupt("expected an event"));
        };
        if n < 3 {
            return Err(corrupt("short event"));
        }
        let code = reader.int()?;
        let at = add(enqueued_at, reader.int()?);
        let attempt = u32::try_from(reader.int()?).map_err(|_| corrupt("attempt"))?;
        let mut extra = Vec::with_capacity(n - 3);
        for _ in 3..n {
            extra.push(reader.next()?);
        }
        kept += 1;
        if let Some(kind) = kind(code, at, &Extra(extra))? {
            history.events.push(Event { at, attempt, kind });
        }
    }
    history.dropped = total.saturating_sub(kept);
    Ok(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// msgpack as cmsgpack writes it, for the cases below.
    fn int(v: i64) -> Vec<u8> {
        match v {
            0..=0x7f => vec![v as u8],
            -32..=-1 => vec![v as i8 as u8],
            0x80..=0xff => vec![0xcc, v as u8],
            0x100..=0xffff => [vec![0xcd], (v as u16).to_be_bytes().to_vec()].concat(),
            0x1_0000..=0xffff_ffff => [vec![0xce], (v as u32).to_be_bytes().to_vec()].concat(),
            -128..=-33 => vec![0xd0, v as i8 as u8],
            -32_768..=-129 => [vec![0xd1], (v as i16).to_be_bytes().to_vec()].concat(),
            _ => [vec![0xd3], v.to_be_bytes().to_vec()].concat(),
        }
    }

    fn text(s: &str) -> Vec<u8> {
        let mut out = if s.len() < 32 {
            vec![0xa0 | s.len() as u8]
        } else {
            vec![0xd9, s.len() as u8]
        };
        out.extend_from_slice(s.as_bytes());
        out
    }

    fn event(fields: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0x90 | fields.len() as u8];
        for f in fields {
            out.extend_from_slice(f);
        }
        out
    }

    #[test]
    fn decodes_every_event_type_relative_to_enqueued_at() {
        let base = 1_700_000_000_000u64;
        let events = [
            event(&[int(0), int(0), int(0)]),
            event(&[int(1), int(3), int(0), int(1)]),
            event(&[int(2), int(5), int(0)]),
            event(&[int(3), int(70_000), int(1), int(30_000), int(2)]),
            event(&[int(5), int(70_010), int(1), int(-1)]),
            event(&[int(5), int(70_011), int(1), int(250), text("boom")]),
            event(&[int(6), int(70_020), int(1), int(400), int(1)]),
            event(&[int(7), int(100_000), int(1)]),
            event(&[int(8), int(100_001), int(2), int(-1), text(""), int(12)]),
            event(&[
                int(8),
                int(100_002),
                int(2),
                int(503),
                text(&"x".repeat(40)),
                int(7),
            ]),
            event(&[int(9), int(100_003), int(2), int(2)]),
            event(&[int(10), int(100_004), int(0)]),
            event(&[int(4), int(100_005), int(1)]),
            event(&[int(11), int(-3), int(1)]),
            event(&[int(99), int(1), int(1), int(5)]),
        ];
        let mut tail = int(40);
        for e in &events {
            tail.extend_from_slice(e);
        }
        let h = decode(base, &tail).unwrap();
        assert_eq!(h.dropped, 40 - events.len() as u64);
        let got: Vec<(u64, u32, EventKind)> = h
            .events
            .into_iter()
            .map(|e| (e.at + 3 - base, e.attempt, e.kind))
            .collect();
        assert_eq!(
            got,
            [
                (3, 0, EventKind::Enqueued),
                (6, 0, EventKind::Replaced { after_lease: true }),
                (8, 0, EventKind::Rescheduled),
                (
                    70_003,
                    1,
                    EventKind::Leased {
                        lease_until: base + 100_000,
                        via: Via::Push
                    }
                ),
                (
                    70_013,
                    1,
                    EventKind::Nacked {
                        delay_ms: None,
                        error: None
                    }
                ),
                (
                    70_014,
                    1,
                    EventKind::Nacked {
                        delay_ms: Some(250),
                        error: Some("boom".into())
                    }
                ),
                (
                    70_023,
                    1,
                    EventKind::Deferred {
                        until: base + 70_420,
                        reason: DeferReason::Push429
                    }
                ),
                (100_003, 1, EventKind::Expired),
                (
                    100_004,
                    2,
                    EventKind::PushFailed {
                        status: None,
                        error: String::new(),
                        duration_ms: 12
                    }
                ),
                (
                    100_005,
                    2,
                    EventKind::PushFailed {
                        status: Some(503),
                        error: "x".repeat(40),
                        duration_ms: 7
                    }
                ),
                (
                    100_006,
                    2,
                    EventKind::Dead {
                        reason: DeathReason::Buried
                    }
                ),
                (100_007, 0, EventKind::Redriven),
                (100_008, 1, EventKind::Acked),
                (0, 1, EventKind::Cancelled),
            ]
        );
    }

    #[test]
    fn no_tail_is_an_empty_history_and_garbage_is_an_error() {
        assert_eq!(decode(5, b"").unwrap(), History::default());
        assert!(decode(5, &[0x01, 0x93, 0x00]).is_err());
        assert!(decode(5, &[0x01, 0x05]).is_err());
    }
}
