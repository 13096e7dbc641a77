//! The HTTP side of the openai engine: one streamed chat completion, with
//! the two clocks that bound it and the errors it can end in.
//!
//! reqwest's own timeouts are not used: its errors would say "operation
//! timed out" without saying which limit it was, and a turn's error message
//! is what its user reads. The stall clock restarts with every byte that
//! arrives (response head included, so a server that takes long to load a
//! model counts as stalled); the request clock runs from the send to the end
//! of the stream.

use std::collections::VecDeque;
use std::error::Error as _;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use tether_protocol::mask_urls;
use tokio::time::Instant;

use super::chunk::{self, Chunk, Malformed};
use super::sse::{SseDecoder, SseError};
use crate::HostError;

/// The most of an error response's body that is read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How a completion failed; the `Display` is the turn's error message.
#[derive(Debug, thiserror::Error)]
pub enum CompletionError {
    #[error("cannot reach the model server at {url}: {detail}")]
    Connect { url: String, detail: String },
    #[error("the model server answered HTTP {status}: {message}")]
    Http { status: String, message: String },
    #[error("the model server answered {content_type}, not an event stream: {message}")]
    NotAStream {
        content_type: String,
        message: String,
    },
    #[error("the model server sent nothing for {0} s (the stall timeout, --stall-timeout-s)")]
    Stalled(u64),
    #[error("the model request took longer than {0} s (the request timeout, --request-timeout-s)")]
    TimedOut(u64),
    #[error("the model server's response broke off: {0}")]
    Body(String),
    #[error("the model server's event stream is broken: {0}")]
    Framing(#[from] SseError),
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("the model server reported an error: {0}")]
    Server(String),
    #[error("the model server ended the stream before `data: [DONE]` or a finish_reason")]
    Truncated,
}

/// Where and how to ask.
pub struct ModelClient {
    http: reqwest::Client,
    /// `BASE_URL/chat/completions`.
    endpoint: String,
    /// The endpoint as errors show it, with any credentials in it masked
    /// (an error reaches the turn's clients and the logs).
    shown: String,
    /// `Bearer KEY`, marked sensitive so that it is never printed.
    authorization: Option<HeaderValue>,
    stall: Duration,
    total: Duration,
}

impl ModelClient {
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        stall: Duration,
        total: Duration,
    ) -> Result<Self, HostError> {
        let base = reqwest::Url::parse(base_url).map_err(|e| {
            HostError::Usage(mask_urls(&format!(
                "--base-url {base_url:?} is not a URL: {e}"
            )))
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(HostError::Usage(mask_urls(&format!(
                "--base-url must be an http:// or https:// URL, not {base_url:?}"
            ))));
        }
        let authorization = match api_key {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    HostError::Usage("the API key holds characters a header cannot carry".into())
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(stall)
            .build()?;
        let endpoint = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Ok(Self {
            http,
            shown: mask_urls(&endpoint),
            endpoint,
            authorization,
            stall,
            total,
        })
    }

    /// Sends `body` and waits for the response head. A 2xx event stream is
    /// returned to be read; anything else is the error it amounts to.
    pub async fn start(&self, body: &Value) -> Result<Completion, CompletionError> {
        let clock = Clock {
            deadline: Instant::now() + self.total,
            stall: self.stall,
            total: self.total,
        };
        let mut request = self
            .http
            .post(&self.endpoint)
            .header(ACCEPT, "text/event-stream")
            .json(body);
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let response = clock
            .wait(request.send())
            .await?
            .map_err(|e| CompletionError::Connect {
                url: self.shown.clone(),
                detail: causes(&e),
            })?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut stream: BodyStream = Box::pin(response.bytes_stream());
        if !status.is_success() {
            let body = clock.read_to_limit(&mut stream).await?;
            return Err(CompletionError::Http {
                status: status.to_string(),
                message: chunk::error_body_message(&body),
            });
        }
        if content_type.starts_with("application/json") {
            let body = clock.read_to_limit(&mut stream).await?;
            return Err(CompletionError::NotAStream {
                content_type,
                message: chunk::error_body_message(&body),
            });
        }
        Ok(Completion {
            stream,
            clock,
            decoder: Some(SseDecoder::new()),
            ready: VecDeque::new(),
        })
    }
}

type BodyStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A response being read. Dropping it closes the connection, which is how
/// an interrupt cancels the request on the server.
pub struct Completion {
    stream: BodyStream,
    clock: Clock,
    /// `None` once the body has ended.
    decoder: Option<SseDecoder>,
    /// Decoded `data` not yet returned.
    ready: VecDeque<String>,
}

impl Completion {
    /// The next chunk; `None` when the body ended (with or without
    /// `[DONE]`: the caller decides whether that was early).
    pub async fn next(&mut self) -> Result<Option<Chunk>, CompletionError> {
        loop {
            if let Some(data) = self.ready.pop_front() {
                return Ok(Some(chunk::parse(&data)?));
            }
            let Some(decoder) = self.decoder.as_mut() else {
                return Ok(None);
            };
            match self.clock.wait(self.stream.next()).await? {
                Some(Ok(bytes)) => self.ready.extend(decoder.push(&bytes)?),
                Some(Err(e)) => return Err(CompletionError::Body(causes(&e))),
                None => {
                    if let Some(decoder) = self.decoder.take() {
                        self.ready.extend(decoder.finish());
                    }
                }
            }
        }
    }
}

/// The two limits of one request.
#[derive(Debug, Clone, Copy)]
struct Clock {
    deadline: Instant,
    stall: Duration,
    total: Duration,
}

impl Clock {
    /// `f`, unless the stall timeout or the deadline comes first.
    async fn wait<F: std::future::Future>(&self, f: F) -> Result<F::Output, CompletionError> {
        let stall_at = Instant::now() + self.stall;
        let until = stall_at.min(self.deadline);
        match tokio::time::timeout_at(until, f).await {
            Ok(out) => Ok(out),
            Err(_) if until == self.deadline => {
                Err(CompletionError::TimedOut(self.total.as_secs()))
            }
            Err(_) => Err(CompletionError::Stalled(self.stall.as_secs())),
        }
    }

    /// An error response's body, the first [`MAX_ERROR_BODY`] bytes of it.
    async fn read_to_limit(&self, stream: &mut BodyStream) -> Result<String, CompletionError> {
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY {
            match self.wait(stream.next()).await? {
                Some(Ok(bytes)) => body.extend_from_slice(&bytes),
                Some(Err(e)) => return Err(CompletionError::Body(causes(&e))),
                None => break,
            }
        }
        body.truncate(MAX_ERROR_BODY);
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// An error's causes, outermost first, without reqwest's "error sending
/// request for url (...)" (the URL is said elsewhere): "client error
/// (Connect): tcp connect error: Connection refused (os error 111)". Any
/// URL a cause names is shown masked.
fn causes(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    let text = if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    };
    mask_urls(&text)
}
