//! Server-sent events framing (the WHATWG `text/event-stream` rules: `event`, `data`,
//! `id`, comments, LF / CRLF / CR line ends, a leading BOM), bounded and linear.
//!
//! Why not a crate: `eventsource-stream` keeps the undelivered text in one `String` and
//! re-parses it from the start on every chunk, so a line that never ends costs O(n²)
//! and grows without limit (issue 9, item 1). Here each byte is looked at once, the
//! only buffers are the current line and the current event, and an event past
//! `max_event_bytes` is an error at once — before the bytes are kept.
//!
//! The framer is pure (bytes in, events out); `wire::stream` drives it and owns the
//! deadlines, so it can check them between chunks whatever the bytes are.

/// The default cap on one event (spec/cli.md "Limits on what is read").
pub const DEFAULT_MAX_EVENT_BYTES: usize = crate::core::limits::DEFAULT_MAX_EVENT_BYTES as usize;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `message` when absent, as the standard says.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("an SSE event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
}

/// Incremental SSE parser. Feed it chunks as they arrive; it hands back whole events.
#[derive(Debug)]
pub struct SseFramer {
    max_event_bytes: usize,
    /// The current line, without its terminator.
    line: Vec<u8>,
    /// Bytes of the current event so far: its finished lines plus `line`.
    event_bytes: usize,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// The last byte seen was a CR: a LF right after it ends nothing new.
    after_cr: bool,
    /// Nothing seen yet: a leading BOM is dropped.
    at_start: bool,
}

impl SseFramer {
    pub fn new(max_event_bytes: usize) -> Self {
        SseFramer {
            max_event_bytes: max_event_bytes.max(1),
            line: Vec::new(),
            event_bytes: 0,
            event: None,
            data: String::new(),
            has_data: false,
            after_cr: false,
            at_start: true,
        }
    }

    /// Bytes held for the event in progress (never more than `max_event_bytes`).
    pub fn buffered(&self) -> usize {
        self.line.len() + self.data.len() + self.event.as_ref().map_or(0, String::len)
    }

    /// Frames `bytes`, appending every event they complete to `out`. Linear in
    /// `bytes.len()`; after an error the framer must not be fed again.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), FrameError> {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.grow(bytes.len())?;
                    self.line.extend_from_slice(bytes);
                    return Ok(());
                }
                Some(end) => {
                    self.grow(end)?;
                    self.line.extend_from_slice(&bytes[..end]);
                    self.after_cr = bytes[end] == b'\r';
                    bytes = &bytes[end + 1..];
                    self.end_line(out)?;
                }
            }
        }
        Ok(())
    }

    /// Counts `n` more bytes against the event cap before they are kept.
    fn grow(&mut self, n: usize) -> Result<(), FrameError> {
        self.event_bytes = self.event_bytes.saturating_add(n);
        if self.event_bytes > self.max_event_bytes {
            return Err(FrameError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), FrameError> {
        let mut line = std::mem::take(&mut self.line);
        if std::mem::replace(&mut self.at_start, false) && line.starts_with(b"\xEF\xBB\xBF") {
            // A leading BOM (it may have arrived split over chunks, hence here).
            line.drain(..3);
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            self.line = line;
            self.line.clear();
            return Ok(()); // a comment (keep-alive)
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &[][..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry and unknown fields carry nothing a wire reads
        }
        // Reuse the line's allocation for the next one.
        self.line = line;
        self.line.clear();
        // Lossy decoding can widen a byte to three: the cap holds on what is kept too.
        if self.buffered() > self.max_event_bytes {
            return Err(FrameError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        self.event_bytes = 0;
        if !self.has_data {
            return; // the standard: an event without data is not dispatched
        }
        self.has_data = false;
        out.push(SseEvent {
            event: event.unwrap_or_else(|| "message".to_string()),
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut f = SseFramer::new(DEFAULT_MAX_EVENT_BYTES);
        let mut out = Vec::new();
        for c in chunks {
            f.feed(c, &mut out).unwrap();
        }
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn fields_comments_and_every_line_end() {
        let got = frame(&[
            b"\xEF\xBB\xBF: keep-alive\n",
            b"event: message_delta\r\ndata: {\"a\":1}\r\n\r\n",
            b"data: one\rdata:two\r\r",
            b"id: 7\nretry: 10\ndata\n\n",
            b"event: only-a-type\n\n",
        ]);
        assert_eq!(
            got,
            vec![
                ev("message_delta", "{\"a\":1}"),
                ev("message", "one\ntwo"),
                ev("message", ""),
            ]
        );
    }

    #[test]
    fn events_split_anywhere_frame_the_same() {
        let whole: &[u8] = b"data: h\xC3\xA9llo\r\n\r\nevent: x\ndata: [DONE]\n\n";
        let once = frame(&[whole]);
        for cut in 0..whole.len() {
            assert_eq!(frame(&[&whole[..cut], &whole[cut..]]), once, "cut at {cut}");
        }
        // A CRLF split between chunks is one line end, not two.
        assert_eq!(
            frame(&[b"data: a\r", b"\ndata: b\r\n\r\n"]),
            vec![ev("message", "a\nb")]
        );
    }

    #[test]
    fn an_incomplete_event_at_the_end_is_not_dispatched() {
        assert!(frame(&[b"data: cut"]).is_empty());
        assert!(frame(&[b"data: cut\n"]).is_empty());
    }

    #[test]
    fn an_event_past_the_cap_fails_before_its_bytes_are_kept() {
        let mut f = SseFramer::new(100);
        let mut out = Vec::new();
        f.feed(b"data: ", &mut out).unwrap();
        let endless = vec![b'a'; 64 * 1024];
        assert_eq!(
            f.feed(&endless, &mut out),
            Err(FrameError::EventTooLarge { limit: 100 })
        );
        assert!(f.buffered() <= 100);
        // Many small lines of one event count together.
        let mut f = SseFramer::new(100);
        let lines = "data: 0123456789\n".repeat(10);
        assert!(f.feed(lines.as_bytes(), &mut out).is_err());
        // The cap is per event: a blank line resets it.
        let mut f = SseFramer::new(100);
        let events = "data: 0123456789\n\n".repeat(1000);
        f.feed(events.as_bytes(), &mut out).unwrap();
    }

    proptest! {
        /// Arbitrary bytes in arbitrary chunks: never a panic, never more buffered than
        /// the cap, and the same events however the bytes are cut.
        #[test]
        fn arbitrary_bytes_stay_bounded(
            bytes in proptest::collection::vec(any::<u8>(), 0..4096),
            cuts in proptest::collection::vec(0usize..4096, 0..8),
            cap in 1usize..512,
        ) {
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut f = SseFramer::new(cap);
            let mut out = Vec::new();
            let mut start = 0;
            let mut failed = false;
            for p in points.into_iter().chain([bytes.len()]) {
                if f.feed(&bytes[start..p], &mut out).is_err() {
                    failed = true;
                    break;
                }
                prop_assert!(f.buffered() <= cap);
                start = p;
            }
            let mut whole = SseFramer::new(cap);
            let mut whole_out = Vec::new();
            let whole_failed = whole.feed(&bytes, &mut whole_out).is_err();
            prop_assert_eq!(failed, whole_failed);
            if !failed {
                prop_assert_eq!(out, whole_out);
            }
        }
    }
}
