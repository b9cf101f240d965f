//! `delayd import`: moves the delayed jobs of another system into delayd,
//! with ids derived from the source so that a re-run changes nothing
//! (docs/import.md).
//!
//! # Layout
//! - `beanstalkd`: `import beanstalkd-binlog DIR`, a stopped beanstalkd's
//!   binlog into delayd's store, read by `binlog`.
//! - `redis_zset`: `import redis-zset`, a Redis ZSET delay queue (member =
//!   payload or id, score = due time) into a running delayd.

mod beanstalkd;
mod binlog;
mod redis_zset;

use clap::Subcommand;

/// One subcommand per source system.
#[derive(Debug, Subcommand)]
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
    /// Move a Redis ZSET delay queue (member = payload, or id with
    /// --hash; score = due time) into a running delayd.
    RedisZset(redis_zset::ZsetArgs),
}

pub async fn run(command: ImportCommand) -> anyhow::Result<()> {
    match command {
        ImportCommand::BeanstalkdBinlog(args) => beanstalkd::run(args).await,
        ImportCommand::RedisZset(args) => redis_zset::run(args).await,
    }
}
