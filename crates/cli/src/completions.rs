//! `delayd completions SHELL`: the shell completion script, generated from
//! the same clap grammar as the parser so the two cannot drift apart.

use clap::Args;
use clap_complete::Shell;

use crate::output::outln;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the script for `args.shell`. clap_complete panics when its writer
/// fails, so the script is generated into memory and written by us (a
/// closed pipe is then an error, not a panic).
pub fn run(args: CompletionsArgs, mut command: clap::Command) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "delayd", &mut script);
    let script = String::from_utf8(script)?;
    outln!("{}", script.trim_end())?;
    Ok(())
}
