//! The server's storage commits over a run, read from `/metrics` before and
//! after it (`delayd_commits_total`). Commits per second beside the message
//! rates say how many messages each fsync carried; a server whose
//! `/metrics` cannot be read (a token the bench lacks) or has no such
//! counter (a Redis store) gives no figure, and the bench runs anyway.

use std::time::Instant;

use delayd_client::Client;
use delayd_core::metric::COMMITS_TOTAL;

/// One reading of the counter.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// `None`: `/metrics` answered but without the counter (none yet, or a
    /// store that does not commit).
    commits: Option<u64>,
    at: Instant,
}

/// The counter now; `None` when `/metrics` could not be read.
pub async fn read(client: &Client) -> Option<Reading> {
    let text = client.metrics().await.ok()?;
    Some(Reading {
        commits: parse(&text),
        at: Instant::now(),
    })
}

/// Commits between two readings and their rate per second; `None` unless
/// both readings worked and the later one has the counter (a counter that
/// first appears during the run started at 0).
pub fn between(before: Option<Reading>, after: Option<Reading>) -> Option<(u64, f64)> {
    let (before, after) = (before?, after?);
    let commits = after.commits?.saturating_sub(before.commits.unwrap_or(0));
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let rate = if seconds > 0.0 {
        commits as f64 / seconds
    } else {
        0.0
    };
    Some((commits, rate))
}

/// The sum of `delayd_commits_total` over all its label sets in a
/// Prometheus text exposition; `None` when no sample of it is there.
fn parse(text: &str) -> Option<u64> {
    let mut total = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(COMMITS_TOTAL) else {
            continue;
        };
        // `delayd_commits_total 12` or `delayd_commits_total{a="b"} 12`,
        // not another metric that merely starts with the same name.
        let value = match rest.chars().next() {
            Some(' ') => rest,
            Some('{') => rest.rsplit_once('}').map_or("", |(_, value)| value),
            _ => continue,
        };
        // Counters are exposed as floats by some exporters (`12.0`).
        let Some(count) = value.split_whitespace().next() else {
            continue;
        };
        if let Ok(count) = count.parse::<f64>() {
            *total.get_or_insert(0) += count as u64;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_counter_over_labels_and_ignores_lookalikes() {
        let text = "# TYPE delayd_commits_total counter\n\
                    delayd_commits_total 7\n\
                    delayd_commits_total_extra 100\n\
                    delayd_commit_seconds_sum 3.5\n\
                    delayd_commits_total{store=\"b\"} 5.0 1700000000\n";
        assert_eq!(parse(text), Some(12));
        assert_eq!(parse("delayd_http_connections 3\n"), None);
    }

    #[test]
    fn a_missing_reading_gives_no_figure() {
        let at = Instant::now();
        let reading = |commits| Some(Reading { commits, at });
        assert_eq!(between(None, reading(Some(3))), None);
        assert_eq!(between(reading(Some(3)), None), None);
        assert_eq!(between(reading(None), reading(None)), None);
        let later = Reading {
            commits: Some(10),
            at: at + std::time::Duration::from_secs(2),
        };
        assert_eq!(between(reading(None), Some(later)), Some((10, 5.0)));
        assert_eq!(between(reading(Some(4)), Some(later)), Some((6, 3.0)));
    }
}
