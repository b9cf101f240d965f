//! The ui crate's integration tests, one binary for all of them; one
//! module per test file (a new file is a new `mod` line here).

mod assets;
