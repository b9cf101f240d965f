//! The beanstalk crate's integration tests, one binary (one link) for all
//! of them, so the helpers in `common` are compiled once: black-box tests
//! of the listener over TCP, the parser's and the name grammar's property
//! tests, the wire fuzzer and the greenstalk interop run. `commands.rs`
//! runs twice: over the reference ModelBroker and over the durable
//! LocalBroker.

mod common;
mod errors;
mod failed_commit;
mod flow_rate;
mod history;
mod interop_greenstalk;
mod local;
mod local_broker;
mod model_broker;
mod name_grammar;
mod parser_props;
mod pipelined;
mod reserve_due_at_deadline;
mod session_bytes;
mod wire_fuzz;
