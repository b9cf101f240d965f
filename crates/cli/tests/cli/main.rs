//! The `delayd` binary's integration tests, one test binary (one link) for
//! all of them: one module per test file, each named after its scenario
//! (`cargo test -p delayd --test cli serve_kill9_recovery::`).
//!
//! A new test file goes into this directory with a `mod` line below; it
//! reaches the shared helpers with `use crate::common::{...}` (not
//! `mod common;`). The helpers stay in `../common/mod.rs`, where a test
//! file outside this binary can still `mod common;` them:
//! `cli_bench_http2.rs` is such a binary of its own, as it reads the
//! process-wide metrics.

// Its `expect(dead_code)` is for a test binary that uses a part of it;
// this one uses all of it.
#[allow(unfulfilled_lint_expectations, reason = "see above")]
#[path = "../common/mod.rs"]
mod common;

mod architecture_paths;
mod bench_drain;
mod cli;
mod cli_admin;
mod cli_check;
mod cli_check_history;
mod cli_completions_and_closed_stdout;
mod cli_events;
mod cli_flow;
mod cli_fsync_bench;
mod cli_replace;
mod cli_retention;
mod cli_schedule;
mod dependency_rules;
mod history_ops;
mod import_beanstalkd;
mod import_redis_zset;
mod push_kill9_redelivery;
mod redis_partitions;
mod redis_three_nodes_kill;
mod serve_disk_full;
mod serve_https;
mod serve_idle_flood_under_fd_limit;
mod serve_kill9_recovery;
mod serve_log_filter;
mod serve_max_connections_across_listeners;
mod serve_sigterm_graceful;
mod serve_token_file;
