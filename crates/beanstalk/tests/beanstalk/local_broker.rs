//! Every command's tests over the durable LocalBroker.

pub(crate) use crate::common::start_local as start;

#[expect(
    clippy::duplicate_mod,
    reason = "the same command tests run once per broker, by design"
)]
#[path = "commands.rs"]
mod commands;
