//! The circuit breaker (seed 001, seed 003): failure accrual per route. Too many
//! consecutive failures, or too high a failure rate over a window, open it; an open
//! route is skipped. After its open period it is half-open: only a few trial requests
//! at a time go through while other traffic keeps using the fallback. A trial that
//! succeeds closes it; a failed trial reopens it for longer (capped exponential).
//! Pure: the state lives in the health store, beside the route's health, and a store
//! applies a [`Step`] (data, not a closure) to it atomically with [`step`], so that a
//! fleet sharing one store shares its breakers too.

use crate::core::clock::UnixMs;
use crate::core::limits::Kind;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (0: never on this count).
    pub consecutive_failures: u32,
    /// Failure rate over the last `window` attempts that opens it (`None`: never on rate).
    pub failure_rate: Option<f64>,
    pub window: u32,
    /// The first open period; each failed trial doubles it, up to `max_open_ms`.
    pub open_ms: u64,
    pub max_open_ms: u64,
    /// Trial requests allowed at once while half-open.
    pub half_open_trials: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            failure_rate: None,
            window: 20,
            open_ms: 5_000,
            max_open_ms: 60_000,
            half_open_trials: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Closed {
        consecutive: u32,
        recent: VecDeque<bool>,
    },
    Open {
        until: UnixMs,
        open_ms: u64,
    },
    HalfOpen {
        trials: u32,
        open_ms: u64,
    },
}

impl Default for State {
    fn default() -> Self {
        State::Closed {
            consecutive: 0,
            recent: VecDeque::new(),
        }
    }
}

/// Whether a request may use the route now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Half-open: this request is a trial.
    Trial,
    /// Open until an instant.
    Open(UnixMs),
    /// Half-open with every trial slot taken.
    Busy,
}

/// Asks to use the route; a granted trial takes a slot until `record` returns it.
pub fn admit(state: &mut State, cfg: &BreakerConfig, now: UnixMs) -> Admit {
    if let State::Open { until, open_ms } = *state {
        if now < until {
            return Admit::Open(until);
        }
        *state = State::HalfOpen { trials: 0, open_ms };
    }
    match state {
        State::Closed { .. } => Admit::Yes,
        State::HalfOpen { trials, .. } if *trials < cfg.half_open_trials.max(1) => {
            *trials += 1;
            Admit::Trial
        }
        State::HalfOpen { .. } => Admit::Busy,
        State::Open { .. } => unreachable!("handled above"),
    }
}

/// Records an attempt's result (`ok`: it did not fail for route-level reasons).
/// Returns the instant the breaker opened until, when this result opened it.
pub fn record(
    state: &mut State,
    cfg: &BreakerConfig,
    trial: bool,
    ok: bool,
    now: UnixMs,
) -> Option<UnixMs> {
    match state {
        State::HalfOpen { trials, open_ms } if trial => {
            *trials = trials.saturating_sub(1);
            if ok {
                *state = State::default();
                None
            } else {
                let next = open_ms.saturating_mul(2).min(cfg.max_open_ms);
                let until = crate::core::clock::plus_ms(now, next);
                *state = State::Open {
                    until,
                    open_ms: next,
                };
                Some(until)
            }
        }
        State::Closed {
            consecutive,
            recent,
        } => {
            *consecutive = if ok { 0 } else { *consecutive + 1 };
            let by_count = cfg.consecutive_failures > 0 && *consecutive >= cfg.consecutive_failures;
            // The window is kept only for a rate to judge: without one, a route's breaker
            // never allocates.
            let by_rate = cfg.failure_rate.is_some_and(|rate| {
                recent.push_back(ok);
                while recent.len() > cfg.window.max(1) as usize {
                    recent.pop_front();
                }
                let failures = recent.iter().filter(|r| !**r).count() as f64;
                recent.len() >= cfg.window.max(1) as usize && failures / recent.len() as f64 >= rate
            });
            if by_count || by_rate {
                let until = crate::core::clock::plus_ms(now, cfg.open_ms);
                *state = State::Open {
                    until,
                    open_ms: cfg.open_ms,
                };
                Some(until)
            } else {
                None
            }
        }
        // A non-trial result while open or half-open (a request that started before the
        // breaker opened) changes nothing.
        _ => None,
    }
}

/// One breaker operation as data: what a store applies, atomically, to the state it
/// holds for a route (a mutex, an SQLite transaction and a Redis script all run the same
/// rule: [`step`] here, or its transcription in the Redis script).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// [`admit`] at `now`.
    Admit { now: UnixMs },
    /// [`record`] an attempt's result.
    Record { trial: bool, ok: bool, now: UnixMs },
}

/// What a [`Step`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Admit(Admit),
    /// The instant the breaker opened until, when this result opened it.
    Recorded(Option<UnixMs>),
}

/// Applies `op` to `state`: the one rule every store runs.
pub fn step(state: &mut State, cfg: &BreakerConfig, op: Step) -> Answer {
    match op {
        Step::Admit { now } => Answer::Admit(admit(state, cfg, now)),
        Step::Record { trial, ok, now } => Answer::Recorded(record(state, cfg, trial, ok, now)),
    }
}

impl State {
    /// Whether the breaker is open (not yet half-open) at `now`.
    pub fn is_open(&self, now: UnixMs) -> bool {
        matches!(self, State::Open { until, .. } if now < *until)
    }

    /// The closed breaker with no history: what a store need not keep.
    pub fn is_fresh(&self) -> bool {
        matches!(self, State::Closed { consecutive: 0, recent } if recent.is_empty())
    }

    /// The state as stored: `c:CONSECUTIVE:RECENT` (RECENT: one `1` per success and `0`
    /// per failure, oldest first), `o:UNTIL:OPEN_MS`, or `h:TRIALS:OPEN_MS`. Text, so the
    /// Redis script reads and writes the very same form.
    pub fn encode(&self) -> String {
        match self {
            State::Closed {
                consecutive,
                recent,
            } => {
                let bits: String = recent
                    .iter()
                    .map(|ok| if *ok { '1' } else { '0' })
                    .collect();
                format!("c:{consecutive}:{bits}")
            }
            State::Open { until, open_ms } => format!("o:{until}:{open_ms}"),
            State::HalfOpen { trials, open_ms } => format!("h:{trials}:{open_ms}"),
        }
    }

    /// Reads [`State::encode`]'s form; `None` for anything else.
    pub fn decode(text: &str) -> Option<State> {
        let mut parts = text.splitn(3, ':');
        let (kind, a, b) = (parts.next()?, parts.next()?, parts.next()?);
        match kind {
            "c" => {
                let recent = b
                    .chars()
                    .map(|c| match c {
                        '1' => Some(true),
                        '0' => Some(false),
                        _ => None,
                    })
                    .collect::<Option<VecDeque<bool>>>()?;
                Some(State::Closed {
                    consecutive: a.parse().ok()?,
                    recent,
                })
            }
            "o" => Some(State::Open {
                until: a.parse().ok()?,
                open_ms: b.parse().ok()?,
            }),
            "h" => Some(State::HalfOpen {
                trials: a.parse().ok()?,
                open_ms: b.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// A breaker's durations, as named fields.
pub fn breaker_fields(b: Option<&BreakerConfig>) -> Vec<(&'static str, Option<u64>, Kind)> {
    match b {
        Some(b) => vec![
            ("breaker.open_ms", Some(b.open_ms), Kind::Wait),
            ("breaker.max_open_ms", Some(b.max_open_ms), Kind::Wait),
        ],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: 2,
            open_ms: 1_000,
            max_open_ms: 3_000,
            ..BreakerConfig::default()
        }
    }

    #[test]
    fn opens_half_opens_and_grows_capped() {
        let c = cfg();
        let mut s = State::default();
        assert_eq!(record(&mut s, &c, false, false, 0), None);
        assert_eq!(record(&mut s, &c, false, false, 0), Some(1_000));
        assert_eq!(admit(&mut s, &c, 500), Admit::Open(1_000));
        assert_eq!(admit(&mut s, &c, 1_000), Admit::Trial);
        assert_eq!(admit(&mut s, &c, 1_000), Admit::Busy, "one trial at a time");
        assert_eq!(
            record(&mut s, &c, true, false, 1_000),
            Some(3_000),
            "doubled"
        );
        assert_eq!(admit(&mut s, &c, 3_000), Admit::Trial);
        assert_eq!(
            record(&mut s, &c, true, false, 3_000),
            Some(6_000),
            "capped at max_open_ms"
        );
        assert_eq!(admit(&mut s, &c, 6_000), Admit::Trial);
        assert_eq!(record(&mut s, &c, true, true, 6_000), None);
        assert_eq!(admit(&mut s, &c, 6_000), Admit::Yes);
    }

    #[test]
    fn failure_rate_over_a_window() {
        let c = BreakerConfig {
            consecutive_failures: 0,
            failure_rate: Some(0.5),
            window: 4,
            ..cfg()
        };
        let mut s = State::default();
        for ok in [true, false, true] {
            assert_eq!(record(&mut s, &c, false, ok, 0), None);
        }
        assert_eq!(
            record(&mut s, &c, false, false, 0),
            Some(1_000),
            "2 of 4 failed"
        );
    }

    #[test]
    fn every_state_round_trips_through_its_stored_form() {
        let states = [
            State::default(),
            State::Closed {
                consecutive: 3,
                recent: [true, false, false].into_iter().collect(),
            },
            State::Open {
                until: -5,
                open_ms: 7,
            },
            State::HalfOpen {
                trials: 2,
                open_ms: 60_000,
            },
        ];
        for s in states {
            assert_eq!(
                State::decode(&s.encode()),
                Some(s.clone()),
                "{}",
                s.encode()
            );
        }
        for bad in ["", "c:1", "c:x:1", "c:1:2", "o:1", "z:1:2"] {
            assert_eq!(State::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn success_resets_the_count() {
        let c = cfg();
        let mut s = State::default();
        record(&mut s, &c, false, false, 0);
        record(&mut s, &c, false, true, 0);
        assert_eq!(record(&mut s, &c, false, false, 0), None);
    }
}
