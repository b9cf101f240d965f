//! `delayd import`: moves jobs in from another queue system.
//!
//! - `beanstalkd`: `import beanstalkd-binlog DIR`, a stopped beanstalkd's
//!   binlog into delayd's store, read by `binlog`.

mod beanstalkd;
mod binlog;

/// One subcommand per source system.
#[derive(Debug, clap::Subcommand)]
pub enum ImportCommand {
    /// Every live job of a stopped beanstalkd's binlog directory (`-b DIR`)
    /// into delayd's store. Re-running adds nothing.
    ///
    /// Stop beanstalkd first (the import refuses a directory whose lock a
    /// beanstalkd holds). The import opens delayd's store itself, with
    /// `delayd serve`'s store options: with `--data`, stop `delayd serve`
    /// too; with `--store redis://...` delayd may run, but let no worker
    /// consume the imported tubes before the import ends. Then start
    /// `delayd serve` and point the beanstalkd clients at its beanstalkd
    /// port.
    ///
    /// Each job becomes message `bs-<job id>` in the queue named like its
    /// tube, with its priority, its TTR as lease time and its body; ready
    /// and reserved jobs arrive ready, delayed ones scheduled at their
    /// deadline (to the ms), buried ones dead. See docs/import.md.
    BeanstalkdBinlog(beanstalkd::BinlogArgs),
}

pub async fn run(command: ImportCommand) -> anyhow::Result<()> {
    match command {
        ImportCommand::BeanstalkdBinlog(args) => beanstalkd::run(args).await,
    }
}
