//! The one recovery budget of a request (seed 001): attempts, elapsed time and extra
//! cost, spent by every retry and fallback together and checked against the card.

use crate::policy::card::Policy;

/// What a request has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Upstream calls made.
    pub attempts: u32,
    /// Routing time since the request began (virtual in the chaos harness).
    pub elapsed_ms: u64,
    /// Estimated cost of every call after the first.
    pub extra_cost_usd: f64,
}

impl Spent {
    /// Whether the card leaves room to wait `wait_ms` and then make one more call that
    /// costs `next_cost_usd`. Time is strict: a call needs some time of its own.
    pub fn allows(&self, policy: &Policy, wait_ms: u64, next_cost_usd: f64) -> bool {
        let attempts_ok = policy
            .max_total_attempts
            .is_none_or(|max| self.attempts < max);
        let time_ok = self.elapsed_ms.saturating_add(wait_ms) < policy.max_elapsed_ms;
        let cost_ok = policy
            .max_extra_cost_usd
            .is_none_or(|max| self.extra_cost_usd + next_cost_usd <= max + 1e-12);
        attempts_ok && time_ok && cost_ok
    }

    /// What is left of the card's `max_elapsed_ms`: the longest the next attempt may take.
    pub fn time_left_ms(&self, policy: &Policy) -> u64 {
        policy.max_elapsed_ms.saturating_sub(self.elapsed_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dimension_bounds() {
        let p = Policy {
            max_total_attempts: Some(3),
            max_elapsed_ms: 9_000,
            max_extra_cost_usd: Some(0.02),
            ..Policy::default()
        };
        let s = Spent {
            attempts: 2,
            elapsed_ms: 1_000,
            extra_cost_usd: 0.01,
        };
        assert!(s.allows(&p, 2_000, 0.01));
        assert!(!Spent { attempts: 3, ..s }.allows(&p, 0, 0.0));
        assert!(!s.allows(&p, 8_000, 0.0));
        assert!(!s.allows(&p, 0, 0.011));
        assert!(Spent::default().allows(&Policy::default(), 0, 0.0));
    }
}
