//! core's integration tests, one binary (one link) for all of them; one
//! module per former test file (each needs the `testkit` feature).

mod model_conformance;
mod model_manual_clock;
