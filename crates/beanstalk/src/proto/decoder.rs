//! [`parse`] plus the state the protocol needs between reads: throwing
//! away the body of a job that was too big, and skipping the rest of an
//! overlong line.

use bytes::{Buf, BytesMut};

use super::{find_crlf, parse, Command, ProtoError, MAX_LINE};

/// What the [`Decoder`] found at the front of its buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Command(Command),
    Error(ProtoError),
}

/// Bytes still to be thrown away before the next command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Discard {
    #[default]
    Nothing,
    /// The body of a job that was too big.
    Bytes(u64),
    /// The rest of an overlong line, through its `\r\n`.
    ToLineEnd,
}

/// [`parse`] plus the discard state between reads. Memory stays bounded:
/// the caller's buffer never needs more than one line and one body
/// (`MAX_LINE + max_job_size + 2` bytes) to make progress.
#[derive(Clone, Debug)]
pub struct Decoder {
    max_job_size: usize,
    discard: Discard,
}

impl Decoder {
    pub fn new(max_job_size: usize) -> Self {
        Self {
            max_job_size,
            discard: Discard::Nothing,
        }
    }

    /// How many buffered bytes can be needed before a frame must come out.
    pub fn max_frame(&self) -> usize {
        MAX_LINE + self.max_job_size + 2
    }

    /// Takes the next frame off the front of `buf`, or `None` when more
    /// bytes are needed. Consumed bytes are removed from `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if !self.skip(buf) {
            return None;
        }
        match parse(buf, self.max_job_size) {
            Ok(None) => None,
            Ok(Some((command, consumed))) => {
                buf.advance(consumed);
                Some(Frame::Command(command))
            }
            Err(error) => {
                self.begin_discard(buf, error);
                Some(Frame::Error(error))
            }
        }
    }

    fn begin_discard(&mut self, buf: &mut BytesMut, error: ProtoError) {
        match error {
            ProtoError::BadFormat { consumed }
            | ProtoError::UnknownCommand { consumed }
            | ProtoError::ExpectedCrlf { consumed } => buf.advance(consumed),
            ProtoError::JobTooBig { consumed, discard } => {
                buf.advance(consumed);
                self.discard = Discard::Bytes(discard);
            }
            ProtoError::LineTooLong => self.discard = Discard::ToLineEnd,
        }
    }

    /// Throws away what must be; true when done and parsing may go on.
    fn skip(&mut self, buf: &mut BytesMut) -> bool {
        match self.discard {
            Discard::Nothing => true,
            Discard::Bytes(n) => {
                let take = n.min(buf.len() as u64);
                buf.advance(take as usize);
                let left = n - take;
                self.discard = if left == 0 {
                    Discard::Nothing
                } else {
                    Discard::Bytes(left)
                };
                left == 0
            }
            Discard::ToLineEnd => match find_crlf(buf) {
                Some(at) => {
                    buf.advance(at + 2);
                    self.discard = Discard::Nothing;
                    true
                }
                None => {
                    // Keep a trailing '\r': its '\n' may be in the next read.
                    let keep = usize::from(buf.last() == Some(&b'\r'));
                    buf.advance(buf.len() - keep);
                    false
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_skips_big_body_and_long_line() {
        let mut d = Decoder::new(4);
        let mut buf = BytesMut::from(&b"put 0 0 1 10\r\n0123"[..]);
        assert!(matches!(
            d.decode(&mut buf),
            Some(Frame::Error(ProtoError::JobTooBig { .. }))
        ));
        assert_eq!(d.decode(&mut buf), None);
        buf.extend_from_slice(b"456789\r\nstats\r\n");
        assert_eq!(d.decode(&mut buf), Some(Frame::Command(Command::Stats)));

        let mut long = vec![b'x'; 500];
        long.push(b'\r');
        let mut buf = BytesMut::from(&long[..]);
        assert_eq!(
            d.decode(&mut buf),
            Some(Frame::Error(ProtoError::LineTooLong))
        );
        assert_eq!(d.decode(&mut buf), None);
        assert_eq!(&buf[..], b"\r");
        buf.extend_from_slice(b"\nquit\r\n");
        assert_eq!(d.decode(&mut buf), Some(Frame::Command(Command::Quit)));
    }
}
