//! The default connection budget of `delayd serve`, from the process's
//! file-descriptor limit (the soft `RLIMIT_NOFILE`, read from
//! `/proc/self/limits`, so no unsafe code or libc call is needed).
//!
//! Each client connection is one descriptor. The rest of the process needs
//! some too: the store's files (segments, WAL, the directory), Redis
//! connections, the push dispatcher's outgoing connections, the listeners,
//! the runtime's epoll and eventfds, stdio. Those get an eighth of the limit
//! and at least 128, but never more than half, so a connection flood can
//! never take the descriptors the store needs to keep committing.

/// Assumed when the limit cannot be read (no /proc): the usual soft limit.
const ASSUMED_FD_LIMIT: u64 = 1024;
const MIN_HEADROOM: u64 = 128;

/// The process's soft limit on open files, when it can be read.
pub fn soft_fd_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_soft_limit(&limits)
}

/// `Max open files  <soft>  <hard>  files`; `unlimited` counts as no limit
/// worth budgeting against (`u64::MAX`).
fn parse_soft_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

/// Client connections that fit in `fd_limit` beside the rest of the process.
pub fn budget(fd_limit: u64) -> usize {
    let headroom = (fd_limit / 8).max(MIN_HEADROOM).min(fd_limit / 2);
    let budget = fd_limit.saturating_sub(headroom).max(1);
    usize::try_from(budget).unwrap_or(usize::MAX)
}

/// `--max-connections` when not given.
pub fn default_max_connections() -> usize {
    budget(soft_fd_limit().unwrap_or(ASSUMED_FD_LIMIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            20000                40000                files     \n";
        assert_eq!(parse_soft_limit(limits), Some(20_000));
        assert_eq!(
            parse_soft_limit("Max open files unlimited unlimited files"),
            Some(u64::MAX)
        );
        assert_eq!(parse_soft_limit("Max processes 10 10"), None);
        assert!(soft_fd_limit().is_some(), "this test runs on Linux");
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
