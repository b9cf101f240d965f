//! The wheel's integration tests, one binary (one link) for all of them;
//! one module per former test file.

mod api;
mod bulk;
mod model;
