//! `delayd check-history FILE`: reads a history a fault test recorded
//! (JSON lines, crates/history's format) and verifies every promise on it
//! (crates/history/src/lib.rs, "Properties"). Exit 0 when it holds, 1 with the violations listed,
//! 2 when the file cannot be read or parsed.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use delayd_history::{check_with, CheckConfig, History};

use crate::output::{outln, print_json};
use crate::UsageError;

#[derive(Debug, Args)]
pub struct CheckHistoryArgs {
    /// The history: one operation per line (`-` for stdin).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Allowed difference between the server's clock and the client's,
    /// in ms.
    #[arg(long, default_value_t = CheckConfig::default().slack_ms, value_name = "MS")]
    slack_ms: u64,
    /// How late a schedule's fire may appear while the server is up, in ms.
    #[arg(long, default_value_t = CheckConfig::default().fire_grace_ms, value_name = "MS")]
    fire_grace_ms: u64,
    /// List at most this many violations.
    #[arg(long, default_value_t = CheckConfig::default().max_violations, value_name = "N")]
    max_violations: usize,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// The history breaks a promise: exit code 1, after the report.
#[derive(Debug, thiserror::Error)]
#[error("{0} violation(s) in {1}; see the report above")]
pub struct ViolationsFound(usize, String);

pub async fn run(args: CheckHistoryArgs) -> anyhow::Result<()> {
    let name = args.file.display().to_string();
    let history = if name == "-" {
        History::read(std::io::stdin().lock())
    } else {
        let file =
            File::open(&args.file).map_err(|e| UsageError(format!("cannot open {name}: {e}")))?;
        History::read(BufReader::new(file))
    }
    .map_err(|e| UsageError(format!("{name}: {e}")))?;
    let cfg = CheckConfig {
        slack_ms: args.slack_ms,
        fire_grace_ms: args.fire_grace_ms,
        max_violations: args.max_violations,
    };
    let report = tokio::task::spawn_blocking(move || check_with(&history, &cfg))
        .await
        .context("check task failed")?;
    if args.json {
        print_json(&report)?;
    } else {
        outln!("{name}: {report}")?;
    }
    if !report.ok() {
        return Err(ViolationsFound(report.violations.len(), name).into());
    }
    Ok(())
}
