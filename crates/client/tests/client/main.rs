//! The client's integration tests, one binary (one link) for all of them:
//! one module per test file, `common` compiled once. The conformance runs
//! through `HttpBroker` need the `broker` feature.

mod common;

mod client_api;
mod client_http2;
mod client_schedules;
#[cfg(feature = "broker")]
mod http_broker_times;
#[cfg(feature = "broker")]
mod http_conformance;
