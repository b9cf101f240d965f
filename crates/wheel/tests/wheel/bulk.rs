//! Large deterministic runs against a `BTreeMap<(deadline, seq)>` model: big
//! slots (batched collection, several lists per slot, counting sort) with
//! many equal deadlines, cancels and reschedules mixed in, for tick 1 and a
//! coarse tick. The proptest in `model.rs` checks every step on small runs;
//! this one reaches slot sizes the proptest never builds.
use std::collections::{BTreeMap, HashMap};

use delayd_wheel::{Handle, Wheel, WheelConfig};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fire_time(cfg: WheelConfig, deadline: u64) -> u64 {
    let off = deadline.saturating_sub(cfg.start);
    cfg.start + off.div_ceil(cfg.tick) * cfg.tick
}

struct Sim {
    cfg: WheelConfig,
    wheel: Wheel<u64>,
    /// (deadline, seq) -> key
    model: BTreeMap<(u64, u64), u64>,
    /// key -> (handle, deadline, seq)
    live: HashMap<u64, (Handle, u64, u64)>,
    keys: Vec<u64>,
    seq: u64,
    next_key: u64,
}

impl Sim {
    fn insert(&mut self, deadline: u64) {
        let key = self.next_key;
        self.next_key += 1;
        let h = self.wheel.insert(deadline, key);
        self.model.insert((deadline, self.seq), key);
        self.live.insert(key, (h, deadline, self.seq));
        self.keys.push(key);
        self.seq += 1;
    }

    fn check_fired(&mut self, deadline: u64, value: u64, now: u64, step: usize) {
        let (&(d, s), &key) = self.model.iter().next().expect("model non-empty");
        assert!(fire_time(self.cfg, d) <= now, "model front not due");
        assert_eq!((deadline, value), (d, key), "step {step}");
        self.model.remove(&(d, s));
        self.live.remove(&key);
    }
}

fn run(cfg: WheelConfig, seed: u64, n: usize, span: u64, ops: usize) {
    let mut rng = Rng(seed);
    let mut sim = Sim {
        cfg,
        wheel: Wheel::with_config(cfg),
        model: BTreeMap::new(),
        live: HashMap::new(),
        keys: Vec::new(),
        seq: 0,
        next_key: 0,
    };
    let mut now = cfg.start;
    for _ in 0..n {
        // Coarse deadlines so that many entries share one.
        sim.insert(now + rng.below(span) / 7 * 7);
    }
    for step in 0..ops {
        match rng.below(10) {
            0..=3 => sim.insert(now + rng.below(span) / 5 * 5),
            4 | 5 if !sim.keys.is_empty() => {
                let i = rng.below(sim.keys.len() as u64) as usize;
                let key = sim.keys.swap_remove(i);
                if let Some((h, d, s)) = sim.live.remove(&key) {
                    assert_eq!(sim.wheel.cancel(h), Some(key), "step {step}");
                    sim.model.remove(&(d, s));
                }
            }
            6 if !sim.keys.is_empty() => {
                let key = sim.keys[rng.below(sim.keys.len() as u64) as usize];
                if let Some((h, d, s)) = sim.live.get(&key).copied() {
                    let nd = now + rng.below(span) / 3 * 3;
                    sim.wheel.reschedule(h, nd).expect("live");
                    sim.model.remove(&(d, s));
                    sim.model.insert((nd, sim.seq), key);
                    sim.live.insert(key, (h, nd, sim.seq));
                    sim.seq += 1;
                }
            }
            _ => {
                now += rng.below(span / 8);
                // Poll part of what is due, leaving the rest for later, so
                // cancels and inserts hit a non-empty ready queue too.
                for _ in 0..rng.below(2000) {
                    let Some(e) = sim.wheel.poll_expired(now) else {
                        break;
                    };
                    sim.check_fired(e.deadline, e.value, now, step);
                }
            }
        }
    }
    while let Some(e) = sim.wheel.poll_expired(u64::MAX) {
        sim.check_fired(e.deadline, e.value, u64::MAX, ops);
    }
    assert!(sim.model.is_empty() && sim.wheel.is_empty());
}

#[test]
fn bulk_tick_1() {
    for seed in 0..4 {
        run(
            WheelConfig { tick: 1, start: 0 },
            seed,
            50_000,
            300_000,
            20_000,
        );
        run(
            WheelConfig {
                tick: 1,
                start: 12_345,
            },
            seed,
            20_000,
            5_000,
            20_000,
        );
    }
}

#[test]
fn bulk_coarse_tick() {
    for seed in 0..4 {
        run(
            WheelConfig { tick: 10, start: 3 },
            seed,
            50_000,
            300_000,
            20_000,
        );
        run(
            WheelConfig { tick: 7, start: 0 },
            seed,
            20_000,
            20_000,
            20_000,
        );
    }
}
