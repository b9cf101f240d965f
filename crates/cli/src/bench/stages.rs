//! Where the run's lateness came from, by the server's own account: the
//! `delayd_delivery_lateness_seconds` histogram (label `stage`: `ready`,
//! `leased`, `answered`), read from `/metrics` before and after the run
//! like the commit counter. Its buckets give each percentile as a bound
//! ("p99 at most 2.5 ms"), not a value; a server without the histogram (or
//! a `/metrics` the bench cannot read) gives no rows.

use std::collections::BTreeMap;

use delayd_client::Client;
use delayd_core::metric::DELIVERY_LATENESS_SECONDS;
use serde::Serialize;

/// Cumulative bucket counts by stage: (upper bound in seconds, count).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading(BTreeMap<String, Vec<(f64, u64)>>);

/// One stage's lateness over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageLateness {
    pub stage: String,
    /// Messages that reached the stage during the run.
    pub count: u64,
    /// Upper bounds of the buckets holding the percentiles, in ms; `None`
    /// past the last finite bucket.
    pub p50_ms_at_most: Option<f64>,
    pub p99_ms_at_most: Option<f64>,
}

pub async fn read(client: &Client) -> Option<Reading> {
    client.metrics().await.ok().map(|text| parse(&text))
}

/// The stages between two readings, in the order a message passes them.
pub fn between(before: Option<Reading>, after: Option<Reading>) -> Vec<StageLateness> {
    let (Some(before), Some(after)) = (before, after) else {
        return Vec::new();
    };
    let mut stages: Vec<StageLateness> = after
        .0
        .iter()
        .map(|(stage, buckets)| {
            let earlier = before.0.get(stage);
            let delta: Vec<(f64, u64)> = buckets
                .iter()
                .map(|&(le, count)| {
                    let was = earlier
                        .and_then(|b| b.iter().find(|(l, _)| *l == le))
                        .map_or(0, |(_, c)| *c);
                    (le, count.saturating_sub(was))
                })
                .collect();
            let count = delta.last().map_or(0, |(_, c)| *c);
            StageLateness {
                stage: stage.clone(),
                count,
                p50_ms_at_most: quantile(&delta, count, 0.50),
                p99_ms_at_most: quantile(&delta, count, 0.99),
            }
        })
        .filter(|s| s.count > 0)
        .collect();
    let order = |s: &StageLateness| match s.stage.as_str() {
        "ready" => 0,
        "leased" => 1,
        "answered" => 2,
        _ => 3,
    };
    stages.sort_by_key(order);
    stages
}

/// The upper bound (ms) of the first bucket whose cumulative count reaches
/// `q` of `count`.
fn quantile(buckets: &[(f64, u64)], count: u64, q: f64) -> Option<f64> {
    let target = ((q * count as f64).ceil() as u64).max(1);
    buckets
        .iter()
        .find(|(_, cumulative)| *cumulative >= target)
        .map(|(le, _)| *le * 1000.0)
        .filter(|ms| ms.is_finite())
}

fn parse(text: &str) -> Reading {
    let prefix = format!("{DELIVERY_LATENESS_SECONDS}_bucket{{");
    let mut stages: BTreeMap<String, Vec<(f64, u64)>> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        let (Some(stage), Some(le)) = (label("stage"), label("le")) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse::<f64>() {
                Ok(le) => le,
                Err(_) => continue,
            }
        };
        let Some(count) = value
            .split_whitespace()
            .next()
            .and_then(|c| c.parse::<f64>().ok())
        else {
            continue;
        };
        stages.entry(stage).or_default().push((le, count as u64));
    }
    for buckets in stages.values_mut() {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Reading(stages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(ready: [u64; 3], leased: [u64; 3]) -> String {
        let mut text = String::from("# TYPE delayd_delivery_lateness_seconds histogram\n");
        for (stage, counts) in [("ready", ready), ("leased", leased)] {
            for (le, count) in ["0.001", "0.005", "+Inf"].iter().zip(counts) {
                text.push_str(&format!(
                    "delayd_delivery_lateness_seconds_bucket{{stage=\"{stage}\",le=\"{le}\"}} {count}\n"
                ));
            }
        }
        text.push_str("delayd_delivery_lateness_seconds_count{stage=\"ready\"} 9\n");
        text
    }

    #[test]
    fn percentiles_are_the_bounds_of_the_run_s_own_samples() {
        let before = parse(&exposition([10, 10, 10], [0, 0, 0]));
        // The run: 100 ready, 98 within 1 ms and 2 within 5 ms; 100
        // leased, 40 within 1 ms, 59 more within 5 ms, 1 beyond.
        let after = parse(&exposition([108, 110, 110], [40, 99, 100]));
        let stages = between(Some(before), Some(after));
        assert_eq!(
            stages,
            vec![
                StageLateness {
                    stage: "ready".into(),
                    count: 100,
                    p50_ms_at_most: Some(1.0),
                    p99_ms_at_most: Some(5.0),
                },
                StageLateness {
                    stage: "leased".into(),
                    count: 100,
                    p50_ms_at_most: Some(5.0),
                    p99_ms_at_most: Some(5.0),
                },
            ]
        );
    }

    #[test]
    fn beyond_the_last_bucket_is_no_bound_and_missing_readings_give_nothing() {
        let after = parse(&exposition([0, 0, 4], [0, 0, 0]));
        let stages = between(Some(Reading::default()), Some(after.clone()));
        assert_eq!(stages.len(), 1, "a stage with no samples is left out");
        assert_eq!(stages[0].p99_ms_at_most, None);
        assert!(between(None, Some(after)).is_empty());
        assert_eq!(parse("delayd_commits_total 3\n"), Reading::default());
    }
}
