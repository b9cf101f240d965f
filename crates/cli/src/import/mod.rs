//! `delayd import`: moves the delayed jobs of another system into a running
//! delayd, with ids derived from the source so that a re-run changes
//! nothing (docs/import.md).
//!
//! # Layout
//! - `redis_zset`: `delayd import redis-zset`, a Redis ZSET delay queue
//!   (member = payload or id, score = due time).

mod redis_zset;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Move a Redis ZSET delay queue (member = payload, or id with
    /// --hash; score = due time) into delayd.
    RedisZset(redis_zset::ZsetArgs),
}

pub async fn run(command: ImportCommand) -> anyhow::Result<()> {
    match command {
        ImportCommand::RedisZset(args) => redis_zset::run(args).await,
    }
}
