//! Black-box tests of the beanstalkd listener over TCP. One test binary,
//! so the helpers in `common` are compiled once. `commands.rs` runs twice:
//! over the reference ModelBroker and over the durable LocalBroker.

mod common;
mod errors;
mod local;
mod local_broker;
mod model_broker;
mod pipelined;
mod reserve_due_at_deadline;
mod session_bytes;
