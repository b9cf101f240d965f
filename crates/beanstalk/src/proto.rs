//! The beanstalkd wire format, client to server: a pure parser over a byte
//! buffer ([`parse`]) and a [`Decoder`] that adds the two pieces of state the
//! protocol needs between reads (throwing away an oversized job body, and
//! skipping the rest of an overlong line).
//!
//! Nothing here does I/O or touches a broker, so the parser can be fuzzed
//! and property-tested on its own.

mod decoder;

pub use decoder::{Decoder, Frame};

/// beanstalkd's `LINE_BUF_SIZE`: a command line, `\r\n` included, is at most
/// this long. Longer lines get `BAD_FORMAT` and are skipped to their end.
pub const MAX_LINE: usize = 224;

/// beanstalkd's default `-z` (max job size).
pub const DEFAULT_MAX_JOB_SIZE: usize = 65_535;

/// One client command, fully parsed (a `put` includes its body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Put {
        pri: u32,
        delay: u32,
        ttr: u32,
        body: Vec<u8>,
    },
    Use(String),
    Reserve,
    ReserveWithTimeout(u32),
    ReserveJob(u64),
    Delete(u64),
    Release {
        id: u64,
        pri: u32,
        delay: u32,
    },
    Bury {
        id: u64,
        pri: u32,
    },
    Touch(u64),
    Watch(String),
    Ignore(String),
    Peek(u64),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u32),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(String),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube {
        tube: String,
        delay: u32,
    },
    Quit,
}

impl Command {
    /// The command in wire form; `parse(&cmd.encode())` gives `cmd` back.
    pub fn encode(&self) -> Vec<u8> {
        let line = match self {
            Self::Put {
                pri,
                delay,
                ttr,
                body,
            } => {
                let mut out = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
                out.extend_from_slice(body);
                out.extend_from_slice(b"\r\n");
                return out;
            }
            Self::Use(t) => format!("use {t}"),
            Self::Reserve => "reserve".into(),
            Self::ReserveWithTimeout(s) => format!("reserve-with-timeout {s}"),
            Self::ReserveJob(id) => format!("reserve-job {id}"),
            Self::Delete(id) => format!("delete {id}"),
            Self::Release { id, pri, delay } => format!("release {id} {pri} {delay}"),
            Self::Bury { id, pri } => format!("bury {id} {pri}"),
            Self::Touch(id) => format!("touch {id}"),
            Self::Watch(t) => format!("watch {t}"),
            Self::Ignore(t) => format!("ignore {t}"),
            Self::Peek(id) => format!("peek {id}"),
            Self::PeekReady => "peek-ready".into(),
            Self::PeekDelayed => "peek-delayed".into(),
            Self::PeekBuried => "peek-buried".into(),
            Self::Kick(n) => format!("kick {n}"),
            Self::KickJob(id) => format!("kick-job {id}"),
            Self::StatsJob(id) => format!("stats-job {id}"),
            Self::StatsTube(t) => format!("stats-tube {t}"),
            Self::Stats => "stats".into(),
            Self::ListTubes => "list-tubes".into(),
            Self::ListTubeUsed => "list-tube-used".into(),
            Self::ListTubesWatched => "list-tubes-watched".into(),
            Self::PauseTube { tube, delay } => format!("pause-tube {tube} {delay}"),
            Self::Quit => "quit".into(),
        };
        let mut out = line.into_bytes();
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// What the server must answer to a malformed request. Each also says how
/// many bytes the request used, so the stream stays in step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// `BAD_FORMAT`: malformed line of `consumed` bytes.
    #[error("BAD_FORMAT")]
    BadFormat { consumed: usize },
    /// `BAD_FORMAT` for a line longer than [`MAX_LINE`]; nothing consumed:
    /// the rest of the line, however long, must be skipped.
    #[error("BAD_FORMAT (line too long)")]
    LineTooLong,
    /// `UNKNOWN_COMMAND`.
    #[error("UNKNOWN_COMMAND")]
    UnknownCommand { consumed: usize },
    /// `EXPECTED_CRLF`: the job body was not followed by `\r\n`; the line,
    /// the body and the two bytes after it are consumed (as beanstalkd does).
    #[error("EXPECTED_CRLF")]
    ExpectedCrlf { consumed: usize },
    /// `JOB_TOO_BIG`: the line is consumed; `discard` more bytes (the body
    /// and its `\r\n`) must be thrown away as they arrive.
    #[error("JOB_TOO_BIG")]
    JobTooBig { consumed: usize, discard: u64 },
}

impl ProtoError {
    /// The reply line, `\r\n` included.
    pub fn reply(&self) -> &'static [u8] {
        match self {
            Self::BadFormat { .. } | Self::LineTooLong => b"BAD_FORMAT\r\n",
            Self::UnknownCommand { .. } => b"UNKNOWN_COMMAND\r\n",
            Self::ExpectedCrlf { .. } => b"EXPECTED_CRLF\r\n",
            Self::JobTooBig { .. } => b"JOB_TOO_BIG\r\n",
        }
    }
}

/// Parses one request from the front of `buf`. `Ok(None)`: incomplete,
/// read more. Never panics, whatever the bytes.
pub fn parse(buf: &[u8], max_job_size: usize) -> Result<Option<(Command, usize)>, ProtoError> {
    let Some(line_len) = find_crlf(&buf[..buf.len().min(MAX_LINE)]) else {
        return if buf.len() >= MAX_LINE {
            Err(ProtoError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    let consumed = line_len + 2;
    let line = &buf[..line_len];
    let bad = ProtoError::BadFormat { consumed };
    let mut words = line.split(|&b| b == b' ');
    let name = words.next().unwrap_or_default();
    let args: Vec<&[u8]> = words.collect();
    if name == b"put" {
        return parse_put(buf, consumed, &args, max_job_size);
    }
    let command = match parse_simple(name, &args) {
        Ok(command) => command,
        Err(Unparsed::Unknown) => return Err(ProtoError::UnknownCommand { consumed }),
        Err(Unparsed::Bad) => return Err(bad),
    };
    Ok(Some((command, consumed)))
}

enum Unparsed {
    Unknown,
    Bad,
}

/// Every command but `put`: one line, fixed arity.
fn parse_simple(name: &[u8], args: &[&[u8]]) -> Result<Command, Unparsed> {
    use Command as C;
    let command = match (name, args) {
        (b"use", [t]) => C::Use(tube(t)?),
        (b"reserve", []) => C::Reserve,
        (b"reserve-with-timeout", [s]) => C::ReserveWithTimeout(int(s)?),
        (b"reserve-job", [id]) => C::ReserveJob(int(id)?),
        (b"delete", [id]) => C::Delete(int(id)?),
        (b"release", [id, pri, delay]) => C::Release {
            id: int(id)?,
            pri: int(pri)?,
            delay: int(delay)?,
        },
        (b"bury", [id, pri]) => C::Bury {
            id: int(id)?,
            pri: int(pri)?,
        },
        (b"touch", [id]) => C::Touch(int(id)?),
        (b"watch", [t]) => C::Watch(tube(t)?),
        (b"ignore", [t]) => C::Ignore(tube(t)?),
        (b"peek", [id]) => C::Peek(int(id)?),
        (b"peek-ready", []) => C::PeekReady,
        (b"peek-delayed", []) => C::PeekDelayed,
        (b"peek-buried", []) => C::PeekBuried,
        (b"kick", [n]) => C::Kick(int(n)?),
        (b"kick-job", [id]) => C::KickJob(int(id)?),
        (b"stats-job", [id]) => C::StatsJob(int(id)?),
        (b"stats-tube", [t]) => C::StatsTube(tube(t)?),
        (b"stats", []) => C::Stats,
        (b"list-tubes", []) => C::ListTubes,
        (b"list-tube-used", []) => C::ListTubeUsed,
        (b"list-tubes-watched", []) => C::ListTubesWatched,
        (b"pause-tube", [t, delay]) => C::PauseTube {
            tube: tube(t)?,
            delay: int(delay)?,
        },
        (b"quit", []) => C::Quit,
        _ if is_known(name) => return Err(Unparsed::Bad),
        _ => return Err(Unparsed::Unknown),
    };
    Ok(command)
}

fn is_known(name: &[u8]) -> bool {
    const KNOWN: &[&[u8]] = &[
        b"put",
        b"use",
        b"reserve",
        b"reserve-with-timeout",
        b"reserve-job",
        b"delete",
        b"release",
        b"bury",
        b"touch",
        b"watch",
        b"ignore",
        b"peek",
        b"peek-ready",
        b"peek-delayed",
        b"peek-buried",
        b"kick",
        b"kick-job",
        b"stats-job",
        b"stats-tube",
        b"stats",
        b"list-tubes",
        b"list-tube-used",
        b"list-tubes-watched",
        b"pause-tube",
        b"quit",
    ];
    KNOWN.contains(&name)
}

/// `put <pri> <delay> <ttr> <bytes>\r\n<data>\r\n`. The size is checked
/// before the body is awaited, so an oversized body is never buffered.
fn parse_put(
    buf: &[u8],
    consumed: usize,
    args: &[&[u8]],
    max_job_size: usize,
) -> Result<Option<(Command, usize)>, ProtoError> {
    let bad = ProtoError::BadFormat { consumed };
    let [pri, delay, ttr, bytes] = args else {
        return Err(bad);
    };
    let (Ok(pri), Ok(delay), Ok(ttr), Ok(bytes)) = (int(pri), int(delay), int(ttr), int(bytes))
    else {
        return Err(bad);
    };
    let bytes: u32 = bytes;
    if u64::from(bytes) > max_job_size as u64 {
        return Err(ProtoError::JobTooBig {
            consumed,
            discard: u64::from(bytes) + 2,
        });
    }
    let body_len = bytes as usize;
    let total = consumed + body_len + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[consumed + body_len..total] != b"\r\n" {
        return Err(ProtoError::ExpectedCrlf { consumed: total });
    }
    let body = buf[consumed..consumed + body_len].to_vec();
    let command = Command::Put {
        pri,
        delay,
        ttr,
        body,
    };
    Ok(Some((command, total)))
}

/// A decimal integer as beanstalkd reads one: digits only, no sign, must
/// fit the type.
fn int<T: std::str::FromStr>(word: &[u8]) -> Result<T, Unparsed> {
    if word.is_empty() || !word.iter().all(u8::is_ascii_digit) {
        return Err(Unparsed::Bad);
    }
    std::str::from_utf8(word)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Unparsed::Bad)
}

/// Whether `name` is a valid beanstalkd tube name: a queue name (core's
/// grammar, [`delayd_core::is_valid_queue_name`]) or one of the names core
/// reserves, which beanstalkd allows: they parse, and the session answers
/// them as tubes that cannot be used (see `tubes::queue_name`).
pub fn is_valid_name(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(|name| {
        delayd_core::is_valid_queue_name(name) || delayd_core::RESERVED_QUEUE_NAMES.contains(&name)
    })
}

fn tube(word: &[u8]) -> Result<String, Unparsed> {
    if !is_valid_name(word) {
        return Err(Unparsed::Bad);
    }
    // Valid names are ASCII, so this cannot fail.
    String::from_utf8(word.to_vec()).map_err(|_| Unparsed::Bad)
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Result<Option<(Command, usize)>, ProtoError> {
        parse(bytes, DEFAULT_MAX_JOB_SIZE)
    }

    #[test]
    fn put_waits_for_body_then_parses() {
        assert_eq!(one(b"put 1 2 3 5\r\nhel"), Ok(None));
        let (cmd, used) = one(b"put 1 2 3 5\r\nhello\r\nrest").unwrap().unwrap();
        assert_eq!(used, 20);
        assert_eq!(
            cmd,
            Command::Put {
                pri: 1,
                delay: 2,
                ttr: 3,
                body: b"hello".to_vec()
            }
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            one(b"bogus\r\n"),
            Err(ProtoError::UnknownCommand { consumed: 7 })
        );
        assert_eq!(
            one(b"delete x\r\n"),
            Err(ProtoError::BadFormat { consumed: 10 })
        );
        assert_eq!(
            one(b"reserve 1\r\n"),
            Err(ProtoError::BadFormat { consumed: 11 })
        );
        assert_eq!(
            one(b"put 1 2 3 99999999999\r\n"),
            Err(ProtoError::BadFormat { consumed: 23 })
        );
        assert_eq!(
            one(b"put 1 2 3 2\r\nabXY"),
            Err(ProtoError::ExpectedCrlf { consumed: 17 })
        );
        assert_eq!(
            one(b"put 1 2 3 65536\r\n"),
            Err(ProtoError::JobTooBig {
                consumed: 17,
                discard: 65538
            })
        );
        assert_eq!(one(&[b'a'; MAX_LINE]), Err(ProtoError::LineTooLong));
        assert_eq!(one(&[b'a'; MAX_LINE - 1]), Ok(None));
        assert_eq!(
            one(b"use -x\r\n"),
            Err(ProtoError::BadFormat { consumed: 8 })
        );
        assert_eq!(
            one(b"pri 4294967296\r\n"),
            Err(ProtoError::UnknownCommand { consumed: 16 })
        );
        assert_eq!(
            one(b"bury 1 4294967296\r\n"),
            Err(ProtoError::BadFormat { consumed: 19 })
        );
    }
}
