//! The server's integration tests, one binary (one link) for all of them:
//! one module per test file, `common` compiled once. `idle_flood.rs` stays
//! a binary of its own: it reads the process-wide connection gauge, which
//! every other test's connections would move.

mod common;

mod bad_input;
mod batch_ack;
mod connection_timeouts;
mod dashboard_endpoints;
mod dashboard_with_api;
mod e2e_api;
mod flow_api;
mod history_api;
mod http2_limits;
mod https;
mod oversized_content_length;
mod panic_counted_in_metrics;
mod replace_api;
mod retention_api;
mod schedules_api;
mod scoped_tokens;
mod shutdown;
mod slow_body_flood;
