//! The differential test of the flow gate's Lua port (`lua/flow.lua`):
//! the same random inputs go to `delayd_core::flow` (`Bucket::ready_at`,
//! `Bucket::take`, `FlowConfig::admit_queue`, `GateState::is_idle` and
//! `idle_at`) and to the library's
//! `flow_eval` function, and every answer must be the same. The seed is
//! printed, and fixed unless `FLOW_LUA_SEED` sets it.

use crate::support::{broker, shared_single, unique_prefix};
use delayd_core::flow::Bucket;
use delayd_core::{FlowConfig, GateState, Hold, Rate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Cases per run.
const CASES: usize = 20_000;
/// Cases per function call.
const CHUNK: usize = 500;

struct Case {
    rate: Option<Rate>,
    slots: Option<u32>,
    gate: GateState,
    now: u64,
}

fn random_case(rng: &mut StdRng) -> Case {
    // Wall times from 2020 to ~2090 (the port holds below 2^53 µs, the
    // year 2255).
    let now = rng.random_range(1_577_836_800_000u64..3_200_000_000_000);
    let rate = rng.random_bool(0.8).then(|| Rate {
        limit: match rng.random_range(0..4) {
            0 => 1,
            1 => 1_000_000,
            _ => rng.random_range(1..=1_000_000),
        },
        period_ms: match rng.random_range(0..4) {
            0 => 1,
            1 => 86_400_000,
            _ => rng.random_range(1..=86_400_000),
        },
        burst: match rng.random_range(0..5) {
            0 => 1,
            1 => u32::MAX,
            _ => rng.random_range(1..=1_000),
        },
    });
    let interval = rate.map_or(1_000, |r| r.interval_us());
    let tat_us = match rng.random_range(0..5) {
        0 => 0,
        1 => now * 1_000,
        2 => (now * 1_000).saturating_sub(rng.random_range(0..interval.saturating_mul(5).max(1))),
        _ => now * 1_000 + rng.random_range(0..interval.saturating_mul(20).clamp(1, 1 << 40)),
    };
    let slots = rng.random_bool(0.5).then(|| rng.random_range(1..=10));
    let cooling_until = match rng.random_range(0..4) {
        0 => 0,
        // The boundary: a cooldown that ends now holds nothing.
        1 => now,
        _ => now - 5_000 + rng.random_range(0..10_000),
    };
    Case {
        rate,
        slots,
        gate: GateState {
            bucket: Bucket { tat_us },
            leased: rng.random_range(0..=12),
            cooling_until,
        },
        now,
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn lua_args(c: &Case) -> Vec<String> {
    vec![
        c.gate.bucket.tat_us.to_string(),
        opt(c.rate.map(|r| r.interval_us())),
        opt(c.rate.map(|r| r.burst)),
        opt(c.slots),
        c.gate.leased.to_string(),
        c.gate.cooling_until.to_string(),
        c.now.to_string(),
    ]
}

/// Answers per case.
const ANSWERS: usize = 6;

/// Rust's answers in `flow_eval`'s shape: reason, until, ready_at, TAT
/// after a take (only where a token is there: `take` needs one), and the
/// idle rule for the state without its leases: idle ("1" or ""), and when
/// it will be ("" when idle).
fn rust_answer(c: &Case) -> [String; ANSWERS] {
    let flow = FlowConfig {
        rate: c.rate,
        concurrency: c.slots,
        ..FlowConfig::default()
    };
    let (reason, until) = match flow.admit_queue(&c.gate, c.now) {
        Ok(()) => (String::new(), String::new()),
        Err(hold @ Hold::Concurrency) => (hold.reason().to_owned(), String::new()),
        Err(hold) => (hold.reason().to_owned(), opt(hold.until())),
    };
    let (ready_at, taken) = match &c.rate {
        Some(rate) => {
            let mut bucket = c.gate.bucket;
            let taken = bucket.has_token(rate, c.now).then(|| {
                bucket.take(rate, c.now);
                bucket.tat_us
            });
            (c.gate.bucket.ready_at(rate, c.now).to_string(), opt(taken))
        }
        None => (String::new(), String::new()),
    };
    let unleased = GateState {
        leased: 0,
        ..c.gate
    };
    let (idle, idle_at) = match unleased.is_idle(c.now) {
        true => ("1".to_owned(), String::new()),
        false => (String::new(), unleased.idle_at().to_string()),
    };
    [reason, until, ready_at, taken, idle, idle_at]
}

#[tokio::test]
async fn lua_gate_answers_as_the_rust_gate() {
    let seed = std::env::var("FLOW_LUA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f10e_u64);
    println!("FLOW_LUA_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let node = broker(vec![shared_single().url()], 1, &unique_prefix()).await;
    let cases: Vec<Case> = (0..CASES).map(|_| random_case(&mut rng)).collect();
    let (mut held, mut admitted, mut idle) = (0, 0, 0);
    for chunk in cases.chunks(CHUNK) {
        let args = chunk.iter().flat_map(lua_args).collect();
        let lua = node.flow_eval_lua(args).await.expect("flow_eval");
        assert_eq!(lua.len(), chunk.len() * ANSWERS, "one answer per case");
        for (case, got) in chunk.iter().zip(lua.chunks(ANSWERS)) {
            let want = rust_answer(case);
            let taken_matches = want[3].is_empty() || got[3] == want[3];
            assert!(
                got[..3] == want[..3] && taken_matches && got[4..] == want[4..],
                "seed {seed}: Lua {got:?} != Rust {want:?} for rate {:?} slots {:?} {:?} now {}",
                case.rate,
                case.slots,
                case.gate,
                case.now
            );
            if want[0].is_empty() {
                admitted += 1;
            } else {
                held += 1;
            }
            idle += usize::from(!want[4].is_empty());
        }
    }
    // The inputs must exercise every verdict, else the test proves little.
    assert!(
        held > CASES / 10 && admitted > CASES / 10,
        "held {held}, admitted {admitted}"
    );
    assert!(
        idle > CASES / 10 && CASES - idle > CASES / 10,
        "idle {idle} of {CASES}"
    );
}
