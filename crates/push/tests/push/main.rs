//! Black-box tests of push delivery: a real dispatcher, a broker, and real
//! HTTP receivers on 127.0.0.1:0. One file per scenario.

mod common;

mod allowlist;
mod concurrency;
mod dead_letter;
mod flow_pushback;
mod happy_path;
mod history;
mod lifecycle;
mod push_metrics;
mod retries;
