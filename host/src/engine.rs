//! The `Engine` trait: what a compute host runs turns with (`echo`,
//! `command`, `openai`), and what an engine is given to do it.
//!
//! An engine only produces: it streams events into a [`TurnSink`] and returns
//! a [`TurnOutcome`]. The host loop owns everything around it: parsing
//! frames, running each turn as its own task, interrupts, writing `turn.end`
//! / `turn.error`, heartbeats and shutdown. So an engine cannot forget to end
//! a turn, and an interrupt works even for an engine that ignores its
//! [`Cancel`] (the host stops polling it after a grace period).

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use tether_protocol::{
    to_raw, FromHost, HostEvent, Message, TextPayload, TodoItem, Todos, ToolCompletePayload,
    ToolStartPayload, TurnId, TurnStart,
};
use tokio::sync::watch;

use super::io::{Closed, Writer};
use crate::CompressError;

/// A compute engine. Object safe (boxed futures), so the host holds an
/// `Arc<dyn Engine>` chosen by `--engine`. Engines implement
/// [`AsyncEngine`] and get this for free.
pub trait Engine: Send + Sync + 'static {
    /// The name announced in `hello` (`"echo"`).
    fn name(&self) -> &'static str;

    /// Runs one turn to its end. Events go to `out`; the returned outcome
    /// becomes the turn's last frame. When `cancel` fires (an interrupt or a
    /// shutdown) the engine should stop soon and return
    /// [`TurnOutcome::Interrupted`]; the host then reports the text streamed
    /// so far.
    fn run_turn(
        &self,
        turn: TurnStart,
        out: TurnSink,
        cancel: Cancel,
    ) -> BoxFuture<'_, TurnOutcome>;

    /// `control` op `compress`: summarizes `history`. `Err`'s text is the
    /// message of a `control.error`.
    fn compress<'a>(
        &'a self,
        history: &'a [Message],
        args: &'a Value,
    ) -> BoxFuture<'a, Result<CompressResult, CompressError>>;
}

/// What an engine writes: two plain async functions. The blanket impl
/// below turns them into the object-safe [`Engine`] the host loop holds,
/// so no engine writes the boxing itself.
pub trait AsyncEngine: Send + Sync + 'static {
    /// The name announced in `hello`.
    const NAME: &'static str;

    /// [`Engine::run_turn`].
    fn turn(
        &self,
        turn: TurnStart,
        out: &TurnSink,
        cancel: &Cancel,
    ) -> impl Future<Output = TurnOutcome> + Send;

    /// [`Engine::compress`].
    fn summarize(
        &self,
        history: &[Message],
        args: &Value,
    ) -> impl Future<Output = Result<CompressResult, CompressError>> + Send;
}

impl<E: AsyncEngine> Engine for E {
    fn name(&self) -> &'static str {
        E::NAME
    }

    fn run_turn(
        &self,
        turn: TurnStart,
        out: TurnSink,
        cancel: Cancel,
    ) -> BoxFuture<'_, TurnOutcome> {
        Box::pin(async move { self.turn(turn, &out, &cancel).await })
    }

    fn compress<'a>(
        &'a self,
        history: &'a [Message],
        args: &'a Value,
    ) -> BoxFuture<'a, Result<CompressResult, CompressError>> {
        Box::pin(self.summarize(history, args))
    }
}

/// How an engine's turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// `turn.end` status `complete` with the whole reply (normally the
    /// concatenation of the `message.delta`s).
    Complete { text: String },
    /// `turn.end` status `interrupted`; its text is what the turn streamed
    /// in `message.delta`s so far.
    Interrupted,
    /// `turn.error`, e.g. reason `engine_error`.
    Failed { reason: String, message: String },
    /// Fault injection (echo's `/crash`): the host flushes what was sent and
    /// exits at once with `code`, ending nothing.
    Crash { code: i32 },
}

/// `control.ack`'s result for `compress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompressResult {
    pub summary: String,
    /// How many history messages the summary replaces.
    pub removed: u64,
}

/// A cancellation flag: set once, observed by any number of clones.
#[derive(Debug, Clone)]
pub struct Cancel {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::Sender::new(false)),
        }
    }

    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once [`Cancel::cancel`] has been called (at once if it was).
    pub async fn cancelled(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so `wait_for` cannot see it dropped.
        let _ = rx.wait_for(|cancelled| *cancelled).await;
    }
}

/// Where an engine streams a turn's events. Every method writes one `event`
/// frame for this turn (through the host's single stdout writer, waiting
/// while its queue is full) and fails only when stdout is gone.
///
/// Payloads are sent without `offset` or a meaningful `revision`: the
/// gateway computes both (PROTOCOL 1.10).
#[derive(Clone)]
pub struct TurnSink {
    turn_id: TurnId,
    writer: Writer,
    /// The assistant text streamed so far, for an interrupted `turn.end`.
    text: Arc<Mutex<String>>,
    /// Token counts for `turn.end`, when the engine's model reported them.
    usage: Arc<Mutex<Option<Value>>>,
}

impl TurnSink {
    pub(super) fn new(turn_id: TurnId, writer: Writer) -> Self {
        Self {
            turn_id,
            writer,
            text: Arc::default(),
            usage: Arc::default(),
        }
    }

    /// `message.delta` `{"text"}`.
    pub async fn delta(&self, text: &str) -> Result<(), Closed> {
        self.event("message.delta", &TextPayload { text: text.into() })
            .await?;
        // No await between a successful send and this append, so the text
        // matches what went out even if the turn is dropped right here.
        self.text
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_str(text);
        Ok(())
    }

    /// `reasoning.delta` `{"text"}` (not part of the reply text).
    pub async fn reasoning_delta(&self, text: &str) -> Result<(), Closed> {
        self.event("reasoning.delta", &TextPayload { text: text.into() })
            .await
    }

    /// `tool.start` `{"tool_id","name","args"}`.
    pub async fn tool_start(&self, tool_id: &str, name: &str, args: Value) -> Result<(), Closed> {
        let payload = ToolStartPayload {
            tool_id: tool_id.into(),
            name: name.into(),
            args,
        };
        self.event("tool.start", &payload).await
    }

    /// `tool.complete` `{"tool_id","name","result","is_error"}`.
    pub async fn tool_complete(
        &self,
        tool_id: &str,
        name: &str,
        result: Value,
        is_error: bool,
    ) -> Result<(), Closed> {
        let payload = ToolCompletePayload {
            tool_id: tool_id.into(),
            name: name.into(),
            result,
            is_error,
        };
        self.event("tool.complete", &payload).await
    }

    /// `todo.updated`: the full list. The revision sent is 1; the gateway
    /// assigns the real one.
    pub async fn todo_updated(&self, items: Vec<TodoItem>) -> Result<(), Closed> {
        let payload = Todos { items, revision: 1 };
        self.event("todo.updated", &payload).await
    }

    /// Any event type with any payload; the gateway decides what it accepts.
    pub async fn event<P: Serialize>(&self, kind: &str, payload: &P) -> Result<(), Closed> {
        // Straight to JSON text, no `Value` tree: these payloads are plain
        // structs and JSON values, whose serialization cannot fail.
        let frame = FromHost::Event {
            turn_id: self.turn_id.clone(),
            event: HostEvent {
                kind: kind.into(),
                payload: to_raw(payload).into(),
            },
        };
        self.writer.send(&frame).await
    }

    /// Waits until everything sent so far is on stdout.
    pub async fn flush(&self) -> Result<(), Closed> {
        self.writer.flush().await
    }

    /// The `message.delta` text streamed so far.
    pub fn text(&self) -> String {
        self.text
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the turn's token counts (an object, e.g. an OpenAI `usage`);
    /// they go out with `turn.end`. The last call wins.
    pub fn set_usage(&self, usage: Value) {
        *self.usage.lock().unwrap_or_else(PoisonError::into_inner) = Some(usage);
    }

    /// What [`TurnSink::set_usage`] recorded.
    pub fn usage(&self) -> Option<Value> {
        self.usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
