//! `delayd check --data DIR`: lists every damaged journal batch, table or
//! version file and record of a LocalBroker data directory, with what it
//! affects and what to do (docs/operations.md, "Corruption").
//!
//! The directory itself is only read. Reading records needs the engine
//! open, and opening writes (it cuts a torn journal tail, may flush), so
//! that part runs on a copy in a scratch directory, removed afterwards.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use delayd_local::{CheckReport, Finding, Severity};

use crate::output::{outln, print_json};
use crate::UsageError;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The data directory of a stopped `delayd serve --data DIR`.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Where to copy the store to read its records [default: a new
    /// directory in the system's temporary directory]. Needs as much free
    /// space as DIR; removed afterwards.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Damage was found: exit code 1, after the report was printed.
#[derive(Debug, thiserror::Error)]
#[error("{0} damaged file(s) or record(s) in {1}; see the report above")]
pub struct DamageFound(usize, String);

pub async fn run(args: CheckArgs) -> anyhow::Result<()> {
    if !args.data.is_dir() {
        return Err(UsageError(format!("{} is not a directory", args.data.display())).into());
    }
    let scratch_parent = match &args.scratch {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir(),
    };
    let scratch = scratch_parent.join(format!("delayd-check-{}", std::process::id()));
    if scratch.exists() {
        return Err(UsageError(format!("{} exists already", scratch.display())).into());
    }
    let data = args.data.clone();
    let copy = scratch.clone();
    let result = tokio::task::spawn_blocking(move || delayd_local::check::check(&data, &copy))
        .await
        .context("check task failed")?;
    // The copy is ours: remove it whatever happened.
    let _ = std::fs::remove_dir_all(&scratch);
    let report = result.with_context(|| format!("cannot check {}", args.data.display()))?;
    print_report(&args, &report)?;
    if report.damaged() {
        let damaged = report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Damage)
            .count();
        return Err(DamageFound(damaged, args.data.display().to_string()).into());
    }
    Ok(())
}

fn print_report(args: &CheckArgs, report: &CheckReport) -> anyhow::Result<()> {
    if args.json {
        return print_json(report);
    }
    let verdict = if report.damaged() { "DAMAGED" } else { "clean" };
    outln!(
        "{}: {verdict}; {} journal(s) with {} batch(es), {} table(s), {} record(s) read",
        args.data.display(),
        report.journals,
        report.journal_batches,
        report.tables,
        report.records
    )?;
    if let Some(why) = &report.records_unchecked {
        outln!("records not checked: the engine cannot open a copy ({why})")?;
    }
    for finding in &report.findings {
        print_finding(finding)?;
    }
    Ok(())
}

fn print_finding(f: &Finding) -> anyhow::Result<()> {
    let label = match f.severity {
        Severity::Damage => "damage",
        Severity::TornTail => "torn tail",
    };
    outln!("{label}: {} {} ({})", f.kind, f.path.display(), f.location)?;
    outln!("  problem: {}", f.problem)?;
    outln!("  affects: {}", f.affects)?;
    outln!("  do:      {}", f.action)?;
    Ok(())
}
