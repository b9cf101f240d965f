//! `delayd`: the command-line tool. Sends, receives and inspects messages
//! through the HTTP API, and load-tests a running server.
//!
//! # Layout
//! - `main.rs`: the argument grammar (clap derive) and the mapping of
//!   failures to exit codes.
//! - `commands`: one function per people-facing subcommand (put, get, ack,
//!   nack, cancel, queues, stats).
//! - `message`: `delayd message QUEUE ID`, one message by id in any state
//!   (a retained `acked` or `cancelled` one too), without leasing it.
//! - `admin`: operator subcommands (dead, redrive, pause, resume,
//!   reschedule, queue show/list/set, delete-queue).
//! - `flow`: flow control: `queue set`'s flow options (merged into the
//!   queue's current `flow`), `delayd key QUEUE KEY`, and the flow lines of
//!   `stats`.
//! - `schedule`: `delayd schedule put|get|list|delete|pause|resume|trigger|
//!   preview`, recurring schedules.
//! - `import`: `delayd import beanstalkd-binlog DIR` (a stopped
//!   beanstalkd's binlog into delayd's store) and `delayd import redis-zset`
//!   (a Redis ZSET delay queue into a running delayd); docs/import.md.
//! - `check`: `delayd check --data DIR`, the LocalBroker store's damage
//!   report (exit 1 when damage is found).
//! - `check_history`: `delayd check-history FILE`, a fault test's
//!   recorded history verified by crates/history (exit 1 on violations).
//! - `completions`: shell completion scripts generated from the grammar.
//! - `token`: `delayd token hash` (the SHA-256 a `--token-file` entry
//!   stores) and `serve`'s reading of `--token-file` (at start, on SIGHUP).
//! - `logging`: `serve`'s log filter and `--log-format`.
//! - `output`: stdout writes that survive a closed pipe; JSON errors.
//! - `config`: `delayd serve`'s configuration (flags, `DELAYD_*`
//!   environment, TOML file, precedence, validation); `serve` opens the
//!   store it selects and runs the listeners until a signal.
//! - `duration`: the one parser of human durations (`250ms`, `30s`,
//!   `3650d`), sizes (`1MiB`) and `--at` times.
//! - `bench`: the load generator (`delayd bench`), with its accounting in
//!   `bench::tally`, the server's commit counter in `bench::commits` and
//!   its report in `bench::report`.
//! - `fsync_bench`: `delayd fsync-bench`, the disk's own fsync rate,
//!   latency and CPU per fsync for four file layouts.
//! - `fd_limit`: `serve`'s default connection budget, from the process's
//!   file-descriptor limit.
//!
//! Exit codes: 0 success, 1 the server answered an error (`check`: damage
//! found), 2 bad usage
//! (clap's own code), 3 the server could not be reached, 141 stdout was
//! closed by its reader (`delayd queues | head -1`).

mod admin;
mod bench;
mod check;
mod check_history;
mod commands;
mod completions;
mod config;
mod duration;
mod fd_limit;
mod flow;
mod fsync_bench;
mod import;
mod logging;
mod message;
mod output;
mod schedule;
mod serve;
mod token;

use std::process::ExitCode;

use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use delayd_client::{Client, ClientError, Protocol};

/// `delayd --version`: the crate version, the commit it was built from
/// (`unknown` outside a git checkout; see build.rs) and the IANA time-zone
/// database compiled in (schedules' zones).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (commit {}, tzdata {})",
        env!("CARGO_PKG_VERSION"),
        env!("DELAYD_GIT_COMMIT"),
        delayd_core::TZDB_VERSION
    )
});

/// Exit code when the server answered with an error.
const EXIT_API_ERROR: u8 = 1;
/// Exit code for bad usage (clap uses it too for argument errors).
const EXIT_USAGE: u8 = 2;
/// Exit code when the server could not be reached.
const EXIT_UNREACHABLE: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "delayd",
    version = VERSION.as_str(),
    about = "delayd: a durable delayed-message service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format of `serve`: `text` or `json` (one object per line).
    #[arg(
        long,
        global = true,
        env = "DELAYD_LOG_FORMAT",
        value_enum,
        value_name = "FORMAT",
        default_value_t
    )]
    log_format: logging::LogFormat,
}

/// The grammar `main` parses: [`Cli`]'s, with a negative number read as the
/// value of the option before it (`--key-concurrency -1`), so that the
/// value's own check answers it, naming the option and its range, instead
/// of clap's "unexpected argument '-1' found". No option has a short name,
/// so a token such as `-1` can mean nothing else.
fn command() -> clap::Command {
    fn numbers_as_values(command: clap::Command) -> clap::Command {
        command
            .mut_args(|arg| {
                if arg.get_action().takes_values() {
                    arg.allow_negative_numbers(true)
                } else {
                    arg
                }
            })
            .mut_subcommands(numbers_as_values)
    }
    numbers_as_values(Cli::command())
}

/// Options every client subcommand takes (flattened into each one rather
/// than global, because `serve` has a `--token` of its own).
#[derive(Debug, Clone, Args)]
pub(crate) struct Connection {
    /// Base URL of the delayd HTTP API.
    #[arg(long, env = "DELAYD_SERVER", default_value = "http://127.0.0.1:7070")]
    pub server: String,
    /// Bearer token (when the server was started with `--token`).
    #[arg(long, env = "DELAYD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Speak HTTP/2 instead of HTTP/1.1: prior knowledge over http://
    /// (h2c), ALPN over https://. Many concurrent requests share one
    /// connection (and, with `--durability always`, commit groups).
    #[arg(long)]
    pub http2: bool,
}

impl Connection {
    pub fn client(&self) -> Result<Client, ClientError> {
        let protocol = if self.http2 {
            Protocol::Http2
        } else {
            Protocol::Http1
        };
        let client = Client::with_protocol(&self.server, protocol)?;
        // `delayd serve` reads DELAYD_TOKEN as a comma-separated list; a
        // shell that sets it for the server gives the client its first token.
        let token = self
            .token
            .as_deref()
            .and_then(|list| list.split(',').map(str::trim).find(|t| !t.is_empty()));
        Ok(match token {
            Some(token) => client.with_token(token),
            None => client,
        })
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (HTTP API, dashboard, beanstalkd protocol, push).
    Serve(Box<config::ServeArgs>),
    /// Enqueue a message.
    Put(commands::PutArgs),
    /// Lease (receive) messages and print them.
    Get(commands::GetArgs),
    /// Acknowledge a delivery: the message is done.
    Ack(commands::AckArgs),
    /// Fail a delivery: the message comes back later.
    Nack(commands::NackArgs),
    /// Cancel a message in any state.
    Cancel(commands::CancelArgs),
    /// Show one message by id, in any state (a retained acked or cancelled
    /// one too), without leasing it.
    Message(message::MessageArgs),
    /// Show a message's history: its last events, oldest first.
    Events(message::EventsArgs),
    /// List queues with their message counts.
    Queues(commands::QueuesArgs),
    /// Show one queue: config, pause state and counts.
    Stats(commands::StatsArgs),
    /// Show a flow key: its live messages by state and its cooldown.
    Key(flow::KeyArgs),
    /// Load-test a running server and report lateness, losses, duplicates.
    Bench(bench::BenchArgs),
    /// Measure the disk's own fsync (append, sparse, fallocate,
    /// pre-zeroed file): rate, latency, CPU per fsync.
    FsyncBench(fsync_bench::FsyncBenchArgs),
    #[command(flatten)]
    Admin(admin::AdminCommand),
    /// Recurring schedules: put, get, list, delete, pause, resume,
    /// trigger, preview.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Move another system's delayed jobs into delayd: a beanstalkd
    /// binlog, a Redis ZSET delay queue (docs/import.md).
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Check a stopped server's data directory for damaged files and
    /// records (exit 0 clean, 1 damage found).
    Check(check::CheckArgs),
    /// Verify a fault test's recorded history (JSON lines) against every
    /// promise (exit 0 it holds, 1 violations listed).
    CheckHistory(check_history::CheckHistoryArgs),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completions(completions::CompletionsArgs),
    /// Scoped tokens: `token hash` prints the SHA-256 of a secret for
    /// `--token-file`.
    #[command(subcommand)]
    Token(token::TokenCommand),
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            logging::init(cli.log_format);
            serve::run(*args).await
        }
        Command::Put(args) => commands::put(args).await,
        Command::Get(args) => commands::get(args).await,
        Command::Ack(args) => commands::ack(args).await,
        Command::Nack(args) => commands::nack(args).await,
        Command::Cancel(args) => commands::cancel(args).await,
        Command::Message(args) => message::show(args).await,
        Command::Events(args) => message::events(args).await,
        Command::Queues(args) => commands::queues(args).await,
        Command::Stats(args) => commands::stats(args).await,
        Command::Key(args) => flow::key(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::FsyncBench(args) => fsync_bench::run(args).await,
        Command::Admin(command) => admin::run(command).await,
        Command::Schedule(command) => schedule::run(command).await,
        Command::Import(command) => import::run(command).await,
        Command::Check(args) => check::run(args).await,
        Command::CheckHistory(args) => check_history::run(args).await,
        Command::Completions(args) => completions::run(args, command()),
        Command::Token(command) => token::run(command),
    }
}

/// Usage mistakes found after parsing (a bad duration in a place clap does
/// not check, DATA on a terminal...): exit code 2 like clap's own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub String);

fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return match client {
                ClientError::Unreachable { .. } | ClientError::Transport { .. } => EXIT_UNREACHABLE,
                ClientError::InvalidUrl(_) => EXIT_USAGE,
                ClientError::Api { .. } | ClientError::Decode { .. } => EXIT_API_ERROR,
            };
        }
        if cause.downcast_ref::<config::ConfigError>().is_some() {
            return EXIT_USAGE;
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return EXIT_USAGE;
        }
    }
    EXIT_API_ERROR
}

/// One line a person can act on, e.g. "cannot reach the delayd server at
/// http://127.0.0.1:7070 (is it running? set --server or DELAYD_SERVER)".
fn describe(err: &anyhow::Error) -> String {
    for cause in err.chain() {
        if let Some(ClientError::Unreachable { url, source }) = cause.downcast_ref::<ClientError>()
        {
            let why = if source.is_timeout() {
                "timed out"
            } else {
                "connection failed"
            };
            return format!(
                "cannot reach the delayd server at {url} ({why}; is it running? set --server or DELAYD_SERVER)"
            );
        }
    }
    format!("{err:#}")
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let matches = command().get_matches();
    let json = output::wants_json(&matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("delayd: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_API_ERROR);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => report(&err, json),
    }
}

/// Prints `err` on stderr (as a JSON error object with `--json`) and picks
/// the exit code; a reader that closed stdout gets no message at all.
fn report(err: &anyhow::Error, json: bool) -> ExitCode {
    if output::stdout_closed(err) {
        return ExitCode::from(output::EXIT_STDOUT_CLOSED);
    }
    let code = exit_code(err);
    let description = describe(err);
    if json {
        eprintln!("{}", output::error_json(err, &description, code));
    } else {
        eprintln!("delayd: error: {description}");
    }
    ExitCode::from(code)
}
