//! `GET /v1/ai-sdk/chat/{id}/messages` is bounded as docs/PROTOCOL.md
//! ("Front-end routes") says: at most `--max-resume-messages` messages in
//! the chat's segment (the bound of a resume's transcript) and 200,000
//! events; past the first, 413 with a body that names it (not the
//! resume's "retry with omit_messages", which means nothing here).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::http::http;
use common::{tempdir, Gateway};
use serde_json::json;

/// One prompt on chat `id`, read to its end.
async fn post(gw: &Gateway, id: &str, text: &str) {
    let body = json!({"id": id, "messages": [
        {"id": format!("u-{text}"), "role": "user", "parts": [{"type": "text", "text": text}]}]});
    let r = http(
        &gw.addr,
        "POST",
        "/v1/ai-sdk/chat",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_over_the_message_bound_is_413_naming_it() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &["--max-resume-messages", "4"]);
    post(&gw, "chat-1", "one").await;
    post(&gw, "chat-1", "two").await;
    let r = http(&gw.addr, "GET", "/v1/ai-sdk/chat/chat-1/messages", &[], b"").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().as_array().map(Vec::len), Some(4), "at the bound");

    post(&gw, "chat-1", "three").await;
    let r = http(&gw.addr, "GET", "/v1/ai-sdk/chat/chat-1/messages", &[], b"").await;
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 413, "{body}");
    assert!(body.contains("--max-resume-messages"), "{body}");
}
