//! Flow control on the command line (docs/flow.md): the `queue set` options
//! that build a queue's `flow` (`--rate 50/1s --key-concurrency 2
//! --ordered ...`), `delayd key QUEUE KEY` (a key's counts and cooldown),
//! and the text form of a queue's flow for `stats` / `queue show`.
//!
//! api.md replaces `flow` as a whole on each `PUT` that carries it, so the
//! options given are merged into the queue's current flow (read first):
//! `queue set q --concurrency 5` keeps the queue's rate, as the other
//! `queue set` options keep what they do not name.

use clap::Args;
use delayd_api::{FlowBody, FlowView, KeyInfo, QueueStats, RateBody, RateView};
use delayd_client::{Client, ClientError};

use crate::commands::format_time;
use crate::duration::{now_ms, parse_rate, Rate};
use crate::output::{outln, print_json};
use crate::{Connection, UsageError};

/// The flow options of `queue set` (flattened into its arguments).
#[derive(Debug, Args)]
pub struct FlowArgs {
    /// Deliveries of the whole queue: LIMIT/PERIOD, e.g. `50/1s`, `600/1m`.
    #[arg(long, value_parser = parse_rate, value_name = "LIMIT/PERIOD")]
    rate: Option<Rate>,
    /// Tokens of the queue's rate bucket (default 1; >= 2 for exact rates).
    #[arg(long, value_name = "N")]
    burst: Option<u32>,
    /// Deliveries of each key: LIMIT/PERIOD, e.g. `5/1s`.
    #[arg(long, value_parser = parse_rate, value_name = "LIMIT/PERIOD")]
    key_rate: Option<Rate>,
    /// Tokens of each key's rate bucket (default 1).
    #[arg(long, value_name = "N")]
    key_burst: Option<u32>,
    /// Messages of the queue leased (or pushed) at once, at most.
    #[arg(long, value_name = "N")]
    concurrency: Option<u32>,
    /// Messages of one key leased (or pushed) at once, at most.
    #[arg(long, value_name = "N")]
    key_concurrency: Option<u32>,
    /// Deliver each key's messages one at a time, in order; a failed
    /// message holds its key (`--ordered=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    ordered: Option<bool>,
    /// Deferrals in a row after which a message is dead (default 100).
    #[arg(long, value_name = "N")]
    max_deferrals: Option<u32>,
    /// Remove flow control from the queue.
    #[arg(
        long,
        conflicts_with_all = [
            "rate", "burst", "key_rate", "key_burst", "concurrency",
            "key_concurrency", "ordered", "max_deferrals",
        ]
    )]
    no_flow: bool,
}

impl FlowArgs {
    fn is_empty(&self) -> bool {
        self.rate.is_none()
            && self.burst.is_none()
            && self.key_rate.is_none()
            && self.key_burst.is_none()
            && self.concurrency.is_none()
            && self.key_concurrency.is_none()
            && self.ordered.is_none()
            && self.max_deferrals.is_none()
    }
}

/// The `flow` of the `PUT`: `Some(None)` removes it, `None` leaves it
/// alone, `Some(Some(_))` is the queue's current flow with the options
/// given applied.
pub async fn flow_change(
    client: &Client,
    queue: &str,
    args: &FlowArgs,
) -> anyhow::Result<Option<Option<FlowBody>>> {
    if args.no_flow {
        return Ok(Some(None));
    }
    if args.is_empty() {
        return Ok(None);
    }
    let current = match client.get_queue(queue).await {
        Ok(queue) => queue.config.flow,
        Err(ClientError::Api { code, .. }) if code == "queue_not_found" => None,
        Err(err) => return Err(err.into()),
    };
    Ok(Some(Some(merge(current.as_ref(), args)?)))
}

/// `current` (the queue's flow, `None` when it has none) with `args`
/// applied.
fn merge(current: Option<&FlowView>, args: &FlowArgs) -> Result<FlowBody, UsageError> {
    let mut flow = current.map(body_of).unwrap_or_default();
    flow.rate = with_burst(args.rate.map(rate_body).or(flow.rate), args.burst, "")?;
    flow.key_rate = with_burst(
        args.key_rate.map(rate_body).or(flow.key_rate),
        args.key_burst,
        "key-",
    )?;
    flow.concurrency = args.concurrency.or(flow.concurrency);
    flow.key_concurrency = args.key_concurrency.or(flow.key_concurrency);
    flow.ordered = args.ordered.or(flow.ordered);
    flow.max_deferrals = args.max_deferrals.or(flow.max_deferrals);
    if flow.ordered == Some(true) && args.ordered == Some(true) && args.key_concurrency.is_none() {
        // `ordered` implies one slot per key; a key_concurrency kept from
        // before would make the server refuse the combination.
        flow.key_concurrency = None;
    }
    Ok(flow)
}

/// `rate` with `burst` applied; `prefix` is `""` or `"key-"`, naming the
/// options in the error.
fn with_burst(
    rate: Option<RateBody>,
    burst: Option<u32>,
    prefix: &str,
) -> Result<Option<RateBody>, UsageError> {
    match (rate, burst) {
        (Some(rate), Some(burst)) => Ok(Some(rate.burst(burst))),
        (None, Some(_)) => Err(UsageError(format!(
            "--{prefix}burst needs a rate: give --{prefix}rate too (the queue has none)"
        ))),
        (rate, None) => Ok(rate),
    }
}

fn rate_body(rate: Rate) -> RateBody {
    RateBody::new(rate.limit, rate.period_ms)
}

/// The `PUT` form of a flow the server showed (defaults are sent as they
/// are: the same config).
fn body_of(view: &FlowView) -> FlowBody {
    let rate = |r: &RateView| RateBody::new(r.limit, r.period_ms).burst(r.burst);
    FlowBody {
        rate: view.rate.as_ref().map(rate),
        key_rate: view.key_rate.as_ref().map(rate),
        concurrency: view.concurrency,
        key_concurrency: view.key_concurrency,
        ordered: Some(view.ordered),
        max_deferrals: Some(view.max_deferrals),
    }
}

/// `flow` and `keys` lines of `stats` / `queue show`.
pub fn print_flow(flow: Option<&FlowView>, stats: &QueueStats) -> anyhow::Result<()> {
    let Some(flow) = flow else {
        outln!("flow       none")?;
        return Ok(());
    };
    outln!("flow       {}", describe(flow))?;
    outln!(
        "keys       {} with state, {} cooling down",
        stats.flow_keys,
        stats.cooling_keys
    )?;
    Ok(())
}

/// `rate 50/1s burst 1, key concurrency 2, ordered, max deferrals 100`.
pub fn describe(flow: &FlowView) -> String {
    let rate = |r: &RateView| {
        format!(
            "{}/{} burst {}",
            r.limit,
            format_period(r.period_ms),
            r.burst
        )
    };
    let mut parts = Vec::new();
    if let Some(r) = &flow.rate {
        parts.push(format!("rate {}", rate(r)));
    }
    if let Some(r) = &flow.key_rate {
        parts.push(format!("key rate {}", rate(r)));
    }
    if let Some(n) = flow.concurrency {
        parts.push(format!("concurrency {n}"));
    }
    if let Some(n) = flow.key_concurrency {
        parts.push(format!("key concurrency {n}"));
    }
    if flow.ordered {
        parts.push("ordered".into());
    }
    parts.push(format!("max deferrals {}", flow.max_deferrals));
    parts.join(", ")
}

/// The largest unit that divides the period: `1s`, `1m`, `250ms`, `1d`.
fn format_period(ms: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ];
    UNITS
        .iter()
        .find(|(_, size)| ms.is_multiple_of(*size) && ms > 0)
        .map_or_else(
            || format!("{ms}ms"),
            |(unit, size)| format!("{}{unit}", ms / size),
        )
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    /// The flow key.
    key: String,
}

/// `delayd key QUEUE KEY`: the key's live messages by state and its
/// cooldown (zeros for a key with no live message).
pub async fn key(args: KeyArgs) -> anyhow::Result<()> {
    let info = args.conn.client()?.key_info(&args.queue, &args.key).await?;
    if args.conn.json {
        return print_json(&info);
    }
    print_key(&info, now_ms())
}

fn print_key(info: &KeyInfo, now: u64) -> anyhow::Result<()> {
    outln!("key        {}", info.key)?;
    outln!(
        "scheduled  {}\nready      {}\nleased     {}\ndead       {}",
        info.scheduled,
        info.ready,
        info.leased,
        info.dead
    )?;
    match info.cooling_until {
        Some(until) if until > now => outln!(
            "cooling    until {} (in {})",
            format_time(until),
            humantime::format_duration(std::time::Duration::from_millis(
                (until - now) / 1000 * 1000
            ))
        )?,
        _ => outln!("cooling    no")?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> FlowArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            flow: FlowArgs,
        }
        Cli::try_parse_from(std::iter::once("x").chain(line.iter().copied()))
            .expect("parses")
            .flow
    }

    fn view() -> FlowView {
        FlowView {
            rate: Some(RateView {
                limit: 50,
                period_ms: 1000,
                burst: 3,
            }),
            key_rate: None,
            concurrency: None,
            key_concurrency: Some(2),
            ordered: false,
            max_deferrals: 100,
        }
    }

    #[test]
    fn options_given_are_merged_into_the_current_flow() {
        let merged = merge(Some(&view()), &args(&["--concurrency", "5"])).unwrap();
        assert_eq!(
            merged.rate,
            Some(RateBody::new(50, 1000).burst(3)),
            "rate kept"
        );
        assert_eq!(
            (merged.concurrency, merged.key_concurrency),
            (Some(5), Some(2))
        );

        let merged = merge(Some(&view()), &args(&["--burst", "7"])).unwrap();
        assert_eq!(
            merged.rate,
            Some(RateBody::new(50, 1000).burst(7)),
            "burst of the kept rate"
        );

        let merged = merge(
            None,
            &args(&["--rate", "600/1m", "--burst", "2", "--ordered"]),
        )
        .unwrap();
        assert_eq!(merged.rate, Some(RateBody::new(600, 60_000).burst(2)));
        assert_eq!(merged.ordered, Some(true));
    }

    #[test]
    fn ordered_drops_a_kept_key_concurrency() {
        let merged = merge(Some(&view()), &args(&["--ordered"])).unwrap();
        assert_eq!((merged.ordered, merged.key_concurrency), (Some(true), None));
        let off = merge(Some(&view()), &args(&["--ordered=false"])).unwrap();
        assert_eq!((off.ordered, off.key_concurrency), (Some(false), Some(2)));
    }

    #[test]
    fn a_burst_without_a_rate_is_a_usage_error() {
        let err = merge(None, &args(&["--key-burst", "2"])).unwrap_err();
        assert!(err.0.contains("--key-rate"), "{}", err.0);
    }

    #[test]
    fn flow_is_described_in_one_line() {
        assert_eq!(
            describe(&view()),
            "rate 50/1s burst 3, key concurrency 2, max deferrals 100"
        );
        assert_eq!(format_period(250), "250ms");
        assert_eq!(format_period(3_600_000), "1h");
        assert_eq!(format_period(90_000), "90s");
    }
}
