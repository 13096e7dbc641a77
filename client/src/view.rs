//! What a terminal shows of a session, and the bookkeeping that keeps it
//! from showing anything twice.
//!
//! Two kinds of duplicates threaten a client that reconnects: durable
//! events replayed after a resume (deduplicated by `seq`: anything at or
//! below the watermark was shown), and the assistant text of a running turn,
//! which arrives as transient deltas without `seq` and then again, whole, in
//! `message.complete` or in a resume's `active_turn`. For the text, each
//! turn remembers how many bytes are on screen ([`TurnText`]); a delta's
//! `offset` (bytes before it, PROTOCOL 1.5) says which part is new.

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};

use serde_json::Value;
use tether_protocol::{Message, MessageRole, ResumeResult};

use super::conn::Event;
use super::outcome;

/// How much of one turn's assistant text is already printed.
#[derive(Debug, Default)]
pub struct TurnText {
    printed: usize,
}

impl TurnText {
    /// The part of a delta that is not on screen yet. A delta that starts
    /// beyond what is printed (one was dropped for a slow connection) prints
    /// nothing: the text must stay in order, and `message.complete` fills
    /// the gap.
    pub fn delta<'a>(&mut self, offset: usize, text: &'a str) -> &'a str {
        let end = offset + text.len();
        if offset > self.printed || end <= self.printed {
            return "";
        }
        match text.get(self.printed - offset..) {
            Some(new) => {
                self.printed = end;
                new
            }
            None => "",
        }
    }

    /// The part of the turn's whole text not printed yet.
    pub fn rest<'a>(&mut self, whole: &'a str) -> &'a str {
        let new = whole.get(self.printed..).unwrap_or("");
        self.printed = self.printed.max(whole.len());
        new
    }
}

/// Whether a stream gets ANSI styling: only a terminal, and not when the
/// user asked for none (`NO_COLOR`).
pub fn styled(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none()
}

/// `[text]`, dimmed when styled.
pub fn bracket(text: &str, styled: bool) -> String {
    if styled {
        format!("\x1b[2m[{text}]\x1b[0m")
    } else {
        format!("[{text}]")
    }
}

/// At most `max` characters of `s`, on one line.
pub fn clip(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ");
    match one_line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// The one-line summary of an event that is not assistant text, or `None`
/// for events a reader does not need to see (starts, session info, ...).
pub fn summary(e: &Event) -> Option<String> {
    let p = &e.payload;
    let text = |key: &str| p[key].as_str().unwrap_or_default().to_string();
    match e.kind.as_str() {
        "message.system" => Some(format!("system: {}", clip(&text("text"), 200))),
        "tool.start" => Some(format!(
            "tool {} {}",
            text("name"),
            clip(&p["args"].to_string(), 120)
        )),
        "tool.complete" => {
            let verdict = if p["is_error"] == Value::Bool(true) {
                "failed"
            } else {
                "done"
            };
            Some(format!(
                "tool {} {verdict}: {}",
                text("name"),
                clip(&p["result"].to_string(), 120)
            ))
        }
        "todo.updated" => {
            let items: Vec<String> = p["items"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|i| {
                            format!(
                                "{} ({})",
                                clip(i["text"].as_str().unwrap_or_default(), 60),
                                i["status"].as_str().unwrap_or("?")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(format!("todo: {}", items.join("; ")))
        }
        "status.update" => match p["kind"].as_str() {
            Some("queued") => Some("queued behind the running turn".into()),
            Some("compacting") => Some("compacting…".into()),
            Some("handoff") => Some(format!("handoff {}", text("text"))),
            _ => None,
        },
        "session.compacted" => Some(format!("compacted: {}", clip(&text("summary"), 200))),
        "session.closed" => Some(format!("session closed ({})", text("reason"))),
        "error" => Some(format!("error: {}", text("message"))),
        // How a turn ended is `outcome::line`, with the turn's error.
        _ => None,
    }
}

/// The rendered session on stdout, with the watermark and turn state that
/// `attach` needs across reconnects.
pub struct View {
    session_id: String,
    styled: bool,
    /// Highest durable `seq` shown.
    pub watermark: u64,
    /// Turns whose text is (partly) on screen and not complete yet.
    texts: HashMap<String, TurnText>,
    /// Accepted turns without their `message.complete` yet.
    open: HashSet<String>,
    /// Completed turns: late deltas of these are ignored.
    done: HashSet<String>,
    /// The `error` event's message of a turn not complete yet: it is told
    /// with the turn's ending, on one line.
    errors: HashMap<String, String>,
    /// The cursor is not at the start of a line.
    mid_line: bool,
    /// `session.closed` was shown.
    pub closed: bool,
}

impl View {
    pub fn new(session_id: &str) -> View {
        View {
            session_id: session_id.to_string(),
            styled: styled(std::io::stdout().is_terminal()),
            watermark: 0,
            texts: HashMap::new(),
            open: HashSet::new(),
            done: HashSet::new(),
            errors: HashMap::new(),
            mid_line: false,
            closed: false,
        }
    }

    /// No accepted turn is running or queued, as far as this view knows.
    pub fn idle(&self) -> bool {
        self.open.is_empty()
    }

    /// A `prompt.submit` of ours was accepted (its `message.user` may
    /// arrive before or after this answer).
    pub fn accepted(&mut self, turn_id: &str) {
        if !self.done.contains(turn_id) {
            self.open.insert(turn_id.to_string());
        }
    }

    /// Prints the transcript messages after the watermark and the running
    /// turn's text so far, then moves the watermark to the resume's cut.
    /// Used after a `resync` or a new epoch.
    pub fn transcript(&mut self, r: &ResumeResult) -> std::io::Result<()> {
        self.history(r)?;
        self.running(r)
    }

    /// The transcript messages after the watermark (each turn that did not
    /// complete with its ending), moving the watermark to the resume's
    /// cut; the running turn's text is [`View::running`]'s.
    pub fn history(&mut self, r: &ResumeResult) -> std::io::Result<()> {
        let mut out = String::new();
        let since = self.watermark;
        for m in r.messages.iter().flatten().filter(|m| m.seq > since) {
            self.message(m, &mut out);
        }
        self.watermark = self.watermark.max(r.latest_seq);
        self.emit(&out)
    }

    /// The running turn's text so far, if a turn runs.
    pub fn running(&mut self, r: &ResumeResult) -> std::io::Result<()> {
        let mut out = String::new();
        self.active_turn(r, &mut out);
        self.emit(&out)
    }

    /// Applies a reconnect's resume: the missed durable events, then the
    /// running turn's text. Returns how many events were new.
    pub fn replay(&mut self, events: &[Event], r: &ResumeResult) -> std::io::Result<usize> {
        let mut out = String::new();
        let mut new = 0;
        for e in events {
            if e.seq.is_some_and(|s| s > self.watermark) {
                new += 1;
            }
            self.event_into(e, &mut out);
        }
        self.watermark = self.watermark.max(r.latest_seq);
        self.active_turn(r, &mut out);
        self.emit(&out)?;
        Ok(new)
    }

    /// Shows one live event (unless it was shown already).
    pub fn event(&mut self, e: &Event) -> std::io::Result<()> {
        let mut out = String::new();
        self.event_into(e, &mut out);
        self.emit(&out)
    }

    /// Ends the current line, if any (before quitting).
    pub fn finish(&mut self) -> std::io::Result<()> {
        if self.mid_line {
            self.emit("\n")?;
        }
        Ok(())
    }

    fn message(&mut self, m: &Message, out: &mut String) {
        match m.role {
            MessageRole::User => {
                if let Some(turn) = &m.turn_id {
                    self.accepted(turn.as_str());
                }
                self.line(out, &quote(&m.text));
            }
            MessageRole::Assistant => {
                let turn = m.turn_id.as_ref().map(|t| t.to_string());
                let mut text = TurnText::default();
                let tt = turn
                    .as_ref()
                    .and_then(|t| self.texts.get_mut(t))
                    .unwrap_or(&mut text);
                let rest = tt.rest(&m.text).to_string();
                self.text(out, &rest);
                self.end_line(out);
                if let Some(status) = m.status {
                    let ending = outcome::line(
                        status.as_str(),
                        m.failure_reason.as_deref(),
                        None,
                        m.error.as_deref(),
                    );
                    if let Some(ending) = ending {
                        self.line(out, &bracket(&ending, self.styled));
                    }
                }
                if let Some(t) = turn {
                    self.complete(&t);
                }
            }
            MessageRole::Tool => self.line(
                out,
                &bracket(&format!("tool result: {}", clip(&m.text, 120)), self.styled),
            ),
            MessageRole::System => self.line(
                out,
                &bracket(&format!("system: {}", clip(&m.text, 200)), self.styled),
            ),
        }
    }

    fn active_turn(&mut self, r: &ResumeResult, out: &mut String) {
        let Some(active) = &r.active_turn else { return };
        let turn = active.turn_id.to_string();
        if self.done.contains(&turn) {
            return;
        }
        self.open.insert(turn.clone());
        let rest = self
            .texts
            .entry(turn)
            .or_default()
            .rest(&active.text)
            .to_string();
        self.text(out, &rest);
    }

    fn event_into(&mut self, e: &Event, out: &mut String) {
        if e.session_id
            .as_deref()
            .is_some_and(|s| s != self.session_id)
        {
            return;
        }
        if let Some(seq) = e.seq {
            if seq <= self.watermark {
                return;
            }
            self.watermark = seq;
        }
        let turn = e.turn_id.clone().unwrap_or_default();
        let text = e.payload["text"].as_str().unwrap_or_default();
        match e.kind.as_str() {
            "message.user" => {
                if e.turn_id.is_some() {
                    self.accepted(&turn);
                }
                self.line(out, &quote(text));
            }
            "message.delta" if !self.done.contains(&turn) => {
                let offset = e.payload["offset"].as_u64().unwrap_or_default() as usize;
                let new = self
                    .texts
                    .entry(turn)
                    .or_default()
                    .delta(offset, text)
                    .to_string();
                self.text(out, &new);
            }
            "message.complete" => {
                let rest = self
                    .texts
                    .entry(turn.clone())
                    .or_default()
                    .rest(text)
                    .to_string();
                self.text(out, &rest);
                self.end_line(out);
                let error = self.errors.remove(&turn);
                let ending = outcome::line(
                    e.payload["status"].as_str().unwrap_or("complete"),
                    e.payload["failure_reason"].as_str(),
                    e.payload["recoverable"].as_bool(),
                    error.as_deref(),
                );
                if let Some(ending) = ending {
                    self.line(out, &bracket(&ending, self.styled));
                }
                self.complete(&turn);
            }
            // A turn's error is always followed by its `message.complete`
            // (PROTOCOL Part 4, "A failed turn"): told there, with the
            // reason, instead of twice.
            "error" if e.turn_id.is_some() && !self.done.contains(&turn) => {
                let message = e.payload["message"].as_str().unwrap_or_default();
                self.errors.insert(turn, message.to_string());
            }
            "session.closed" => {
                self.closed = true;
                if let Some(s) = summary(e) {
                    self.line(out, &bracket(&s, self.styled));
                }
            }
            _ => {
                if let Some(s) = summary(e) {
                    self.line(out, &bracket(&s, self.styled));
                }
            }
        }
    }

    fn complete(&mut self, turn: &str) {
        self.errors.remove(turn);
        self.texts.remove(turn);
        self.open.remove(turn);
        self.done.insert(turn.to_string());
    }

    /// A whole line of its own (ending the current line first).
    fn line(&mut self, out: &mut String, text: &str) {
        self.end_line(out);
        out.push_str(text);
        out.push('\n');
    }

    fn text(&mut self, out: &mut String, text: &str) {
        if !text.is_empty() {
            out.push_str(text);
            self.mid_line = !text.ends_with('\n');
        }
    }

    fn end_line(&mut self, out: &mut String) {
        if self.mid_line {
            out.push('\n');
            self.mid_line = false;
        }
    }

    fn emit(&self, out: &str) -> std::io::Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()
    }
}

/// A user prompt as shown: every line prefixed with `> `.
fn quote(text: &str) -> String {
    let lines: Vec<String> = text.lines().map(|l| format!("> {l}")).collect();
    if lines.is_empty() {
        ">".to_string()
    } else {
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::TurnText;

    #[test]
    fn deltas_print_each_byte_once_whatever_the_replays() {
        let mut t = TurnText::default();
        assert_eq!(t.delta(0, "hello "), "hello ");
        assert_eq!(t.delta(0, "hello "), "", "a replayed delta prints nothing");
        assert_eq!(
            t.delta(3, "lo wor"),
            "wor",
            "an overlapping one prints its new part"
        );
        assert_eq!(
            t.delta(20, "zz"),
            "",
            "a delta after a gap waits for the whole text"
        );
        assert_eq!(t.rest("hello world"), "ld");
        assert_eq!(t.rest("hello world"), "");
    }

    #[test]
    fn offsets_are_bytes_and_never_split_a_character() {
        let mut t = TurnText::default();
        assert_eq!(t.delta(0, "é"), "é");
        assert_eq!(t.delta(2, "ü!"), "ü!");
        assert_eq!(t.delta(4, "!ä"), "ä", "overlap counted in bytes");
        let mut t = TurnText::default();
        assert_eq!(t.delta(0, "ab"), "ab");
        assert_eq!(
            t.delta(1, "éx"),
            "",
            "a cut inside a character prints nothing"
        );
        assert_eq!(t.rest("abéx"), "éx");
    }
}
