//! The `echo` engine (PROTOCOL Part 3): deterministic replies for the demo
//! and for tests, plus fault injection through directives.
//!
//! The reply to a prompt is the prompt itself, one `message.delta` per word:
//! the text is split after each space and the spaces are kept, so `"a  b "`
//! streams `"a "`, `" "`, `"b "` (a newline is not a split point). An empty
//! reply sends no delta and completes with `""`. `--delay-ms` is waited
//! between deltas (not before the first or after the last).
//!
//! A prompt whose first line starts with a known directive does something
//! else, and the rest of the prompt (after the first `\n`) is the reply text
//! (empty when there is no second line):
//!
//! | first line | effect |
//! |---|---|
//! | `/sleep MS` | wait MS ms (interruptible), then reply |
//! | `/hang` | one delta `"…"`, then nothing until interrupted |
//! | `/crash` | one delta (the reply's first word, `"…"` if it has none), then the process exits with 101 |
//! | `/error TEXT` | `turn.error` `engine_error` with message TEXT (`"engine error"` if TEXT is empty); no delta |
//! | `/tool NAME JSON` | `tool.start` and `tool.complete` (result = the JSON, `is_error` false), then reply; JSON defaults to `{}` |
//! | `/todo A; B; C` | `todo.updated` with items id `"1"`, `"2"`, ... (empty entries skipped; no entry → an empty list), status `pending`, then reply |
//! | `/big N` | N bytes of `"x"` in deltas of at most 1024 bytes (N ≤ 64 MiB); the rest of the prompt is ignored |
//! | `/config` | reply with the turn's engine `config`, as compact JSON (how a test sees what reached the host) |
//! | `/history` | reply with the turn's history as a compact JSON array of `[role, text]` pairs, oldest first (how a test sees what the engine was given) |
//! | `/flood N PER_SECOND BYTES [T0_US]` | N durable `tool.start` events on a fixed schedule, for benchmarks (see [`super::flood`]), then reply |
//!
//! A first line starting with `/` but another word (`/usr/bin is ...`) is
//! plain text and echoed whole. A directive with bad arguments (`/sleep x`,
//! `/hang now`, `/tool` without a name, `/tool t {bad`, `/big -1`) fails the
//! turn with `turn.error` reason `engine_error` and a message naming the
//! directive, before anything is streamed.
//!
//! `compress` waits `--compress-delay-ms`, then answers
//! `{"summary":"Summary of K messages.","removed":K}` with K the length of
//! the history, worded exactly so even for K = 1.

use std::time::Duration;

use serde_json::{json, Value};
use tether_protocol::{Message, TodoItem, TurnStart};

use super::engine::{AsyncEngine, Cancel, CompressResult, TurnOutcome, TurnSink};
use super::flood::Flood;
use crate::{CompressError, DirectiveError};

/// The largest `/big` reply.
const MAX_BIG: u64 = 64 * 1024 * 1024;
/// The largest delta of a `/big` reply.
const BIG_CHUNK: usize = 1024;
/// `turn.error` reason for everything the engine rejects or fails at.
const ENGINE_ERROR: &str = "engine_error";
/// Exit status of `/crash`.
const CRASH_STATUS: i32 = 101;

pub struct EchoEngine {
    /// Between two deltas.
    delay: Duration,
    /// Before a compress answer.
    compress_delay: Duration,
}

impl EchoEngine {
    pub fn new(delay: Duration, compress_delay: Duration) -> Self {
        Self {
            delay,
            compress_delay,
        }
    }

    async fn play(
        &self,
        turn: &TurnStart,
        out: &TurnSink,
        cancel: &Cancel,
    ) -> Result<TurnOutcome, Stop> {
        let script = match Script::parse(&turn.prompt) {
            Ok(script) => script,
            Err(e) => {
                return Ok(TurnOutcome::Failed {
                    reason: ENGINE_ERROR.into(),
                    message: e.to_string(),
                })
            }
        };
        let reply = match script {
            Script::Reply(reply) => reply,
            Script::Config => Value::Object(turn.config.clone()).to_string(),
            Script::History => match turn.history.messages() {
                Ok(history) => {
                    Value::Array(history.iter().map(|m| json!([m.role, m.text])).collect())
                        .to_string()
                }
                Err(e) => {
                    return Ok(TurnOutcome::Failed {
                        reason: ENGINE_ERROR.into(),
                        message: format!("invalid history: {e}"),
                    })
                }
            },
            Script::Sleep { ms, reply } => {
                pause(Duration::from_millis(ms), cancel).await?;
                reply
            }
            Script::Hang => {
                out.delta("…").await?;
                cancel.cancelled().await;
                return Err(Stop);
            }
            Script::Crash { reply } => {
                let first = reply.split_inclusive(' ').next().unwrap_or("…");
                out.delta(first).await?;
                return Ok(TurnOutcome::Crash { code: CRASH_STATUS });
            }
            Script::Error(message) => {
                return Ok(TurnOutcome::Failed {
                    reason: ENGINE_ERROR.into(),
                    message,
                })
            }
            Script::Tool { name, args, reply } => {
                let tool_id = "tool_1";
                out.tool_start(tool_id, &name, args.clone()).await?;
                out.tool_complete(tool_id, &name, args, false).await?;
                reply
            }
            Script::Todo { items, reply } => {
                out.todo_updated(items).await?;
                reply
            }
            Script::Flood { flood, reply } => {
                flood.run(out, cancel).await?;
                reply
            }
            Script::Big(n) => {
                let text = "x".repeat(n);
                // ASCII only, so every byte index is a char boundary.
                let chunks = (0..n)
                    .step_by(BIG_CHUNK)
                    .map(|i| &text[i..n.min(i + BIG_CHUNK)]);
                self.stream(chunks, out, cancel).await?;
                return Ok(TurnOutcome::Complete { text });
            }
        };
        self.stream(reply.split_inclusive(' '), out, cancel).await?;
        Ok(TurnOutcome::Complete { text: reply })
    }

    /// One delta per item, `delay` apart.
    async fn stream<'t>(
        &self,
        deltas: impl Iterator<Item = &'t str>,
        out: &TurnSink,
        cancel: &Cancel,
    ) -> Result<(), Stop> {
        for (i, delta) in deltas.enumerate() {
            if i > 0 {
                pause(self.delay, cancel).await?;
            }
            if cancel.is_cancelled() {
                return Err(Stop);
            }
            out.delta(delta).await?;
        }
        Ok(())
    }
}

impl AsyncEngine for EchoEngine {
    const NAME: &'static str = "echo";

    async fn turn(&self, turn: TurnStart, out: &TurnSink, cancel: &Cancel) -> TurnOutcome {
        // Stopped by an interrupt, or stdout is gone (then nobody reads
        // the outcome anyway).
        self.play(&turn, out, cancel)
            .await
            .unwrap_or(TurnOutcome::Interrupted)
    }

    async fn summarize(
        &self,
        history: &[Message],
        _args: &Value,
    ) -> Result<CompressResult, CompressError> {
        tokio::time::sleep(self.compress_delay).await;
        let k = history.len();
        Ok(CompressResult {
            summary: format!("Summary of {k} messages."),
            removed: k as u64,
        })
    }
}

/// The turn stops early: cancelled, or stdout closed.
pub(super) struct Stop;

impl From<super::io::Closed> for Stop {
    fn from(_: super::io::Closed) -> Self {
        Stop
    }
}

/// Sleeps `d` unless cancelled first.
async fn pause(d: Duration, cancel: &Cancel) -> Result<(), Stop> {
    if d.is_zero() {
        return Ok(());
    }
    tokio::select! {
        () = tokio::time::sleep(d) => Ok(()),
        () = cancel.cancelled() => Err(Stop),
    }
}

/// What a prompt asks the echo engine to do.
#[derive(Debug, PartialEq)]
enum Script {
    Reply(String),
    Sleep {
        ms: u64,
        reply: String,
    },
    Hang,
    Crash {
        reply: String,
    },
    Error(String),
    Tool {
        name: String,
        args: Value,
        reply: String,
    },
    Todo {
        items: Vec<TodoItem>,
        reply: String,
    },
    Big(usize),
    Config,
    History,
    Flood {
        flood: Flood,
        reply: String,
    },
}

impl Script {
    /// `Err` is a directive with bad arguments (the turn fails with it).
    fn parse(prompt: &str) -> Result<Script, DirectiveError> {
        let (first, rest) = prompt.split_once('\n').unwrap_or((prompt, ""));
        let first = first.strip_suffix('\r').unwrap_or(first);
        let (word, args) = first.split_once(char::is_whitespace).unwrap_or((first, ""));
        let args = args.trim();
        let reply = rest.to_owned();
        let no_args = |directive: &'static str| {
            if args.is_empty() {
                Ok(())
            } else {
                Err(DirectiveError::NoArguments {
                    directive,
                    got: args.to_owned(),
                })
            }
        };
        Ok(match word {
            "/sleep" => Script::Sleep {
                ms: args.parse().map_err(|_| DirectiveError::Arguments {
                    directive: "/sleep",
                    needs: "a number of milliseconds".into(),
                    got: args.to_owned(),
                })?,
                reply,
            },
            "/hang" => {
                no_args("/hang")?;
                Script::Hang
            }
            "/config" => {
                no_args("/config")?;
                Script::Config
            }
            "/history" => {
                no_args("/history")?;
                Script::History
            }
            "/crash" => {
                no_args("/crash")?;
                Script::Crash { reply }
            }
            "/error" if args.is_empty() => Script::Error("engine error".into()),
            "/error" => Script::Error(args.into()),
            "/tool" => Script::tool(args, reply)?,
            "/todo" => Script::Todo {
                items: todo_items(args),
                reply,
            },
            "/big" => Script::big(args)?,
            "/flood" => Script::Flood {
                flood: Flood::parse(args)?,
                reply,
            },
            _ => Script::Reply(prompt.to_owned()),
        })
    }

    /// `/tool NAME JSON`.
    fn tool(args: &str, reply: String) -> Result<Script, DirectiveError> {
        let (name, json) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        if name.is_empty() {
            return Err(DirectiveError::ToolName);
        }
        let json = json.trim();
        let args = if json.is_empty() {
            json!({})
        } else {
            serde_json::from_str(json).map_err(|source| DirectiveError::ToolArgs {
                name: name.to_owned(),
                source,
            })?
        };
        Ok(Script::Tool {
            name: name.into(),
            args,
            reply,
        })
    }

    /// `/big BYTES`.
    fn big(args: &str) -> Result<Script, DirectiveError> {
        let n = args
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_BIG)
            .ok_or_else(|| DirectiveError::Arguments {
                directive: "/big",
                needs: format!("a number of bytes up to {MAX_BIG}"),
                got: args.to_owned(),
            })?;
        // Bounded by MAX_BIG, so it fits any usize tether runs on.
        Ok(Script::Big(usize::try_from(n).unwrap_or(usize::MAX)))
    }
}

/// `/todo A; B; C`: pending items numbered from 1.
fn todo_items(args: &str) -> Vec<TodoItem> {
    args.split(';')
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .enumerate()
        .map(|(i, text)| TodoItem {
            id: (i + 1).to_string(),
            text: text.into(),
            status: "pending".into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_prompts_and_unknown_slash_words_are_echoed_whole() {
        assert_eq!(
            Script::parse("hi there").ok(),
            Some(Script::Reply("hi there".into()))
        );
        assert_eq!(
            Script::parse("/usr/bin\nis a path").ok(),
            Some(Script::Reply("/usr/bin\nis a path".into()))
        );
    }

    #[test]
    fn directive_args_are_checked() {
        let words = |prompt: &str| Script::parse(prompt).err().map(|e| e.to_string());
        assert_eq!(
            words("/sleep x").as_deref(),
            Some("/sleep needs a number of milliseconds, got `x`")
        );
        assert_eq!(
            words("/hang now").as_deref(),
            Some("/hang takes no arguments, got `now`")
        );
        assert_eq!(
            words("/tool").as_deref(),
            Some("/tool needs a NAME and JSON args")
        );
        assert!(Script::parse("/hang now").is_err());
        assert!(Script::parse("/tool").is_err());
        assert!(Script::parse("/tool t {bad").is_err());
        assert!(Script::parse("/big -1").is_err());
        assert!(Script::parse("/history now").is_err());
        assert_eq!(
            Script::parse("/history\nignored").ok(),
            Some(Script::History)
        );
        assert_eq!(
            Script::parse("/sleep 5\r\nreply").ok(),
            Some(Script::Sleep {
                ms: 5,
                reply: "reply".into()
            })
        );
        assert_eq!(
            Script::parse("/error").ok(),
            Some(Script::Error("engine error".into()))
        );
    }
}
