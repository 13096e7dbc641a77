//! The `openai` engine (docs/ENGINES.md): every turn is one streamed chat
//! completion against an OpenAI-compatible server (OpenAI, Ollama, vLLM,
//! llama.cpp's server), so a gateway can front a local or hosted model
//! with nothing in between.
//!
//! - the session's history and the prompt become `messages`; the turn's
//!   `config` may pick `model`, `temperature`, `top_p`, `max_tokens` and a
//!   `system` message (see [`request`]);
//! - `delta.content` streams as `message.delta`, `delta.reasoning_content`
//!   or `delta.reasoning` as `reasoning.delta`, and the last chunk's `usage`
//!   goes out with `turn.end`;
//! - an interrupt drops the response, which closes the connection and so
//!   stops the generation on the server;
//! - a compress asks the same server for a summary of the history.

mod chunk;
mod client;
mod request;
mod sse;

use std::time::Duration;

use clap::Args;
use serde_json::Value;
use tether_protocol::{mask_urls, Message, TurnStart};

use super::engine::{AsyncEngine, Cancel, CompressResult, TurnOutcome, TurnSink};
use crate::{CompressError, HostError};
use chunk::Chunk;
pub(crate) use client::CompletionError;
use client::{Completion, ModelClient};

/// `turn.error` reason for everything that goes wrong with the model.
const ENGINE_ERROR: &str = "engine_error";
/// The longest summary taken from the model.
const MAX_SUMMARY: usize = 1024 * 1024;

/// Flags of `tether host --engine openai`.
#[derive(Debug, Clone, Args)]
pub struct OpenAiArgs {
    /// openai: the server's API root, e.g. `http://127.0.0.1:11434/v1`
    /// (`/chat/completions` is appended).
    #[arg(long, required_if_eq("engine", "openai"))]
    pub base_url: Option<String>,
    /// openai: the model asked for, unless the session's engine config names
    /// another.
    #[arg(long, required_if_eq("engine", "openai"))]
    pub model: Option<String>,
    /// openai: the environment variable that holds the API key; unset or
    /// empty sends no Authorization header (what local servers want).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// openai: seconds without a byte from the server before a turn fails.
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub stall_timeout_s: u64,
    /// openai: seconds one request (a turn or a compress) may take in all.
    #[arg(long, default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub request_timeout_s: u64,
}

pub struct OpenAiEngine {
    client: ModelClient,
    /// `--model`.
    model: String,
}

impl OpenAiEngine {
    pub fn new(args: &OpenAiArgs) -> Result<Self, HostError> {
        let (Some(base_url), Some(model)) = (&args.base_url, &args.model) else {
            return Err(HostError::Usage(
                "--engine openai needs --base-url and --model".into(),
            ));
        };
        let api_key = std::env::var(&args.api_key_env)
            .ok()
            .filter(|k| !k.is_empty());
        tracing::info!(
            base_url = %mask_urls(base_url),
            %model,
            api_key_env = args.api_key_env,
            api_key = api_key.is_some(),
            "openai engine"
        );
        let client = ModelClient::new(
            base_url,
            api_key,
            Duration::from_secs(args.stall_timeout_s),
            Duration::from_secs(args.request_timeout_s),
        )?;
        Ok(Self {
            client,
            model: model.clone(),
        })
    }
}

impl AsyncEngine for OpenAiEngine {
    const NAME: &'static str = "openai";

    async fn turn(&self, turn: TurnStart, out: &TurnSink, cancel: &Cancel) -> TurnOutcome {
        let history = match turn.history.messages() {
            Ok(history) => history,
            Err(e) => return failed(format!("invalid history: {e}")),
        };
        let body = match request::turn_body(&self.model, &history, &turn.prompt, &turn.config) {
            Ok(body) => body,
            Err(e) => return failed(e.to_string()),
        };
        tracing::debug!(model = %body["model"], messages = history.len() + 1, "completion");
        let started = tokio::select! {
            biased;
            () = cancel.cancelled() => return TurnOutcome::Interrupted,
            started = self.client.start(&body) => started,
        };
        let mut completion = match started {
            Ok(completion) => completion,
            Err(e) => return failed(e.to_string()),
        };
        let mut finished = false;
        loop {
            let next = tokio::select! {
                // An interrupt wins over a chunk that is already waiting;
                // returning drops `completion`, which closes the connection.
                biased;
                () = cancel.cancelled() => return TurnOutcome::Interrupted,
                next = completion.next() => next,
            };
            let chunk = match next {
                Ok(Some(chunk)) => chunk,
                Ok(None) if finished => break,
                Ok(None) => return failed(CompletionError::Truncated.to_string()),
                Err(e) => return failed(e.to_string()),
            };
            let sent = match chunk {
                Chunk::Done => break,
                Chunk::Error(message) => {
                    return failed(CompletionError::Server(message).to_string())
                }
                Chunk::Delta {
                    content,
                    reasoning,
                    finish_reason,
                    usage,
                } => {
                    finished |= finish_reason.is_some();
                    if let Some(usage) = usage {
                        out.set_usage(usage);
                    }
                    forward(out, reasoning.as_deref(), content.as_deref()).await
                }
            };
            if sent.is_err() {
                // stdout is gone: nobody reads the outcome anyway.
                return TurnOutcome::Interrupted;
            }
        }
        TurnOutcome::Complete { text: out.text() }
    }

    async fn summarize(
        &self,
        history: &[Message],
        args: &Value,
    ) -> Result<CompressResult, CompressError> {
        let body = request::summary_body(&self.model, history, args);
        let completion = self.client.start(&body).await?;
        let summary = collect(completion).await?;
        let summary = summary.trim();
        if summary.is_empty() {
            return Err(CompressError::Empty);
        }
        Ok(CompressResult {
            summary: summary.to_owned(),
            removed: history.len() as u64,
        })
    }
}

/// Passes a chunk's reasoning, then its text, on to the client.
async fn forward(
    out: &TurnSink,
    reasoning: Option<&str>,
    content: Option<&str>,
) -> Result<(), super::io::Closed> {
    if let Some(reasoning) = reasoning {
        out.reasoning_delta(reasoning).await?;
    }
    if let Some(content) = content {
        out.delta(content).await?;
    }
    Ok(())
}

/// The whole text of a completion (a compress: nothing is streamed, and
/// reasoning is not part of the summary).
async fn collect(mut completion: Completion) -> Result<String, CompressError> {
    let mut text = String::new();
    let mut finished = false;
    loop {
        match completion.next().await? {
            None if finished => break,
            None => return Err(CompletionError::Truncated.into()),
            Some(Chunk::Done) => break,
            Some(Chunk::Error(message)) => return Err(CompletionError::Server(message).into()),
            Some(Chunk::Delta {
                content,
                finish_reason,
                ..
            }) => {
                finished |= finish_reason.is_some();
                let content = content.unwrap_or_default();
                if text.len() + content.len() > MAX_SUMMARY {
                    return Err(CompressError::TooLong { limit: MAX_SUMMARY });
                }
                text.push_str(&content);
            }
        }
    }
    Ok(text)
}

fn failed(message: String) -> TurnOutcome {
    tracing::info!(error = %message, "the model request failed");
    TurnOutcome::Failed {
        reason: ENGINE_ERROR.into(),
        message,
    }
}
