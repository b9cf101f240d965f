//! The local store's integration tests, one binary (one link) for all of
//! them; one module per test file. `schedule_scale.rs` stays a binary of
//! its own: it measures the process's memory, which other tests running
//! beside it would move. The fault tests need the `fault-injection`
//! feature.

mod child;
mod clock_jump;
mod conformance;
mod corruption;
mod crash_kill9;
mod crash_retain;
mod crash_successor;
mod disk_reserve;
mod durability_modes;
#[cfg(feature = "fault-injection")]
mod failed_write;
#[cfg(feature = "fault-injection")]
mod fault_explorer;
mod flow_fairness;
mod flow_restart;
mod history;
mod horizon_bounded_memory;
mod journal_prezero;
mod model_state_machine;
mod retention;
mod schedule_restart;
mod state_parts;
mod support;
mod torn_pages;
mod torn_write;
mod waiter_handoff;
