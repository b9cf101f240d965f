//! The default connection budget of `delayd serve`, from the process's
//! file-descriptor limit (the soft `RLIMIT_NOFILE`, through rustix's safe
//! `getrlimit`).
//!
//! Each client connection is one descriptor. The rest of the process needs
//! some too: the store's files (segments, WAL, the directory), Redis
//! connections, the push dispatcher's outgoing connections, the listeners,
//! the runtime's epoll and eventfds, stdio. Those get an eighth of the limit
//! and at least 128, but never more than half, so a connection flood can
//! never take the descriptors the store needs to keep committing.

use rustix::process::{getrlimit, Resource};

const MIN_HEADROOM: u64 = 128;

/// The process's soft limit on open files; `unlimited` counts as no limit
/// worth budgeting against (`u64::MAX`).
pub fn soft_fd_limit() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Client connections that fit in `fd_limit` beside the rest of the process.
pub fn budget(fd_limit: u64) -> usize {
    let headroom = (fd_limit / 8).max(MIN_HEADROOM).min(fd_limit / 2);
    let budget = fd_limit.saturating_sub(headroom).max(1);
    usize::try_from(budget).unwrap_or(usize::MAX)
}

/// `--max-connections` when not given.
pub fn default_max_connections() -> usize {
    budget(soft_fd_limit())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same number the kernel reports in /proc/self/limits (the source
    /// this replaced), so the call reads the right resource and field.
    #[test]
    fn reads_the_soft_limit() {
        let limits = std::fs::read_to_string("/proc/self/limits").expect("Linux");
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("an open-files line");
        let soft = line["Max open files".len()..].split_whitespace().next();
        let expected = match soft {
            Some("unlimited") => u64::MAX,
            other => other.and_then(|n| n.parse().ok()).expect("a number"),
        };
        assert_eq!(soft_fd_limit(), expected);
    }

    #[test]
    fn budget_leaves_headroom_for_the_store() {
        assert_eq!(budget(20_000), 17_500);
        assert_eq!(budget(1024), 896);
        assert_eq!(budget(256), 128);
        assert_eq!(budget(100), 50);
        assert_eq!(budget(1), 1);
        assert!(budget(u64::MAX) > 1 << 40);
    }
}
