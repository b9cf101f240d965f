//! Writing to stdout without panicking, and reporting failures as JSON.
//!
//! `println!` panics when stdout is a closed pipe (`delayd stats q | head
//! -1`); the [`outln!`] macro returns the error instead, wrapped in
//! [`StdoutError`] so `main` can tell a reader that went away (exit quietly)
//! from a network error that happens to be a broken pipe too.

use clap::ArgMatches;
use delayd_client::ClientError;
use serde_json::{json, Value};

/// Exit code when stdout was closed under us: 128 + SIGPIPE, what a shell
/// reports for a C program killed by the signal, so `set -o pipefail`
/// scripts see the same status as with any other producer cut short.
pub const EXIT_STDOUT_CLOSED: u8 = 141;

/// A write to stdout failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub struct StdoutError(#[source] pub std::io::Error);

impl StdoutError {
    /// The reader closed its end of the pipe: not worth a message.
    pub fn is_closed(&self) -> bool {
        self.0.kind() == std::io::ErrorKind::BrokenPipe
    }
}

/// `println!` returning `Result<(), StdoutError>` instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::output::StdoutError)
    }};
}
pub(crate) use outln;

/// One JSON document on one line of stdout.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string(value)?)?;
    Ok(())
}

/// Whether `err` is only the reader of stdout having gone away.
pub fn stdout_closed(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<StdoutError>())
        .any(StdoutError::is_closed)
}

/// Whether the innermost subcommand that was run has `--json` set (read
/// from the parsed matches, so each subcommand keeps its own flag).
pub fn wants_json(matches: &ArgMatches) -> bool {
    let mut current = matches;
    while let Some((_, sub)) = current.subcommand() {
        current = sub;
    }
    matches!(current.try_get_one::<bool>("json"), Ok(Some(true)))
}

/// The error as a JSON object for stderr: the API's own error object when
/// the server answered one, else the same shape with a code naming the
/// kind of failure (`unreachable`, `invalid_usage`, `failed`).
pub fn error_json(err: &anyhow::Error, description: &str, exit_code: u8) -> Value {
    for cause in err.chain() {
        if let Some(ClientError::Api { code, message, .. }) = cause.downcast_ref::<ClientError>() {
            return json!({ "error": { "code": code, "message": message } });
        }
    }
    let code = match exit_code {
        crate::EXIT_UNREACHABLE => "unreachable",
        crate::EXIT_USAGE => "invalid_usage",
        _ => "failed",
    };
    json!({ "error": { "code": code, "message": description } })
}
