//! The frontends' policy for a failing `accept` (the HTTP listener and the
//! beanstalkd listener use it alike).
//!
//! Out of file descriptors (EMFILE/ENFILE), `accept` fails again at once
//! for as long as the condition lasts: retrying at once would spin a core
//! and log a line per try. So the run of failures is logged once when it
//! starts and once when it ends, and each failure asks for a pause that
//! doubles from 10 ms up to a second. A client that gave up before its
//! connection was accepted is not the listener's trouble: no pause, no log.
//!
//! The policy only counts and decides; the listener sleeps (so this module
//! needs no runtime) and may free a descriptor first.

use std::io;
use std::time::Duration;

/// The first pause after a failed accept.
pub const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause: a listener out of descriptors still notices within a
/// second that one came free.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// One listener's run of failed accepts.
#[derive(Debug)]
pub struct AcceptBackoff {
    /// Names the listener in the log lines ("HTTP", "beanstalkd").
    listener: &'static str,
    /// Failed accepts since the last one that worked.
    failures: u64,
    /// The pause asked for after the last failure.
    pause: Duration,
}

impl AcceptBackoff {
    pub fn new(listener: &'static str) -> Self {
        Self {
            listener,
            failures: 0,
            pause: Duration::ZERO,
        }
    }

    /// Counts a failed accept; the pause to take before accepting again, or
    /// `None` when the client, not the listener, is the cause.
    pub fn failed(&mut self, error: &io::Error) -> Option<Duration> {
        if matches!(
            error.kind(),
            io::ErrorKind::ConnectionAborted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::Interrupted
        ) {
            return None;
        }
        if self.failures == 0 {
            tracing::warn!(
                %error,
                listener = self.listener,
                "accept failing; retrying with a pause (logged again when it recovers)"
            );
        }
        self.failures += 1;
        self.pause = (self.pause * 2).clamp(FIRST_PAUSE, MAX_PAUSE);
        Some(self.pause)
    }

    /// An accept worked: ends the run of failures (logged if there was one).
    pub fn recovered(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                failures = self.failures,
                listener = self.listener,
                "accept recovered"
            );
        }
        self.failures = 0;
        self.pause = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_of_descriptors() -> io::Error {
        io::Error::other("Too many open files")
    }

    #[test]
    fn pauses_double_up_to_the_limit_and_restart_after_a_success() {
        let mut backoff = AcceptBackoff::new("test");
        let pauses: Vec<_> = (0..9)
            .map(|_| backoff.failed(&out_of_descriptors()))
            .collect();
        let ms = |ms| Some(Duration::from_millis(ms));
        assert_eq!(
            pauses,
            [
                ms(10),
                ms(20),
                ms(40),
                ms(80),
                ms(160),
                ms(320),
                ms(640),
                ms(1000),
                ms(1000)
            ]
        );
        backoff.recovered();
        assert_eq!(backoff.failed(&out_of_descriptors()), ms(10));
    }

    #[test]
    fn a_client_that_gave_up_asks_for_no_pause_and_breaks_no_run() {
        let mut backoff = AcceptBackoff::new("test");
        assert_eq!(
            backoff.failed(&out_of_descriptors()),
            Some(Duration::from_millis(10))
        );
        for kind in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::Interrupted,
        ] {
            assert_eq!(backoff.failed(&io::Error::from(kind)), None);
        }
        assert_eq!(
            backoff.failed(&out_of_descriptors()),
            Some(Duration::from_millis(20))
        );
    }
}
