//! Admission (seed 004, spec/decisions.md "Admission"): our side of the wire. A
//! provider meters each key on requests and tokens per minute; the router keeps its
//! own token buckets, sized just under the contract, and spends them *before* any
//! upstream call, so that a refusal costs nothing and can be seen, ordered and shed.
//!
//! Everything here is pure arithmetic on a bucket and `now`: no lock, no clock read.
//! Where the buckets live (one process, or a fleet's shared store) is `store::buckets`.

use crate::core::clock::UnixMs;
use crate::core::vocab::Priority;
use serde::{Deserialize, Serialize};

/// What a bucket meters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Requests per minute.
    Rpm,
    /// Tokens per minute, input and output together.
    Tpm,
    /// Input tokens per minute.
    Itpm,
    /// Output tokens per minute.
    Otpm,
}

impl Dimension {
    pub const ALL: [Dimension; 4] = [
        Dimension::Rpm,
        Dimension::Tpm,
        Dimension::Itpm,
        Dimension::Otpm,
    ];

    /// The contract's word (`limits:` keys, `capacity --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Rpm => "rpm",
            Dimension::Tpm => "tpm",
            Dimension::Itpm => "itpm",
            Dimension::Otpm => "otpm",
        }
    }

    /// The word a scenario's `buckets:` expectation uses for a level.
    pub fn level_name(self) -> &'static str {
        match self {
            Dimension::Rpm => "requests",
            Dimension::Tpm => "tokens",
            Dimension::Itpm => "input_tokens",
            Dimension::Otpm => "output_tokens",
        }
    }

    pub fn from_level_name(s: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|d| d.level_name() == s)
    }
}

/// One `limits:` entry: the contract per minute on each dimension it names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otpm: Option<u64>,
}

impl Limits {
    /// The dimensions this entry names, with their contracts.
    pub fn contracts(&self) -> impl Iterator<Item = (Dimension, u64)> + '_ {
        [
            (Dimension::Rpm, self.rpm),
            (Dimension::Tpm, self.tpm),
            (Dimension::Itpm, self.itpm),
            (Dimension::Otpm, self.otpm),
        ]
        .into_iter()
        .filter_map(|(d, c)| c.map(|c| (d, c)))
    }
}

/// The defaults of spec/decisions.md.
pub const DEFAULT_HEADROOM: f64 = 0.9;
pub const DEFAULT_INTERACTIVE_FLOOR: f64 = 0.2;
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4_096;
pub const DEFAULT_MAX_QUEUE_LEN: u32 = 1_000;
/// Buckets refill their whole capacity over one minute.
pub const REFILL_WINDOW_MS: f64 = 60_000.0;

/// What one upstream call costs before it is made: one request, its input estimate,
/// and the output it may produce (the declared maximum: providers reserve it too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Cost {
    pub fn on(&self, dim: Dimension) -> f64 {
        match dim {
            Dimension::Rpm => 1.0,
            Dimension::Tpm => (self.input_tokens + self.output_tokens) as f64,
            Dimension::Itpm => self.input_tokens as f64,
            Dimension::Otpm => self.output_tokens as f64,
        }
    }
}

/// What an attempt turned out to cost, to true its reservation up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// The route was never called: everything comes back.
    Nothing,
    /// Called, and the provider reported usage.
    Reported {
        input_tokens: u64,
        output_tokens: u64,
    },
    /// Called, no usage reported (a failure): the request and its input stay spent,
    /// the output reservation comes back.
    Unreported,
}

impl Spent {
    /// The final cost on `dim`, given what was reserved.
    pub fn on(&self, dim: Dimension, reserved: &Cost) -> f64 {
        match *self {
            Spent::Nothing => 0.0,
            Spent::Reported {
                input_tokens,
                output_tokens,
            } => Cost {
                input_tokens,
                output_tokens,
            }
            .on(dim),
            Spent::Unreported => Cost {
                input_tokens: reserved.input_tokens,
                output_tokens: 0,
            }
            .on(dim),
        }
    }
}

/// One token bucket: a level that refills continuously toward `capacity`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// contract × headroom.
    pub capacity: f64,
    /// The level at `at`. May go below zero when usage exceeded the reservation: the
    /// debt is real, and the refill repays it before anything else is admitted.
    pub level: f64,
    pub at: UnixMs,
}

impl Bucket {
    /// A full bucket for `contract` per minute.
    pub fn full(contract: u64, headroom: f64, now: UnixMs) -> Bucket {
        let capacity = contract as f64 * headroom;
        Bucket {
            capacity,
            level: capacity,
            at: now,
        }
    }

    /// Refill per millisecond.
    pub fn rate(&self) -> f64 {
        self.capacity / REFILL_WINDOW_MS
    }

    /// The level at `now`, refilled. Time never runs backwards for a bucket: an
    /// instant before `at` (another process's clock) reads the level at `at`.
    pub fn level_at(&self, now: UnixMs) -> f64 {
        let dt = now.saturating_sub(self.at).max(0) as f64;
        (self.level + dt * self.rate()).min(self.capacity)
    }

    /// Brings the stored level forward to `now`.
    pub fn refill(&mut self, now: UnixMs) {
        if now > self.at {
            self.level = self.level_at(now);
            self.at = now;
        }
    }

    /// The level a request of `priority` must leave behind: the interactive floor is
    /// kept for interactive traffic only.
    fn reserve_for(&self, priority: Priority, floor: f64) -> f64 {
        match priority {
            Priority::Interactive => 0.0,
            _ => floor * self.capacity,
        }
    }

    /// Whether the bucket admits `cost` now (decisions.md: level ≥ cost, and for a
    /// non-interactive request level − cost ≥ floor × capacity).
    pub fn admits(&self, cost: f64, priority: Priority, floor: f64, now: UnixMs) -> bool {
        self.level_at(now) - cost >= self.reserve_for(priority, floor)
    }

    /// How long until the refill alone admits `cost`: `Some(0)` now, `None` never
    /// (the cost does not fit in the bucket at all). Rounded up to whole ms.
    pub fn wait_ms(&self, cost: f64, priority: Priority, floor: f64, now: UnixMs) -> Option<u64> {
        let need = cost + self.reserve_for(priority, floor);
        if need > self.capacity {
            return None;
        }
        let short = need - self.level_at(now);
        if short <= 0.0 {
            return Some(0);
        }
        let rate = self.rate();
        if rate <= 0.0 {
            return None;
        }
        Some((short / rate).ceil() as u64)
    }

    /// Takes `cost`; the caller has checked `admits`.
    pub fn take(&mut self, cost: f64, now: UnixMs) {
        self.refill(now);
        self.level -= cost;
    }

    /// Trues a reservation of `reserved` up to `actual`: the difference comes back (or,
    /// when usage exceeded the reservation, is taken), never above capacity.
    pub fn true_up(&mut self, reserved: f64, actual: f64, now: UnixMs) {
        self.refill(now);
        self.level = (self.level + reserved - actual).min(self.capacity);
    }

    /// The provider says only `remaining` is left on this key: the bucket is lowered to
    /// at most `remaining × headroom`, never raised (others may spend the same key).
    pub fn lower_to(&mut self, remaining: u64, headroom: f64, now: UnixMs) {
        self.refill(now);
        self.level = self.level.min(remaining as f64 * headroom);
    }
}

/// Whether every bucket admits the cost; when one does not, how long the refill needs
/// to admit it in all of them (`None`: never).
pub fn wait_for_all<'a>(
    buckets: impl IntoIterator<Item = (&'a Bucket, f64)>,
    priority: Priority,
    floor: f64,
    now: UnixMs,
) -> Option<u64> {
    let mut longest = 0u64;
    for (bucket, cost) in buckets {
        longest = longest.max(bucket.wait_ms(cost, priority, floor, now)?);
    }
    Some(longest)
}

/// The provider's remaining counts from response headers: `x-ratelimit-remaining-*`
/// (OpenAI and compatible) and `anthropic-ratelimit-*-remaining`.
pub fn remaining_counts(headers: &crate::classify::failure::Headers) -> Vec<(Dimension, u64)> {
    const NAMES: [(&str, Dimension); 6] = [
        ("x-ratelimit-remaining-requests", Dimension::Rpm),
        ("x-ratelimit-remaining-tokens", Dimension::Tpm),
        ("anthropic-ratelimit-requests-remaining", Dimension::Rpm),
        ("anthropic-ratelimit-tokens-remaining", Dimension::Tpm),
        (
            "anthropic-ratelimit-input-tokens-remaining",
            Dimension::Itpm,
        ),
        (
            "anthropic-ratelimit-output-tokens-remaining",
            Dimension::Otpm,
        ),
    ];
    NAMES
        .iter()
        .filter_map(|(name, dim)| {
            let v = headers.get(name)?.trim();
            v.parse::<u64>().ok().map(|n| (*dim, n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(contract: u64) -> Bucket {
        Bucket::full(contract, 1.0, 0)
    }

    #[test]
    fn a_full_bucket_admits_up_to_its_level_and_not_past_it() {
        let mut b = bucket(10);
        for _ in 0..10 {
            assert!(b.admits(1.0, Priority::Interactive, 0.2, 0));
            b.take(1.0, 0);
        }
        assert!(!b.admits(1.0, Priority::Interactive, 0.2, 0));
    }

    #[test]
    fn refill_is_linear_over_a_minute_and_capped() {
        let mut b = bucket(60);
        b.take(60.0, 0);
        assert_eq!(b.level_at(1_000), 1.0);
        assert_eq!(b.level_at(30_000), 30.0);
        assert_eq!(b.level_at(600_000), 60.0);
    }

    #[test]
    fn the_floor_is_kept_for_interactive_traffic() {
        // The spec's example: 10 rpm, floor 0.2 → background stops with 2 left.
        let mut b = bucket(10);
        b.take(8.0, 0);
        assert!(!b.admits(1.0, Priority::Background, 0.2, 0));
        assert!(!b.admits(1.0, Priority::Retry, 0.2, 0));
        assert!(b.admits(1.0, Priority::Interactive, 0.2, 0));
    }

    #[test]
    fn wait_is_the_refill_time_rounded_up_and_none_when_it_can_never_fit() {
        let mut b = bucket(10); // 1 request per 6 000 ms
        b.take(10.0, 0);
        assert_eq!(b.wait_ms(1.0, Priority::Interactive, 0.2, 0), Some(6_000));
        assert_eq!(b.wait_ms(1.0, Priority::Interactive, 0.2, 1), Some(5_999));
        // background needs 1 + 2 (the floor): 18 000 ms
        assert_eq!(b.wait_ms(1.0, Priority::Background, 0.2, 0), Some(18_000));
        assert_eq!(b.wait_ms(11.0, Priority::Interactive, 0.2, 0), None);
        assert_eq!(b.wait_ms(9.0, Priority::Background, 0.2, 0), None);
        let t = bucket(7); // 7 per minute: a fractional rate still rounds up
        let mut t2 = t;
        t2.take(7.0, 0);
        assert_eq!(t2.wait_ms(1.0, Priority::Interactive, 0.0, 0), Some(8_572));
    }

    #[test]
    fn settle_refunds_the_unused_part_and_charges_an_overrun() {
        let mut b = bucket(20_000);
        let reserved = Cost {
            input_tokens: 500,
            output_tokens: 500,
        };
        b.take(reserved.on(Dimension::Tpm), 0);
        let used = Spent::Reported {
            input_tokens: 500,
            output_tokens: 20,
        };
        b.true_up(
            reserved.on(Dimension::Tpm),
            used.on(Dimension::Tpm, &reserved),
            0,
        );
        assert_eq!(b.level, 20_000.0 - 520.0);
        // An overrun is a debt, paid by the refill.
        let mut c = bucket(100);
        c.take(100.0, 0);
        c.true_up(100.0, 150.0, 0);
        assert_eq!(c.level, -50.0);
        assert!(!c.admits(1.0, Priority::Interactive, 0.0, 30_000));
    }

    #[test]
    fn a_failure_keeps_the_request_and_input_and_refunds_the_output() {
        let reserved = Cost {
            input_tokens: 300,
            output_tokens: 700,
        };
        let s = Spent::Unreported;
        assert_eq!(s.on(Dimension::Rpm, &reserved), 1.0);
        assert_eq!(s.on(Dimension::Tpm, &reserved), 300.0);
        assert_eq!(s.on(Dimension::Itpm, &reserved), 300.0);
        assert_eq!(s.on(Dimension::Otpm, &reserved), 0.0);
        assert_eq!(Spent::Nothing.on(Dimension::Rpm, &reserved), 0.0);
    }

    #[test]
    fn remaining_counts_lower_but_never_raise() {
        let mut b = bucket(10_000);
        b.lower_to(3_000, 0.9, 0);
        assert_eq!(b.level, 2_700.0);
        b.lower_to(9_000, 0.9, 0);
        assert_eq!(b.level, 2_700.0);
    }

    #[test]
    fn time_never_runs_backwards_for_a_bucket() {
        let mut b = bucket(60);
        b.take(30.0, 10_000);
        assert_eq!(b.level_at(0), 30.0);
        b.refill(5_000);
        assert_eq!(b.at, 10_000);
    }

    #[test]
    fn priorities_parse_and_order_as_the_queue_serves_them() {
        assert_eq!(Priority::parse("Background"), Some(Priority::Background));
        assert_eq!(Priority::parse("bulk"), None);
        let mut v = vec![
            Priority::Speculative,
            Priority::Background,
            Priority::Interactive,
            Priority::Retry,
        ];
        v.sort();
        assert_eq!(v, Priority::ALL.to_vec());
        assert!(!Priority::Speculative.may_wait());
    }
}
