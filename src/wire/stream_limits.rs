//! The limits on one stream, and the arithmetic of its deadlines. Pure: the driver in
//! `wire::stream` asks `StreamWatch` how long it may wait for the next chunk and tells it
//! what arrived; every answer here is unit-tested without a socket.
//!
//! Five limits end a stream (spec/cli.md "Limits on what is read"):
//! - `first_token_timeout_ms`: headers to the first visible token;
//! - `stream_idle_ms`: the longest silence after it;
//! - `stream_max_ms`: the whole stream, however busy (one token then empty deltas for
//!   ever must still end);
//! - `max_stream_bytes`: text and tool-call arguments delivered;
//! - `max_event_bytes`: one SSE event (enforced by `wire::sse`).
//!
//! Each ends the attempt as `stream_interrupted` — or, before the first visible token,
//! as `timeout` (a deadline) or `server_error` (a cap: the 200 carried no usable answer).

use std::time::Duration;

/// One stream's limits, from the route's provider fields (and the request's budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub first_token_ms: u64,
    pub idle_ms: u64,
    pub stream_max_ms: u64,
    pub max_stream_bytes: u64,
    pub max_event_bytes: u64,
}

/// Why a stream was ended by its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    NoFirstToken,
    Idle,
    TooLong,
    TooMuch,
    EventTooLarge,
}

/// How the attempt that hit a limit is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A deadline before the first visible token: `timeout`.
    Timeout,
    /// A cap before the first visible token: the 200 was no answer, `server_error`.
    BrokenSuccess,
    /// After the first visible token: `stream_interrupted`.
    Interrupted,
}

impl Ended {
    pub fn verdict(self, visible: bool) -> Verdict {
        match (self, visible) {
            (_, true) | (Ended::Idle, _) => Verdict::Interrupted,
            (Ended::NoFirstToken | Ended::TooLong, false) => Verdict::Timeout,
            (Ended::TooMuch | Ended::EventTooLarge, false) => Verdict::BrokenSuccess,
        }
    }

    /// A short, key-free note for the trace.
    pub fn detail(self, l: &StreamLimits) -> String {
        match self {
            Ended::NoFirstToken => format!("no visible token within {} ms", l.first_token_ms),
            Ended::Idle => format!("stalled: no chunk for {} ms", l.idle_ms),
            Ended::TooLong => format!("the stream ran past stream_max_ms ({} ms)", l.stream_max_ms),
            Ended::TooMuch => format!(
                "the stream delivered more than max_stream_bytes ({} bytes)",
                l.max_stream_bytes
            ),
            Ended::EventTooLarge => format!(
                "an SSE event larger than max_event_bytes ({} bytes)",
                l.max_event_bytes
            ),
        }
    }
}

/// One stream's progress against its limits.
#[derive(Debug, Clone)]
pub struct StreamWatch {
    pub limits: StreamLimits,
    visible: bool,
    delivered: u64,
    /// When the last chunk arrived, since the request was sent.
    last_chunk: Duration,
}

impl StreamWatch {
    pub fn new(limits: StreamLimits) -> Self {
        StreamWatch {
            limits,
            visible: false,
            delivered: 0,
            last_chunk: Duration::ZERO,
        }
    }

    pub fn visible(&self) -> bool {
        self.visible
    }

    /// How long the driver may wait for the next chunk at `elapsed` (since the request
    /// was sent), and which limit ends the stream when that wait runs out. `Err` when a
    /// limit has already passed: the driver checks after every chunk, so a peer that
    /// never lets a read wait (endless bytes) cannot outrun its deadlines.
    pub fn next_wait(&self, elapsed: Duration) -> Result<(Duration, Ended), Ended> {
        let ms = Duration::from_millis;
        let whole = ms(self.limits.stream_max_ms);
        let other = if self.visible {
            let idle_until = self.last_chunk.saturating_add(ms(self.limits.idle_ms));
            (idle_until.checked_sub(elapsed), Ended::Idle)
        } else {
            (
                ms(self.limits.first_token_ms).checked_sub(elapsed),
                Ended::NoFirstToken,
            )
        };
        let mut best: Option<(Duration, Ended)> = None;
        for (left, why) in [(whole.checked_sub(elapsed), Ended::TooLong), other] {
            match left {
                None => return Err(why),
                Some(d) if d.is_zero() => return Err(why),
                Some(d) => {
                    if best.is_none_or(|(b, _)| d < b) {
                        best = Some((d, why));
                    }
                }
            }
        }
        Ok(best.expect("two candidates"))
    }

    /// A chunk arrived at `elapsed`.
    pub fn chunk(&mut self, elapsed: Duration) {
        self.last_chunk = elapsed;
    }

    /// `bytes` of text or tool-call arguments are about to be delivered. `Err` when they
    /// would pass `max_stream_bytes`: nothing past the cap reaches the caller.
    pub fn deliver(&mut self, bytes: usize) -> Result<(), Ended> {
        let total = self.delivered.saturating_add(bytes as u64);
        if total > self.limits.max_stream_bytes {
            return Err(Ended::TooMuch);
        }
        self.delivered = total;
        // Every delivery is visible, even an empty one (a tool call's name alone).
        self.visible = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: StreamLimits = StreamLimits {
        first_token_ms: 1500,
        idle_ms: 500,
        stream_max_ms: 10_000,
        max_stream_bytes: 100,
        max_event_bytes: 1024,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn before_the_first_token_the_first_token_deadline_rules() {
        let w = StreamWatch::new(L);
        assert_eq!(w.next_wait(ms(0)), Ok((ms(1500), Ended::NoFirstToken)));
        assert_eq!(w.next_wait(ms(1000)), Ok((ms(500), Ended::NoFirstToken)));
        // A peer that keeps sending bytes without a token is past it all the same.
        assert_eq!(w.next_wait(ms(1500)), Err(Ended::NoFirstToken));
    }

    #[test]
    fn after_it_idle_and_the_whole_stream_deadline_rule() {
        let mut w = StreamWatch::new(L);
        w.deliver(2).unwrap();
        w.chunk(ms(100));
        assert_eq!(w.next_wait(ms(300)), Ok((ms(300), Ended::Idle)));
        // Busy, never idle, yet the whole-stream deadline comes.
        w.chunk(ms(9_900));
        assert_eq!(w.next_wait(ms(9_900)), Ok((ms(100), Ended::TooLong)));
        assert_eq!(w.next_wait(ms(10_000)), Err(Ended::TooLong));
    }

    #[test]
    fn a_whole_stream_deadline_shorter_than_the_first_token_one_wins() {
        let w = StreamWatch::new(StreamLimits {
            stream_max_ms: 700,
            ..L
        });
        assert_eq!(w.next_wait(ms(0)), Ok((ms(700), Ended::TooLong)));
    }

    #[test]
    fn delivery_stops_at_the_byte_cap() {
        let mut w = StreamWatch::new(L);
        assert!(!w.visible());
        w.deliver(60).unwrap();
        assert!(w.visible());
        assert_eq!(w.deliver(41), Err(Ended::TooMuch));
        w.deliver(40).unwrap();
    }

    #[test]
    fn verdicts_follow_the_spec() {
        assert_eq!(Ended::NoFirstToken.verdict(false), Verdict::Timeout);
        assert_eq!(Ended::TooLong.verdict(false), Verdict::Timeout);
        assert_eq!(Ended::EventTooLarge.verdict(false), Verdict::BrokenSuccess);
        for e in [
            Ended::Idle,
            Ended::TooLong,
            Ended::TooMuch,
            Ended::EventTooLarge,
        ] {
            assert_eq!(e.verdict(true), Verdict::Interrupted);
        }
        assert!(Ended::EventTooLarge.detail(&L).contains("1024"));
    }
}
