//! Logs of `delayd serve` on stderr: text for people or JSON lines for a
//! log collector, filtered by `RUST_LOG` when it is set.
//!
//! Without `RUST_LOG` the filter is `warn` for dependencies and `info` for
//! delayd's own crates: the storage engine and the HTTP stack log routine
//! start-up steps at `info` (lsm-tree prints one line per partition) that
//! would bury delayd's own "listening" and "store open" lines.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    // One human-readable line per event.
    #[default]
    Text,
    // One JSON object per event (tracing-subscriber's JSON format).
    Json,
}

/// The library targets of the workspace's crates (`delayd` is the binary).
/// Kept explicit rather than relying on EnvFilter's prefix matching, so a
/// dependency whose name happens to start with `delayd` stays at `warn`.
const OWN_TARGETS: &[&str] = &[
    "delayd",
    "delayd_beanstalk",
    "delayd_client",
    "delayd_core",
    "delayd_local",
    "delayd_push",
    "delayd_redis",
    "delayd_server",
    "delayd_ui",
    "delayd_wheel",
];

/// The filter used when `RUST_LOG` is unset: `warn,delayd=info,...`.
pub fn default_filter() -> String {
    std::iter::once("warn".to_owned())
        .chain(OWN_TARGETS.iter().map(|target| format!("{target}=info")))
        .collect::<Vec<_>>()
        .join(",")
}

/// `RUST_LOG` when set and valid; a bad one is reported (a silently
/// ignored filter would look like a logging bug) and the default used.
fn filter() -> EnvFilter {
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|err| {
            eprintln!("delayd: ignoring RUST_LOG={spec:?} ({err}); using the default filter");
            EnvFilter::new(default_filter())
        }),
        _ => EnvFilter::new(default_filter()),
    }
}

/// Installs the global subscriber writing to stderr.
pub fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr);
    // A second initialisation (tests) is harmless: keep the first.
    let _ = match format {
        // Colour codes only for a person at a terminal, not in log files.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_filter_parses_and_lists_own_crates_at_info() {
        let filter = default_filter();
        assert!(filter.starts_with("warn,"), "{filter}");
        assert!(filter.contains("delayd_local=info"), "{filter}");
        assert!(EnvFilter::try_new(&filter).is_ok(), "{filter}");
    }
}
