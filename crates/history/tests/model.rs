//! The reference model's histories pass; the same histories broken one
//! way are flagged (proptest over seeds).

use delayd_history::check;
use delayd_history::model::Model;
use proptest::prelude::*;

fn report_of(seed: u64, ops: usize) -> delayd_history::Report {
    check(&Model::new(seed).run(ops))
}

#[test]
fn a_long_model_history_passes() {
    for seed in 0..20 {
        let report = report_of(seed, 5_000);
        assert!(report.ok(), "seed {seed}: {report}");
        assert!(report.redeliveries > 0, "seed {seed}: {report}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn model_histories_pass(seed in any::<u64>(), ops in 10usize..2_000) {
        let report = report_of(seed, ops);
        prop_assert!(report.ok(), "seed {}: {}", seed, report);
    }
}

/// Model histories broken one way: the checker flags each.
mod broken {
    use delayd_history::model::Model;
    use delayd_history::{check, History, Op, Outcome, Property};
    use proptest::prelude::*;

    fn history(seed: u64) -> History {
        Model::new(seed).run(1_500)
    }

    /// From each crash's start to the end of the restart after it.
    fn down_spans(h: &History) -> Vec<(u64, u64)> {
        let mut spans = Vec::new();
        let mut from = None;
        for op in &h.ops {
            match op {
                Op::Crash(c) => from = Some(c.invoke),
                Op::Restart(r) => spans.extend(from.take().map(|a| (a, r.complete))),
                _ => {}
            }
        }
        spans.extend(from.map(|a| (a, u64::MAX)));
        spans
    }

    /// The lease line of `lease_id`.
    fn lease_attempt(h: &History, lease_id: &str) -> Option<u32> {
        h.ops.iter().find_map(|op| match op {
            Op::Lease(l) if l.lease_id == lease_id => Some(l.attempt),
            _ => None,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// An accepted ack taken out: the message was never read live at
        /// the stop, so it is lost.
        #[test]
        fn an_ack_dropped_is_a_loss(seed in any::<u64>(), pick in any::<usize>()) {
            let mut h = history(seed);
            let acks: Vec<usize> = h.ops.iter().enumerate().filter_map(|(n, op)| match op {
                Op::Ack(a) if a.outcome == Outcome::Ok && a.queue != "plain"
                    && lease_attempt(&h, &a.lease_id).is_some_and(|at| at < 4) => Some(n),
                _ => None,
            }).collect();
            prop_assume!(!acks.is_empty());
            h.ops.remove(acks[pick % acks.len()]);
            let report = check(&h);
            prop_assert!(report.has(Property::Lost), "{}", report);
        }

        /// A delivery's attempt raised by two: no crash explains that.
        #[test]
        fn an_attempt_off_by_two_is_flagged(seed in any::<u64>(), pick in any::<usize>()) {
            let mut h = history(seed);
            let leases: Vec<usize> = h.ops.iter().enumerate()
                .filter_map(|(n, op)| matches!(op, Op::Lease(_)).then_some(n))
                .collect();
            prop_assume!(!leases.is_empty());
            if let Op::Lease(l) = &mut h.ops[leases[pick % leases.len()]] {
                l.attempt += 2;
            }
            let report = check(&h);
            prop_assert!(report.has(Property::Attempts) || report.has(Property::Deferral), "{}", report);
        }

        /// One delivery of a flow queue answered again as a second lease
        /// of the same message in the same call: a duplicate.
        #[test]
        fn a_delivery_repeated_in_its_call_is_a_duplicate(seed in any::<u64>(), pick in any::<usize>()) {
            let mut h = history(seed);
            // A lease call overlapping a crash may be followed by a true
            // redelivery in the same window: its copy proves nothing.
            let down = down_spans(&h);
            let leases: Vec<usize> = h.ops.iter().enumerate()
                .filter_map(|(n, op)| match op {
                    Op::Lease(l) if !down.iter().any(|&(a, b)| l.invoke <= b && l.complete >= a) => Some(n),
                    _ => None,
                })
                .collect();
            prop_assume!(!leases.is_empty());
            let Op::Lease(mut copy) = h.ops[leases[pick % leases.len()]].clone() else {
                unreachable!("a lease line");
            };
            copy.lease_id.push_str("-again");
            h.ops.push(Op::Lease(copy));
            let report = check(&h);
            // A nack in the same millisecond as the answer may have come
            // first: then the copy is early and its attempt wrong instead.
            prop_assert!(
                report.has(Property::Duplicate) || report.has(Property::Early) || report.has(Property::Attempts),
                "{}", report
            );
        }
    }
}
