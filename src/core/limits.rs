//! The ranges a configured duration or size may take, and the defaults of the limits on
//! what a stream may send (spec/cli.md "Limits on what is read"). Pure: config and
//! scenarios check every value here, once, so a value out of range is a config error
//! that names the range (exit 2), never a wrapped instant or an endless stream.

/// 24 h: the longest wait, cooldown or deadline accepted, and the longest hint honoured.
pub const MAX_DURATION_MS: u64 = 24 * 60 * 60 * 1000;

/// A whole stream, headers to end (`stream_max_ms`).
pub const DEFAULT_STREAM_MAX_MS: u64 = 600_000;
/// Text and tool-call arguments delivered by one stream (`max_stream_bytes`).
pub const DEFAULT_MAX_STREAM_BYTES: u64 = 16 * 1024 * 1024;
/// One SSE event (`max_event_bytes`).
pub const DEFAULT_MAX_EVENT_BYTES: u64 = 1024 * 1024;
/// The largest byte cap accepted: past this a cap protects nothing.
pub const MAX_BYTES: u64 = 1024 * 1024 * 1024;

/// What a number in a config means, and so its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Cooldowns, waits, open periods: 0 to 24 h.
    Wait,
    /// Deadlines (timeouts, budgets): 1 ms to 24 h; 0 would fail every call unsent.
    Deadline,
    /// Byte caps: 1 byte to 1 GiB.
    Bytes,
}

impl Kind {
    pub fn range(self) -> (u64, u64) {
        match self {
            Kind::Wait => (0, MAX_DURATION_MS),
            Kind::Deadline => (1, MAX_DURATION_MS),
            Kind::Bytes => (1, MAX_BYTES),
        }
    }
}

/// `value` if it lies in `kind`'s range, else the message naming the range.
pub fn check(kind: Kind, value: u64) -> Result<u64, String> {
    let (lo, hi) = kind.range();
    if (lo..=hi).contains(&value) {
        return Ok(value);
    }
    Err(match kind {
        Kind::Bytes => format!("{value} is out of range: a size is {lo} to {hi} bytes (1 GiB)"),
        _ => format!(
            "{value} is out of range: {} is {lo} to {hi} ms (24 h)",
            match kind {
                Kind::Wait => "a cooldown or wait",
                _ => "a deadline",
            }
        ),
    })
}

/// `check` for an optional field.
pub fn check_opt(kind: Kind, value: Option<u64>) -> Result<(), String> {
    value.map_or(Ok(()), |v| check(kind, v).map(|_| ()))
}

/// Checks named fields (`(name, value, kind)`) in order; the first out of range is
/// returned with its name, for the caller's file / line / field error.
pub fn check_fields<N: Copy>(fields: &[(N, Option<u64>, Kind)]) -> Result<(), (N, String)> {
    for (name, value, kind) in fields {
        check_opt(*kind, *value).map_err(|why| (*name, why))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_messages() {
        assert_eq!(check(Kind::Wait, 0), Ok(0));
        assert_eq!(check(Kind::Wait, MAX_DURATION_MS), Ok(MAX_DURATION_MS));
        let e = check(Kind::Wait, u64::MAX).unwrap_err();
        assert!(e.contains("0 to 86400000 ms"), "{e}");
        let e = check(Kind::Deadline, 0).unwrap_err();
        assert!(e.contains("1 to 86400000 ms"), "{e}");
        assert!(check(Kind::Bytes, 0).is_err());
        assert_eq!(check(Kind::Bytes, MAX_BYTES), Ok(MAX_BYTES));
    }
}
