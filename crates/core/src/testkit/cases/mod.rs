//! The conformance cases: one `pub async fn` per semantic rule (or a few
//! closely related rules), each taking a fresh broker and panicking with a
//! clear message on a violation. `conformance_tests!` runs the HTTP-visible
//! ones, `conformance_tests_extended!` the rest; the recurring-schedule
//! cases have their own two macros, and the cases of time settled at the
//! call (`time_at_call`) `conformance_tests_time_at_call!`, retention
//! `conformance_tests_retention!`, replace and debounce
//! `conformance_tests_replace!`, message history `conformance_tests_history!`. docs/conformance.md lists
//! them with the choices made where api.md leaves room.
//!
//! Each case uses queue names unique to it and to the run, and assumes
//! nothing about the broker beyond those queues, so a shared backend works.

mod consuming;
mod dead;
mod extended;
mod flow;
mod history;
mod ids;
mod lifecycle;
mod queues;
mod replace;
mod retention;
mod schedule_support;
mod schedules;
mod schedules_wall;
mod scheduling;
mod time_at_call;

pub use consuming::*;
pub use dead::*;
pub use extended::*;
pub use flow::*;
pub use history::*;
pub use ids::*;
pub use lifecycle::*;
pub use queues::*;
pub use replace::*;
pub use retention::*;
pub use schedules::*;
pub use schedules_wall::*;
pub use scheduling::*;
pub use time_at_call::*;
