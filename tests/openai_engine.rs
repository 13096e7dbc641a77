//! The `openai` engine (docs/ENGINES.md), black-box: the real
//! gateway runs `tether host --engine openai` against a small
//! OpenAI-compatible server written here, which streams real SSE over real
//! HTTP and reports what it was asked and when its connection closed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{complete, session_with, submit, tempdir, turn_events, Gateway};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Bounds every wait for something the model server sees.
const SEEN_WAIT: Duration = Duration::from_secs(30);

/// The API key the test hosts are given (through their environment).
const KEY: &str = "sk-test-9f8e7d";

/// What the model server observed.
#[derive(Debug)]
enum Seen {
    /// A `POST /v1/chat/completions`.
    Request {
        path: String,
        authorization: Option<String>,
        body: Value,
    },
    /// The client closed the connection of the request whose prompt (last
    /// message) this was, while the server held it open.
    Closed { prompt: String },
}

/// A local OpenAI-compatible server. What it answers depends on the last
/// message's content (the prompt), see [`respond`].
struct ModelServer {
    addr: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl ModelServer {
    async fn start() -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(handle(socket, tx.clone()));
            }
        });
        ModelServer { addr, seen }
    }

    async fn next(&mut self) -> Seen {
        tokio::time::timeout(SEEN_WAIT, self.seen.recv())
            .await
            .expect("the model server saw nothing in time")
            .expect("the model server is gone")
    }

    /// The next request's body, checking what every request must have.
    async fn request(&mut self) -> Value {
        match self.next().await {
            Seen::Request {
                path,
                authorization,
                body,
            } => {
                assert_eq!(path, "/v1/chat/completions");
                assert_eq!(authorization.as_deref(), Some(&*format!("Bearer {KEY}")));
                assert_eq!(body["stream"], true, "{body}");
                assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
                body
            }
            other => panic!("expected a request, got {other:?}"),
        }
    }
}

/// Reads one HTTP/1.1 request: (request line + headers, body).
async fn read_request(socket: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

async fn handle(mut socket: TcpStream, tx: mpsc::UnboundedSender<Seen>) {
    let Some((head, body)) = read_request(&mut socket).await else {
        return;
    };
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let _ = tx.send(Seen::Request {
        path,
        authorization: header(&head, "authorization"),
        body,
    });
    // A write error means the client went away; the scripts stop there.
    let _ = respond(&mut socket, &prompt, &tx).await;
}

/// A content chunk.
fn content(text: &str) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "model": "test-model",
           "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
}

fn finish() -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
}

const EVENT_STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
     cache-control: no-cache\r\nconnection: close\r\n\r\n";

async fn send(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    socket
        .write_all(format!("data: {data}\n\n").as_bytes())
        .await?;
    socket.flush().await
}

async fn send_chunks(socket: &mut TcpStream, chunks: &[Value]) -> std::io::Result<()> {
    for c in chunks {
        send(socket, &c.to_string()).await?;
    }
    Ok(())
}

/// Blocks until the client closes the connection.
async fn until_closed(socket: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// The server's behaviours, by prompt:
/// - `think`: reasoning in both spellings, a word, usage, `[DONE]`;
/// - `http500`: HTTP 500 with an OpenAI error body;
/// - `malformed` / `midstream` / `truncated`: one word, then a chunk that is
///   not JSON / an error object / the end of the body without `[DONE]`;
/// - `hold`: one word, then nothing until the client closes;
/// - `trickle`: a word every 200 ms, forever;
/// - a summary request (a compress): a two-part summary;
/// - anything else: "You said: PROMPT" in three chunks.
async fn respond(
    socket: &mut TcpStream,
    prompt: &str,
    tx: &mpsc::UnboundedSender<Seen>,
) -> std::io::Result<()> {
    if prompt == "http500" {
        let body = r#"{"error":{"message":"the model is on fire","type":"server_error"}}"#;
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await?;
        return socket.write_all(body.as_bytes()).await;
    }
    socket.write_all(EVENT_STREAM_HEAD.as_bytes()).await?;
    socket.write_all(b": keep-alive comment\n\n").await?;
    match prompt {
        "think" => {
            send_chunks(
                socket,
                &[
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
                    json!({"choices": [{"index": 0, "delta": {"reasoning_content": "Let me "}}]}),
                    json!({"choices": [{"index": 0, "delta": {"reasoning": "think."}}]}),
                    content("Done."),
                    finish(),
                    json!({"choices": [], "usage":
                        {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
                ],
            )
            .await?;
            send(socket, "[DONE]").await
        }
        "malformed" => {
            send_chunks(socket, &[content("Hel")]).await?;
            send(socket, "{not json").await
        }
        "midstream" => {
            send_chunks(socket, &[content("Hel")]).await?;
            send(socket, r#"{"error":{"message":"overloaded, try later"}}"#).await
        }
        "truncated" => send_chunks(socket, &[content("Hel")]).await,
        "hold" => {
            send_chunks(socket, &[content("Hel")]).await?;
            until_closed(socket).await;
            let _ = tx.send(Seen::Closed {
                prompt: prompt.to_owned(),
            });
            Ok(())
        }
        "trickle" => loop {
            send_chunks(socket, &[content(".")]).await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        },
        ask if ask.starts_with("Summarize the conversation") => {
            send_chunks(
                socket,
                &[content("The user "), content("said hello twice."), finish()],
            )
            .await?;
            send(socket, "[DONE]").await
        }
        other => {
            let chunks = [content("You "), content("said: "), content(other), finish()];
            send_chunks(socket, &chunks).await?;
            send(socket, "[DONE]").await
        }
    }
}

/// A gateway with one openai host pointed at `server`; `flags` are added to
/// the host's command line.
fn gateway(dir: &Path, server: &ModelServer, flags: &str) -> Gateway {
    let host = format!(
        "env TETHER_TEST_OPENAI_KEY={KEY} {} host --engine openai \
         --base-url http://{}/v1 --model test-model --api-key-env TETHER_TEST_OPENAI_KEY {flags}",
        env!("CARGO_BIN_EXE_tether"),
        server.addr
    );
    Gateway::start(dir, &["--hosts", "1", "--host-command", &host])
}

/// Creates a session (attached, with `params`) and drains `session.created`.
fn texts<'a>(events: &'a [Value], kind: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect()
}

/// The one `error` event's message of a failed turn.
fn error_message(events: &[Value]) -> String {
    assert_eq!(complete(events)["status"], "error", "{events:?}");
    assert_eq!(complete(events)["failure_reason"], "engine_error");
    let errors: Vec<&Value> = events.iter().filter(|e| e["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    errors[0]["payload"]["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_turn_streams_the_completion_and_sends_the_history() {
    let mut server = ModelServer::start().await;
    let dir = tempdir();
    let gw = gateway(dir.path(), &server, "");
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;

    let t = submit(&mut c, &id, "hi there").await;
    let body = server.request().await;
    assert_eq!(body["model"], "test-model");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "hi there"}])
    );
    let evs = turn_events(&mut c, &t).await;
    // Deltas already queued together may arrive merged (PROTOCOL 1.5):
    // what counts is the text they rebuild at their offsets.
    assert_eq!(texts(&evs, "message.delta").concat(), "You said: hi there");
    assert_eq!(complete(&evs)["status"], "complete");
    assert_eq!(complete(&evs)["text"], "You said: hi there");
    assert!(complete(&evs).get("usage").is_none(), "no usage was sent");

    // The next turn carries the first one as history.
    let t = submit(&mut c, &id, "again").await;
    let body = server.request().await;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "hi there"},
            {"role": "assistant", "content": "You said: hi there"},
            {"role": "user", "content": "again"},
        ])
    );
    let evs = turn_events(&mut c, &t).await;
    assert_eq!(complete(&evs)["text"], "You said: again");

    // A session's engine config picks the model and the sampling.
    let engine = json!({"model": "other-model", "temperature": 0.25, "max_tokens": 32,
                        "system": "Be terse."});
    let id2 = session_with(&mut c, json!({"engine": engine})).await;
    let t = submit(&mut c, &id2, "hello").await;
    let body = server.request().await;
    assert_eq!(body["model"], "other-model");
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hello"}])
    );
    assert_eq!(
        complete(&turn_events(&mut c, &t).await)["status"],
        "complete"
    );
}

#[tokio::test]
async fn reasoning_streams_apart_and_usage_reaches_message_complete() {
    let mut server = ModelServer::start().await;
    let dir = tempdir();
    let gw = gateway(dir.path(), &server, "");
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;

    let t = submit(&mut c, &id, "think").await;
    server.request().await;
    let evs = turn_events(&mut c, &t).await;
    assert_eq!(texts(&evs, "reasoning.delta").concat(), "Let me think.");
    assert_eq!(texts(&evs, "message.delta").concat(), "Done.");
    let done = complete(&evs);
    assert_eq!(done["status"], "complete");
    assert_eq!(done["text"], "Done.");
    assert_eq!(
        done["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15})
    );

    // Durable: the usage is in the stored event too.
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    let stored = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "message.complete")
        .expect("stored message.complete")
        .clone();
    assert_eq!(stored["payload"]["usage"]["total_tokens"], 15);
}

#[tokio::test]
async fn server_errors_fail_the_turn_with_a_clear_message() {
    let mut server = ModelServer::start().await;
    let dir = tempdir();
    let gw = gateway(dir.path(), &server, "");
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;

    let cases = [
        (
            "http500",
            "HTTP 500 Internal Server Error: the model is on fire",
        ),
        ("malformed", "a malformed chunk from the model server"),
        (
            "midstream",
            "the model server reported an error: overloaded, try later",
        ),
        (
            "truncated",
            "ended the stream before `data: [DONE]` or a finish_reason",
        ),
    ];
    for (prompt, want) in cases {
        let t = submit(&mut c, &id, prompt).await;
        server.request().await;
        let evs = turn_events(&mut c, &t).await;
        let message = error_message(&evs);
        assert!(message.contains(want), "{prompt}: {message}");
        if prompt != "http500" {
            // What streamed before the failure is kept.
            assert_eq!(complete(&evs)["text"], "Hel", "{prompt}");
        }
    }

    // The host is still good.
    let t = submit(&mut c, &id, "after").await;
    server.request().await;
    assert_eq!(
        complete(&turn_events(&mut c, &t).await)["status"],
        "complete"
    );
}

#[tokio::test]
async fn an_unreachable_server_fails_the_turn() {
    // A port that was just free: nothing listens there.
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = ModelServer {
        addr: free.local_addr().unwrap(),
        seen: mpsc::unbounded_channel().1,
    };
    drop(free);
    let dir = tempdir();
    let gw = gateway(dir.path(), &server, "");
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;
    let t = submit(&mut c, &id, "hi").await;
    let message = error_message(&turn_events(&mut c, &t).await);
    let want = format!(
        "cannot reach the model server at http://{}/v1/chat/completions",
        server.addr
    );
    assert!(message.starts_with(&want), "{message}");
}

#[tokio::test]
async fn a_stalled_or_endless_stream_ends_at_its_timeout() {
    let mut server = ModelServer::start().await;
    let dir = tempdir();
    let gw = gateway(
        dir.path(),
        &server,
        "--stall-timeout-s 1 --request-timeout-s 3",
    );
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;

    let t = submit(&mut c, &id, "hold").await;
    server.request().await;
    let evs = turn_events(&mut c, &t).await;
    let message = error_message(&evs);
    assert!(
        message.contains("sent nothing for 1 s (the stall timeout"),
        "{message}"
    );
    assert_eq!(complete(&evs)["text"], "Hel");
    // Giving up closed the connection.
    assert!(matches!(server.next().await, Seen::Closed { .. }));

    // A server that never stops sending never stalls; the request timeout
    // ends it.
    let t = submit(&mut c, &id, "trickle").await;
    server.request().await;
    let evs = turn_events(&mut c, &t).await;
    let message = error_message(&evs);
    assert!(
        message.contains("longer than 3 s (the request timeout"),
        "{message}"
    );
}

#[tokio::test]
async fn an_interrupt_closes_the_request() {
    let mut server = ModelServer::start().await;
    let dir = tempdir();
    let gw = gateway(dir.path(), &server, "");
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;

    let t = submit(&mut c, &id, "hold").await;
    server.request().await;
    // Wait for the first word, so the response is being streamed.
    loop {
        let e = c.next_event().await;
        assert_ne!(e["type"], "message.complete", "the turn ended: {e}");
        if e["type"] == "message.delta" {
            assert_eq!(e["payload"]["text"], "Hel");
            break;
        }
    }
    let r = c.ok("session.interrupt", json!({"session_id": id})).await;
    assert_eq!(r["status"], "interrupted");
    let evs = turn_events(&mut c, &t).await;
    assert_eq!(complete(&evs)["status"], "interrupted");
    assert_eq!(complete(&evs)["text"], "Hel");
    // The server sees its connection closed: the generation was cancelled.
    match server.next().await {
        Seen::Closed { prompt } => assert_eq!(prompt, "hold"),
        other => panic!("expected the connection to close, got {other:?}"),
    }

    // And the host goes on.
    let t = submit(&mut c, &id, "after").await;
    server.request().await;
    assert_eq!(
        complete(&turn_events(&mut c, &t).await)["text"],
        "You said: after"
    );
}

#[tokio::test]
async fn compress_takes_the_summary_from_the_model() {
    let mut server = ModelServer::start().await;
    let dir = tempdir();
    let gw = gateway(dir.path(), &server, "");
    let mut c = gw.client().await;
    let id = session_with(&mut c, json!({})).await;
    for prompt in ["hello", "hello again"] {
        let t = submit(&mut c, &id, prompt).await;
        server.request().await;
        turn_events(&mut c, &t).await;
    }

    let r = c
        .ok(
            "session.compress",
            json!({"session_id": id, "focus": "greetings"}),
        )
        .await;
    assert_eq!(r["status"], "compressed", "{r}");
    assert_eq!(r["removed"], 4);
    let body = server.request().await;
    assert_eq!(body["model"], "test-model");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5, "{body}");
    assert_eq!(messages[0], json!({"role": "user", "content": "hello"}));
    assert_eq!(
        messages[3],
        json!({"role": "assistant", "content": "You said: hello again"})
    );
    let ask = messages[4]["content"].as_str().unwrap();
    assert!(ask.starts_with("Summarize the conversation"), "{ask}");
    assert!(ask.ends_with("Focus on: greetings"), "{ask}");
    loop {
        let e = c.next_event().await;
        if e["type"] == "session.compacted" {
            assert_eq!(e["payload"]["summary"], "The user said hello twice.");
            assert_eq!(e["payload"]["removed"], 4);
            break;
        }
    }

    // The next turn sees the summary in place of the history.
    let t = submit(&mut c, &id, "and now?").await;
    let body = server.request().await;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "The user said hello twice."},
            {"role": "user", "content": "and now?"},
        ])
    );
    turn_events(&mut c, &t).await;
}
