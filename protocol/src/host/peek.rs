//! Reading the routing fields of a host line that is too long to decode.
//!
//! A host line over the gateway's host line cap is never parsed (nor held
//! in memory whole): only its first bytes are kept. They usually say which
//! turn or control request the line belongs to, since a frame's `type` and
//! its `turn_id` / `request_id` come before its bulk (`event`, `text`,
//! `result`), so the gateway can end that turn with an error instead of
//! leaving it to wait for a frame that will never come.
//!
//! [`peek_frame`] scans the prefix as JSON tokens without building anything:
//! it tracks strings (with their escapes) and nesting, and reads the string
//! values of the three keys only at the top level of the object, so a
//! `"turn_id"` inside a payload or inside a string is never taken for the
//! frame's own.

/// What the first bytes of a host line say about it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FramePeek {
    /// The top-level `type`, if it is in the prefix.
    pub kind: Option<String>,
    /// The top-level `turn_id`.
    pub turn_id: Option<String>,
    /// The top-level `request_id`.
    pub request_id: Option<String>,
}

/// Longest id value taken from a prefix; a longer one is no id of ours.
const MAX_ID: usize = 256;

/// Scans the beginning of a (possibly cut) JSON object for its top-level
/// `type`, `turn_id` and `request_id` string values. Anything it cannot
/// read with certainty (a value with escapes, cut off, not a string, not
/// at the top level, a line that is not an object) is left `None`.
pub fn peek_frame(prefix: &[u8]) -> FramePeek {
    let mut peek = FramePeek::default();
    let mut i = skip_ws(prefix, 0);
    if prefix.get(i) != Some(&b'{') {
        return peek;
    }
    i += 1;
    // Depth of nesting inside the top-level object (0: its own members).
    let mut depth = 0usize;
    // At depth 0: whether the next string is a key (else a value).
    let mut expect_key = true;
    let mut key: Option<(usize, usize)> = None;
    while i < prefix.len() {
        match prefix[i] {
            b'"' => {
                let Some((start, end, raw)) = string_at(prefix, i) else {
                    return peek; // cut off inside a string
                };
                if depth == 0 {
                    if expect_key {
                        key = Some((start, end));
                    } else if let Some((ks, ke)) = key.take() {
                        if raw && end - start <= MAX_ID {
                            let value = std::str::from_utf8(&prefix[start..end]).ok();
                            let slot = match &prefix[ks..ke] {
                                b"type" => Some(&mut peek.kind),
                                b"turn_id" => Some(&mut peek.turn_id),
                                b"request_id" => Some(&mut peek.request_id),
                                _ => None,
                            };
                            if let (Some(slot), Some(value)) = (slot, value) {
                                // A repeated key: the first one counts.
                                slot.get_or_insert_with(|| value.to_owned());
                            }
                        }
                    }
                }
                i = end + 1;
                continue;
            }
            b':' if depth == 0 => expect_key = false,
            b',' if depth == 0 => {
                expect_key = true;
                key = None;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                if depth == 0 {
                    return peek; // the end of the top-level object
                }
                depth -= 1;
                if depth == 0 {
                    key = None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    peek
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while s.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The string starting at `s[open] == '"'`: `(content start, content end,
/// no escapes)`, or `None` if it is cut off.
fn string_at(s: &[u8], open: usize) -> Option<(usize, usize, bool)> {
    let start = open + 1;
    let mut i = start;
    let mut raw = true;
    while i < s.len() {
        match s[i] {
            b'\\' => {
                raw = false;
                i += 2;
            }
            b'"' => return Some((start, i, raw)),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(s: &str) -> FramePeek {
        peek_frame(s.as_bytes())
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn reads_the_routing_fields_of_a_cut_event_line() {
        let line = r#"{"type":"event","turn_id":"t_01J","event":{"type":"message.delta","payload":{"text":"xxxx"#;
        assert_eq!(
            peek(line),
            FramePeek {
                kind: some("event"),
                turn_id: some("t_01J"),
                request_id: None
            }
        );
        let ack = r#" { "type" : "control.ack" , "request_id" : "r_9", "result": {"summary": "yy"#;
        assert_eq!(peek(ack).request_id, some("r_9"));
        assert_eq!(peek(ack).kind, some("control.ack"));
    }

    #[test]
    fn only_top_level_keys_count() {
        // A turn_id inside the payload, before the frame's own.
        let nested =
            r#"{"type":"event","event":{"payload":{"turn_id":"t_other"}},"turn_id":"t_mine","x":"#;
        assert_eq!(peek(nested).turn_id, some("t_mine"));
        // Inside a string: escaped quotes are no keys.
        let in_string = r#"{"text":"\"turn_id\":\"t_fake\"","turn_id":"t_real"}"#;
        assert_eq!(peek(in_string).turn_id, some("t_real"));
        // Inside an array.
        let in_array = r#"{"list":[{"turn_id":"t_a"},"turn_id"],"request_id":"r_1"}"#;
        let p = peek(in_array);
        assert_eq!((p.turn_id, p.request_id), (None, some("r_1")));
        // A value that is a key's name is not a key.
        assert_eq!(peek(r#"{"a":"turn_id","b":"t_x"}"#).turn_id, None);
    }

    #[test]
    fn leaves_out_what_it_cannot_read_with_certainty() {
        // Cut inside the value.
        assert_eq!(peek(r#"{"type":"event","turn_id":"t_01"#).turn_id, None);
        // Not a string, or with escapes.
        assert_eq!(peek(r#"{"turn_id":5,"x":1}"#).turn_id, None);
        assert_eq!(peek(r#"{"turn_id":"t_\u0041","x":1}"#).turn_id, None);
        // Not an object at all.
        assert_eq!(peek(r#"["turn_id","t_1"]"#), FramePeek::default());
        assert_eq!(peek("xxxxxxxx"), FramePeek::default());
        assert_eq!(peek(""), FramePeek::default());
        // Too long to be an id.
        let long = format!(r#"{{"turn_id":"{}","x":1}}"#, "t".repeat(MAX_ID + 1));
        assert_eq!(peek(&long).turn_id, None);
        // Not UTF-8.
        assert_eq!(
            peek_frame(b"{\"turn_id\":\"t_\xff\",\"x\":1}").turn_id,
            None
        );
        // After the object's end nothing counts.
        assert_eq!(peek(r#"{"a":1} "turn_id":"t_1""#).turn_id, None);
    }

    #[test]
    fn the_first_of_a_repeated_key_counts() {
        assert_eq!(
            peek(r#"{"turn_id":"t_1","turn_id":"t_2"}"#).turn_id,
            some("t_1")
        );
    }
}
