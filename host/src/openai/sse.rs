//! Server-Sent Events decoding for a streamed chat completion.
//!
//! Written here rather than taken from a crate because the openai engine
//! needs only the `data` field and must bound what a misbehaving server can
//! make it buffer. Pure (bytes in, events out), so chunk boundaries can be
//! tested anywhere, including inside a line ending or a UTF-8 character.
//!
//! Per the WHATWG rules: lines end with `\n`, `\r\n` or `\r`; a line starting
//! with `:` is a comment; `data: X` (one optional space after the colon)
//! appends `X` to the event's data, several `data` lines joined with `\n`;
//! other fields (`event`, `id`, `retry`) are ignored; a blank line ends the
//! event, and an event without `data` is not dispatched.

/// The longest line or event data accepted, in bytes. A chat chunk is a few
/// hundred bytes; this only stops a broken server from exhausting memory.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// The stream broke the framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event stream line or event is longer than {MAX_EVENT_BYTES} bytes")]
    TooLong,
}

/// Incremental decoder: feed it the body's chunks in order.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line being read (no line ending yet).
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next one
    /// belongs to that line ending.
    after_cr: bool,
    /// `data` of the event being read; `None` until a `data` line comes.
    data: Option<String>,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `chunk`; returns the `data` of each event it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        let mut rest = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(tail) = rest.strip_prefix(b"\n") {
                rest = tail;
            }
        }
        while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.append(&rest[..end])?;
            let line = std::mem::take(&mut self.line);
            if let Some(data) = self.line_done(&line)? {
                events.push(data);
            }
            let crlf = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if crlf {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.append(rest)?;
        Ok(events)
    }

    /// The body ended. Returns the data of an event that was complete but
    /// for its blank line (servers that end with `data: [DONE]\n` alone are
    /// common enough to be met halfway); a line cut short is dropped.
    pub fn finish(mut self) -> Option<String> {
        self.data.take()
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// One complete line; the event's data when the line is blank.
    fn line_done(&mut self, line: &[u8]) -> Result<Option<String>, SseError> {
        if line.is_empty() {
            return Ok(self.data.take());
        }
        if line.starts_with(b":") {
            return Ok(None);
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field != b"data" {
            return Ok(None);
        }
        // A character is never split across lines, so decoding whole lines
        // cannot cut one in half; invalid bytes become U+FFFD and the JSON
        // that follows decides whether that matters.
        let value = String::from_utf8_lossy(value);
        let data = match self.data.as_mut() {
            Some(data) => {
                data.push('\n');
                data
            }
            None => self.data.insert(String::new()),
        };
        if data.len() + value.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLong);
        }
        data.push_str(&value);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `stream` cut at every position in `cuts` and collects events.
    fn decode(stream: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
            out.extend(d.push(&stream[from..cut]).unwrap());
            from = cut;
        }
        out.extend(d.finish());
        out
    }

    const STREAM: &str = ": keep-alive\r\n\
        event: chunk\r\n\
        data: {\"a\":\"h\u{e9}llo\"}\r\n\
        \r\n\
        id: 7\n\
        data:{\"b\":1}\n\
        \n\
        data: one\rdata: two\r\r\
        retry: 10\n\n\
        data: [DONE]\n\n";

    fn expected() -> Vec<String> {
        vec![
            "{\"a\":\"h\u{e9}llo\"}".to_owned(),
            "{\"b\":1}".to_owned(),
            "one\ntwo".to_owned(),
            "[DONE]".to_owned(),
        ]
    }

    #[test]
    fn whole_stream_decodes() {
        assert_eq!(decode(STREAM.as_bytes(), &[]), expected());
    }

    #[test]
    fn any_single_cut_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(decode(bytes, &[cut]), expected(), "cut at {cut}");
        }
    }

    #[test]
    fn any_two_cuts_give_the_same_events() {
        let bytes = STREAM.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                assert_eq!(decode(bytes, &[a, b]), expected(), "cuts at {a}, {b}");
            }
        }
    }

    #[test]
    fn byte_at_a_time_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(decode(bytes, &cuts), expected());
    }

    #[test]
    fn a_split_multibyte_character_survives() {
        let bytes = "data: \u{1f600}\n\n".as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(decode(bytes, &[cut]), vec!["\u{1f600}".to_owned()]);
        }
    }

    #[test]
    fn events_without_data_are_not_dispatched() {
        assert!(decode(b"event: x\n\n: c\n\n\n\n", &[]).is_empty());
        // An empty data line is an event with empty data.
        assert_eq!(decode(b"data\n\n", &[]), vec![String::new()]);
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_kept_and_a_cut_line_dropped() {
        assert_eq!(decode(b"data: [DONE]\n", &[]), vec!["[DONE]".to_owned()]);
        assert!(decode(b"data: [DO", &[]).is_empty());
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut d = SseDecoder::new();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = Ok(Vec::new());
        for _ in 0..5 {
            result = d.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::TooLong));
    }
}
