//! `delayd`: the command-line tool. Sends, receives and inspects messages
//! through the HTTP API, and load-tests a running server.
//!
//! # Layout
//! - `main.rs`: the argument grammar (clap derive) and the mapping of
//!   failures to exit codes.
//! - `commands`: one function per people-facing subcommand (put, get, ack,
//!   nack, cancel, queues, stats).
//! - `duration`: human durations (`250ms`, `30s`, `3650d`) and `--at` times.
//! - `bench`: the load generator (`delayd bench`), with its accounting in
//!   `bench::tally` and its report in `bench::report`.
//!
//! Exit codes: 0 success, 1 the server answered an error, 2 bad usage
//! (clap's own code), 3 the server could not be reached.

#![forbid(unsafe_code)]

mod bench;
mod commands;
mod config;
mod duration;
mod serve;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use delayd_client::{Client, ClientError};

/// Exit code when the server answered with an error.
const EXIT_API_ERROR: u8 = 1;
/// Exit code for bad usage (clap uses it too for argument errors).
const EXIT_USAGE: u8 = 2;
/// Exit code when the server could not be reached.
const EXIT_UNREACHABLE: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "delayd",
    version,
    about = "delayd: a durable delayed-message service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

impl Connection {
    pub fn client(&self) -> Result<Client, ClientError> {
        let client = Client::new(&self.server)?;
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
    /// List queues with their message counts.
    Queues(commands::QueuesArgs),
    /// Show one queue: config, pause state and counts.
    Stats(commands::StatsArgs),
    /// Load-test a running server and report lateness, losses, duplicates.
    Bench(bench::BenchArgs),
}

/// Structured logs on stderr for `serve`; `RUST_LOG` filters (default
/// `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second initialisation (tests) is harmless: keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => {
            init_logging();
            serve::run(*args).await
        }
        Command::Put(args) => commands::put(args).await,
        Command::Get(args) => commands::get(args).await,
        Command::Ack(args) => commands::ack(args).await,
        Command::Nack(args) => commands::nack(args).await,
        Command::Cancel(args) => commands::cancel(args).await,
        Command::Queues(args) => commands::queues(args).await,
        Command::Stats(args) => commands::stats(args).await,
        Command::Bench(args) => bench::run(args).await,
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
    let cli = Cli::parse();
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
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("delayd: error: {}", describe(&err));
            ExitCode::from(exit_code(&err))
        }
    }
}
