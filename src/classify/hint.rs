//! Retry hints: how long the provider asked us to wait, read from protocol fields
//! only. First found wins (spec/decisions.md): `retry-after-ms`, `retry-after`
//! (seconds or HTTP-date), Gemini `RetryInfo.retryDelay`, the largest
//! `x-ratelimit-reset-{requests,tokens}`, the largest `anthropic-ratelimit-*-reset`.
//! Garbage is skipped (the next source is tried), never a panic; results are
//! clamped to [0, 24 h].

use crate::classify::failure::Headers;
use crate::core::clock::UnixMs;
use serde::Serialize;

/// The longest wait a hint may ask for.
pub const MAX_HINT_MS: u64 = 24 * 60 * 60 * 1000;

/// Where a hint came from. Explicit hints (`Retry-After`, `RetryInfo`) state when to
/// come back; window resets only say when a rate-limit bucket refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HintSource {
    RetryAfterMs,
    RetryAfter,
    RetryInfo,
    RatelimitReset,
    AnthropicReset,
    /// A body that says when a spent budget comes back (OpenRouter `metadata.resets_at`).
    StatedReset,
}

impl HintSource {
    /// True for hints that state an instant to come back, as opposed to a bucket refill.
    pub fn is_explicit(self) -> bool {
        matches!(
            self,
            HintSource::RetryAfterMs
                | HintSource::RetryAfter
                | HintSource::RetryInfo
                | HintSource::StatedReset
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Hint {
    pub ms: u64,
    pub source: HintSource,
}

/// Reads the retry hint of one response. `retry_delay` is Gemini's
/// `RetryInfo.retryDelay` from the error body, when there was one.
pub fn retry_hint(headers: &Headers, retry_delay: Option<&str>, now: UnixMs) -> Option<Hint> {
    let hint = |ms: u64, source| {
        Some(Hint {
            ms: ms.min(MAX_HINT_MS),
            source,
        })
    };

    if let Some(ms) = headers.get("retry-after-ms").and_then(parse_millis) {
        return hint(ms, HintSource::RetryAfterMs);
    }
    if let Some(ms) = headers
        .get("retry-after")
        .and_then(|v| parse_retry_after(v, now))
    {
        return hint(ms, HintSource::RetryAfter);
    }
    if let Some(ms) = retry_delay.and_then(parse_duration) {
        return hint(ms, HintSource::RetryInfo);
    }
    let resets = ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .iter()
        .filter_map(|name| headers.get(name).and_then(parse_duration))
        .max();
    if let Some(ms) = resets {
        return hint(ms, HintSource::RatelimitReset);
    }
    let anthropic = headers
        .iter()
        .filter(|(name, _)| name.starts_with("anthropic-ratelimit-") && name.ends_with("-reset"))
        .filter_map(|(_, v)| parse_instant(v).map(|at| until(at, now)))
        .max();
    if let Some(ms) = anthropic {
        return hint(ms, HintSource::AnthropicReset);
    }
    None
}

/// The instant a body says a limit or spent budget comes back, after every header hint
/// (so `Retry-After` still wins). OpenRouter's key, workspace and guardrail budgets
/// answer 403 with `metadata.resets_at` (RFC 3339) and no Retry-After ("wait for the
/// budget window to reset (see metadata.resets_at)", developersdigest.tech's OpenRouter
/// 403 reference); its free-model limits answer 429 with the upstream headers echoed in
/// `metadata.headers`, `X-RateLimit-Reset` in epoch milliseconds ("Rate limit exceeded:
/// free-models-per-day", quoted by many public clients: find_string
/// `free-models-per-day","metadata":{"headers"`). A reset already past is 0; garbage
/// is ignored.
pub fn stated_reset(resets_at: Option<&str>, now: UnixMs) -> Option<Hint> {
    let v = resets_at?.trim();
    let at = parse_instant(v).or_else(|| parse_epoch(v))?;
    Some(Hint {
        ms: until(at, now),
        source: HintSource::StatedReset,
    })
}

/// A Unix time in milliseconds (13 digits, OpenRouter's form) or, when too small to be
/// one, in seconds (10 digits). Anything shorter is no instant at all.
fn parse_epoch(v: &str) -> Option<UnixMs> {
    if v.is_empty() || v.len() > 16 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = v.parse().ok()?;
    match n {
        1_000_000_000_000.. => Some(n),
        1_000_000_000.. => n.checked_mul(1000),
        _ => None,
    }
}

/// `retry-after-ms`: a non-negative number of milliseconds (fractions allowed).
fn parse_millis(v: &str) -> Option<u64> {
    let f = parse_number(v.trim())?;
    finite_nonneg(f).map(|f| f.round().min(MAX_HINT_MS as f64) as u64)
}

/// A non-negative decimal number. A run of digits too long for an `f64` (90,000 nines)
/// is a very large number, not garbage: it becomes `f64::MAX`, so it clamps to 24 h like
/// `1e30` does, rather than being skipped. `inf` / `NaN` spelled out stay garbage.
fn parse_number(s: &str) -> Option<f64> {
    let f: f64 = s.parse().ok()?;
    let plain_decimal = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && s.bytes().filter(|&b| b == b'.').count() <= 1
        && s.bytes().any(|b| b.is_ascii_digit());
    if f.is_infinite() && plain_decimal {
        return Some(f64::MAX);
    }
    Some(f)
}

/// RFC 9110 §10.2.3: delay-seconds, or an HTTP-date (a date in the past means 0).
/// Fractional seconds are accepted because real providers send them.
pub fn parse_retry_after(v: &str, now: UnixMs) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() {
        return None;
    }
    if v.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'.')
    {
        let secs = parse_number(v)?;
        return finite_nonneg(secs).map(secs_to_ms);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let at_ms = match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).ok()?,
        Err(_) => return Some(0),
    };
    Some(until(at_ms, now))
}

/// Go-style durations as OpenAI sends them (`1s`, `6m0s`, `20ms`, `1.574s`,
/// `1h2m3.5s`), Gemini's `"38s"` / `"57.238747106s"`, and bare seconds (`"8"`).
pub fn parse_duration(v: &str) -> Option<u64> {
    let s = v.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(secs) = parse_number(s) {
        return finite_nonneg(secs).map(secs_to_ms);
    }
    if s.len() > 64 {
        return None;
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total_ms = 0f64;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        if start == i {
            return None;
        }
        let n: f64 = s[start..i].parse().ok()?;
        let unit_start = i;
        while i < bytes.len() && !(bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let factor = match &s[unit_start..i] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total_ms += n * factor;
    }
    finite_nonneg(total_ms).map(|ms| ms.ceil().min(MAX_HINT_MS as f64) as u64)
}

/// RFC 3339 instants (`2025-08-21T12:40:59Z`), as Anthropic sends its resets.
pub fn parse_instant(v: &str) -> Option<UnixMs> {
    chrono::DateTime::parse_from_rfc3339(v.trim())
        .ok()
        .map(|t| t.timestamp_millis())
}

fn until(at: UnixMs, now: UnixMs) -> u64 {
    at.saturating_sub(now).clamp(0, MAX_HINT_MS as i64) as u64
}

fn finite_nonneg(f: f64) -> Option<f64> {
    (f.is_finite() && f >= 0.0).then_some(f)
}

fn secs_to_ms(secs: f64) -> u64 {
    (secs * 1000.0).round().min(MAX_HINT_MS as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Headers {
        Headers::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    const NOW: UnixMs = 1_764_504_000_000; // 2025-11-30T12:00:00Z

    #[test]
    fn precedence_first_found_wins() {
        let all = h(&[
            ("retry-after", "20"),
            ("retry-after-ms", "1500"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(retry_hint(&all, None, NOW).unwrap().ms, 1500);
        let no_ms = h(&[("retry-after", "20"), ("x-ratelimit-reset-tokens", "6m0s")]);
        assert_eq!(retry_hint(&no_ms, Some("38s"), NOW).unwrap().ms, 20_000);
        let info = h(&[("x-ratelimit-reset-tokens", "6m0s")]);
        let got = retry_hint(&info, Some("38s"), NOW).unwrap();
        assert_eq!((got.ms, got.source), (38_000, HintSource::RetryInfo));
    }

    #[test]
    fn garbage_falls_through_to_next_source() {
        let hs = h(&[
            ("retry-after-ms", "soon"),
            ("retry-after", "later"),
            ("x-ratelimit-reset-requests", "1s"),
        ]);
        assert_eq!(retry_hint(&hs, Some("x"), NOW).unwrap().ms, 1000);
        assert_eq!(retry_hint(&h(&[("retry-after", "-5")]), None, NOW), None);
        assert_eq!(retry_hint(&h(&[("retry-after", "NaN")]), None, NOW), None);
        assert_eq!(retry_hint(&h(&[("retry-after", "inf")]), None, NOW), None);
    }

    #[test]
    fn retry_after_http_date_and_past_dates() {
        // 2025-11-30T12:00:30Z is 30 s after NOW.
        assert_eq!(
            parse_retry_after("Sun, 30 Nov 2025 12:00:30 GMT", NOW),
            Some(30_000)
        );
        assert_eq!(
            parse_retry_after("Sun, 30 Nov 2025 11:00:00 GMT", NOW),
            Some(0)
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW),
            Some(0)
        );
        assert_eq!(parse_retry_after("tomorrow", NOW), None);
    }

    #[test]
    fn largest_ratelimit_reset_wins() {
        let hs = h(&[
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(retry_hint(&hs, None, NOW).unwrap().ms, 360_000);
        let hs = h(&[
            ("anthropic-ratelimit-requests-reset", "2025-11-30T12:00:10Z"),
            ("anthropic-ratelimit-tokens-reset", "2025-11-30T12:00:40Z"),
            ("anthropic-ratelimit-requests-remaining", "0"),
        ]);
        let got = retry_hint(&hs, None, NOW).unwrap();
        assert_eq!((got.ms, got.source), (40_000, HintSource::AnthropicReset));
    }

    #[test]
    fn a_stated_budget_reset_is_a_clamped_instant() {
        let got = stated_reset(Some("2025-11-30T18:00:00Z"), NOW).unwrap();
        assert_eq!(
            (got.ms, got.source),
            (6 * 3_600_000, HintSource::StatedReset)
        );
        assert!(got.source.is_explicit());
        assert_eq!(
            stated_reset(Some("2025-12-31T00:00:00Z"), NOW).unwrap().ms,
            MAX_HINT_MS
        );
        assert_eq!(
            stated_reset(Some("2025-11-01T00:00:00Z"), NOW).unwrap().ms,
            0
        );
        assert_eq!(stated_reset(Some("next month"), NOW), None);
        assert_eq!(stated_reset(None, NOW), None);
        // OpenRouter's echoed X-RateLimit-Reset: epoch milliseconds, or seconds.
        let ms = (NOW + 90_000).to_string();
        assert_eq!(stated_reset(Some(&ms), NOW).unwrap().ms, 90_000);
        let secs = ((NOW + 90_000) / 1000).to_string();
        assert_eq!(stated_reset(Some(&secs), NOW).unwrap().ms, 90_000);
        for garbage in ["60", "-1764504090000", "1764504090000000000", "1.5e12"] {
            assert_eq!(stated_reset(Some(garbage), NOW), None, "{garbage}");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("6m0s"), Some(360_000));
        assert_eq!(parse_duration("20ms"), Some(20));
        assert_eq!(parse_duration("1.574s"), Some(1574));
        assert_eq!(parse_duration("57.238747106s"), Some(57_239));
        assert_eq!(parse_duration("1h2m3.5s"), Some(3_723_500));
        assert_eq!(parse_duration("8"), Some(8000));
        assert_eq!(parse_duration("12µs"), Some(1));
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration("5 parsecs"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn clamped_to_a_day() {
        assert_eq!(
            retry_hint(&h(&[("retry-after", "99999999999")]), None, NOW)
                .unwrap()
                .ms,
            MAX_HINT_MS
        );
        assert_eq!(parse_duration("100000h"), Some(MAX_HINT_MS));
    }

    #[test]
    fn a_retry_after_of_90000_digits_clamps_to_a_day_like_1e30() {
        let huge = "9".repeat(90_000);
        for v in [huge.as_str(), "1000000000000000000000000000000", "1e30"] {
            for name in ["retry-after", "retry-after-ms"] {
                let got = retry_hint(&h(&[(name, v)]), None, NOW).map(|h| h.ms);
                assert_eq!(got, Some(MAX_HINT_MS), "{name}: {}…", &v[..v.len().min(8)]);
            }
        }
        assert_eq!(parse_duration(&huge), Some(MAX_HINT_MS));
        assert_eq!(retry_hint(&h(&[("retry-after", "inf")]), None, NOW), None);
    }
}
