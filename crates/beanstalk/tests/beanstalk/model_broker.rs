//! Every command's tests over the reference ModelBroker.

pub(crate) use crate::common::start;

#[path = "commands.rs"]
mod commands;
