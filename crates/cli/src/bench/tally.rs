//! The bench's accounting: which sequence numbers were enqueued and
//! delivered, and how late. Producers and consumers share one [`Tally`]
//! behind a mutex; every update is a few array writes, so the lock is never
//! held across an await and never contended for long.

use hdrhistogram::Histogram;

use crate::bench::report::Lateness;

/// Every bench payload starts with this and the message's sequence number,
/// so the consumer can tell losses and duplicates apart from foreign
/// messages that happen to sit in the same queue.
const PAYLOAD_PREFIX: &str = "delayd-bench:";

/// The payload of message `seq`: the prefix, the number, a `:`, then `x`
/// padding up to `size` bytes (longer when `size` is too small to hold the
/// number, since the number is what the bench needs).
pub fn payload(seq: u64, size: usize) -> String {
    let mut text = format!("{PAYLOAD_PREFIX}{seq}:");
    if text.len() < size {
        text.extend(std::iter::repeat_n('x', size - text.len()));
    }
    text
}

/// The sequence number in a bench payload, `None` for anything else.
pub fn parse_seq(payload: &[u8]) -> Option<u64> {
    let rest = payload.strip_prefix(PAYLOAD_PREFIX.as_bytes())?;
    let end = rest.iter().position(|&b| b == b':')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// What a consumer saw of one delivery.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub seq: u64,
    pub attempt: u32,
    pub deliver_at: u64,
    /// Wall-clock epoch ms when the lease answer arrived.
    pub received_at: u64,
}

#[derive(Debug)]
pub struct Tally {
    enqueued: Vec<bool>,
    deliveries: Vec<u32>,
    pub enqueued_count: u64,
    pub enqueue_errors: u64,
    /// Distinct enqueued messages delivered at least once.
    pub delivered_unique: u64,
    /// A first delivery (`attempt == 1`) of a message already delivered.
    pub duplicates: u64,
    /// Deliveries with `attempt > 1` (an expired lease or a nack upstream).
    pub redeliveries: u64,
    /// Received before their `deliver_at`: a broken promise, must be 0.
    pub early: u64,
    /// Deliveries whose payload is not a bench payload of this run.
    pub foreign: u64,
    pub ack_errors: u64,
    pub lease_errors: u64,
    /// Latest `deliver_at` of any enqueued message.
    pub last_due_ms: u64,
    /// Receive time of the latest delivery.
    pub last_received_ms: u64,
    /// Enqueued and not delivered yet (kept as a count so that checking
    /// for completion after every batch costs nothing).
    pending: u64,
    lateness: Histogram<u64>,
}

impl Tally {
    pub fn new(messages: u64) -> anyhow::Result<Self> {
        let slots = usize::try_from(messages)?;
        Ok(Self {
            enqueued: vec![false; slots],
            deliveries: vec![0; slots],
            enqueued_count: 0,
            enqueue_errors: 0,
            delivered_unique: 0,
            duplicates: 0,
            redeliveries: 0,
            early: 0,
            foreign: 0,
            ack_errors: 0,
            lease_errors: 0,
            last_due_ms: 0,
            last_received_ms: 0,
            pending: 0,
            // Three significant digits; it grows as needed.
            lateness: Histogram::new(3)?,
        })
    }

    pub fn enqueued(&mut self, seq: u64, deliver_at: u64) {
        let Some(slot) = slot(&mut self.enqueued, seq) else {
            return;
        };
        if !*slot {
            *slot = true;
            self.enqueued_count += 1;
            if self.deliveries.get(seq as usize) == Some(&0) {
                self.pending += 1;
            }
        }
        self.last_due_ms = self.last_due_ms.max(deliver_at);
    }

    pub fn received(&mut self, r: Received) {
        self.last_received_ms = self.last_received_ms.max(r.received_at);
        let Some(count) = slot(&mut self.deliveries, r.seq) else {
            self.foreign += 1;
            return;
        };
        *count += 1;
        if r.attempt > 1 {
            self.redeliveries += 1;
        } else if *count > 1 {
            self.duplicates += 1;
        }
        if *count == 1 {
            self.delivered_unique += 1;
            if self.enqueued.get(r.seq as usize) == Some(&true) {
                self.pending -= 1;
            }
        }
        if r.received_at < r.deliver_at {
            self.early += 1;
        } else {
            // `record` grows the histogram as needed (`saturating_record`
            // would clamp to its current range); it fails only past u64
            // limits, where clamping is the right answer.
            let late = r.received_at - r.deliver_at;
            if self.lateness.record(late).is_err() {
                self.lateness.saturating_record(late);
            }
        }
    }

    /// Enqueued messages never delivered.
    pub fn lost(&self) -> u64 {
        self.pending
    }

    /// Whether every enqueued message has been delivered.
    pub fn complete(&self) -> bool {
        self.pending == 0
    }

    pub fn lateness(&self) -> Lateness {
        let h = &self.lateness;
        Lateness {
            samples: h.len(),
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

fn slot<T>(slots: &mut [T], seq: u64) -> Option<&mut T> {
    slots.get_mut(usize::try_from(seq).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn got(seq: u64, attempt: u32, deliver_at: u64, received_at: u64) -> Received {
        Received {
            seq,
            attempt,
            deliver_at,
            received_at,
        }
    }

    #[test]
    fn payload_round_trips_and_pads() {
        let p = payload(42, 100);
        assert_eq!(p.len(), 100);
        assert_eq!(parse_seq(p.as_bytes()), Some(42));
        assert_eq!(parse_seq(payload(7, 0).as_bytes()), Some(7));
        assert_eq!(parse_seq(b"hello"), None);
        assert_eq!(parse_seq(b"delayd-bench:x:"), None);
    }

    #[test]
    fn counts_losses_duplicates_redeliveries_and_early() {
        let mut t = Tally::new(4).unwrap();
        for seq in 0..4 {
            t.enqueued(seq, 1_000);
        }
        t.received(got(0, 1, 1_000, 1_005));
        t.received(got(0, 1, 1_000, 1_006)); // duplicate
        t.received(got(1, 1, 1_000, 999)); // early
        t.received(got(1, 2, 1_000, 1_200)); // redelivery
        t.received(got(9, 1, 1_000, 1_000)); // not ours
        assert_eq!(t.delivered_unique, 2);
        assert_eq!(t.duplicates, 1);
        assert_eq!(t.redeliveries, 1);
        assert_eq!(t.early, 1);
        assert_eq!(t.foreign, 1);
        assert_eq!(t.lost(), 2);
        assert!(!t.complete());
        assert_eq!(t.lateness().max, 200);
        t.received(got(1, 3, 1_000, 1_000 + 3_600_000));
        let max = t.lateness().max;
        assert!(max.abs_diff(3_600_000) < 3_600, "clamped or lost: {max}");
        t.received(got(2, 1, 1_000, 1_000));
        t.received(got(3, 1, 1_000, 1_000));
        assert!(t.complete());
    }
}
