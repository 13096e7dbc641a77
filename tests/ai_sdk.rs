//! The Vercel AI SDK's own chat client against the gateway's AI SDK routes
//! (docs/PROTOCOL.md "The AI SDK routes"): `AbstractChat` with
//! `DefaultChatTransport` and `readUIMessageStream` from the `ai` package,
//! 6.x (and 7.x where noted), run by tests/frontends/ai_sdk.mjs against the
//! real binary. Turns are made long with the echo engine's per-word delay
//! so that they can be cut, joined and stopped mid-answer; every wait is
//! for a count of deltas or an event, never for a time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "frontends/harness.rs"]
mod harness;

use common::http::http;
use common::terminal::Attached;
use common::{Backend, Gateway};
use harness::{available, run, text_of, words, Scenario};
use serde_json::{json, Value};

const SCRIPT: &str = "ai_sdk.mjs";

/// A gateway whose echo engine waits 40 ms between words.
fn gateway(dir: &std::path::Path, extra: &[&str]) -> Gateway {
    gateway_on(&Backend::Sqlite, dir, extra)
}

fn gateway_on(backend: &Backend, dir: &std::path::Path, extra: &[&str]) -> Gateway {
    let host = format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    );
    let mut args = vec!["--host-command", host.as_str()];
    args.extend_from_slice(extra);
    Gateway::start_on(backend, dir, &args)
}

/// A scenario run off the async test's threads.
async fn run_async(scenario: &'static str, env: Vec<(&'static str, String)>) -> Value {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run(SCRIPT, scenario, &env)
    })
    .await
    .expect("the scenario's thread")
}

// The stores' own rules meet these routes here: a chat's session created
// under its derived id (and found there), and a replacing prompt read back
// after a restart.
backends!(
    a_chat_is_created_once_and_found_again,
    two_first_requests_at_once_make_one_session,
    regenerate_replaces_the_answer_in_the_history_too
);

fn url(gw: &Gateway) -> String {
    format!("http://{}", gw.addr)
}

fn assistants(messages: &Value) -> Vec<&Value> {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect()
}

fn send_whole_answer(package: &str) {
    if !available("ai_sdk::send") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let prompt = "hello from the chat";
    let r = run(
        SCRIPT,
        "send",
        &[
            ("TETHER_URL", &url(&gw)),
            ("PROMPT", prompt),
            ("AI_PACKAGE", package),
        ],
    );
    assert_eq!(r["status"], "ready", "{r}");
    let messages = r["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{r}");
    let answer = &messages[1];
    let turn = answer["id"].as_str().expect("id");
    assert!(turn.starts_with("t_"), "the message is the turn: {turn}");
    assert_eq!(text_of(answer), prompt);
    assert_eq!(answer["metadata"]["tether"]["status"], "complete");
    let session = r["responses"][0]["session"]
        .as_str()
        .expect("session header");
    assert!(session.starts_with("s_chat_"), "{session}");
    assert_eq!(answer["metadata"]["tether"]["sessionId"], session);
    // A reload shows the same, under the same ids.
    let t = &r["transcript"]["messages"];
    let ids: Vec<&str> = t
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![format!("{turn}-user").as_str(), turn]);
    assert_eq!(text_of(&t[0]), prompt);
    assert_eq!(text_of(&t[1]), prompt);
}

#[test]
fn a_prompt_streams_its_whole_answer_ai6() {
    send_whole_answer("ai");
}

#[test]
fn a_prompt_streams_its_whole_answer_ai7() {
    send_whole_answer("ai7");
}

#[test]
fn a_tool_turn_shows_the_call_and_its_result() {
    if !available("ai_sdk::tool") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "send",
        &[
            ("TETHER_URL", &url(&gw)),
            ("PROMPT", "/tool lookup {\"q\":1}\nfound it"),
        ],
    );
    assert_eq!(r["status"], "ready", "{r}");
    for answer in [&r["messages"][1], &r["transcript"]["messages"][1]] {
        let tool = answer["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "dynamic-tool")
            .unwrap_or_else(|| panic!("no tool part: {answer}"));
        assert_eq!(tool["toolName"], "lookup");
        assert_eq!(tool["state"], "output-available");
        assert_eq!(tool["input"], json!({"q": 1}));
        assert_eq!(tool["output"], json!({"q": 1}));
        assert_eq!(text_of(answer), "found it");
    }
}

#[test]
fn a_failed_turn_ends_in_error_with_its_message() {
    if !available("ai_sdk::failed") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "send",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", "/error boom")],
    );
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"], "boom");
    assert_eq!(r["errors"], json!(["boom"]), "reported once");
    for answer in [&r["messages"][1], &r["transcript"]["messages"][1]] {
        let tether = &answer["metadata"]["tether"];
        assert_eq!(tether["status"], "error", "{answer}");
        assert_eq!(tether["failureReason"], "engine_error");
        assert_eq!(tether["error"], "boom");
    }
}

#[test]
fn stop_from_another_client_ends_the_stream_with_abort() {
    if !available("ai_sdk::stop") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    // `/hang` streams "…" and never ends by itself.
    let r = run(
        SCRIPT,
        "stop",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", "/hang")],
    );
    assert_eq!(r["stopped"]["status"], 200, "{r}");
    assert_eq!(r["stopped"]["body"], "{\"status\":\"interrupted\"}");
    assert_eq!(r["status"], "ready", "an abort is no error: {r}");
    let answer = &r["messages"][1];
    assert_eq!(text_of(answer), "…");
    assert_eq!(answer["metadata"]["tether"]["status"], "interrupted");
    assert_eq!(
        r["transcript"]["messages"][1]["metadata"]["tether"]["status"],
        "interrupted"
    );
}

fn cut_and_resume(package: &str) {
    if !available("ai_sdk::cut_resume") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let prompt = words(400);
    let r = run(
        SCRIPT,
        "cut-resume",
        &[
            ("TETHER_URL", &url(&gw)),
            ("PROMPT", &prompt),
            ("AI_PACKAGE", package),
        ],
    );
    // Cut after 3 deltas: the chat saw a network error, with part of the
    // answer (what its pipeline had read when the cut came).
    assert_eq!(r["cut"]["status"], "error", "{r}");
    let cut = text_of(&r["cut"]["messages"][1]);
    assert!(prompt.starts_with(&cut), "{cut:?}");
    // The resume replayed the turn from its start under the same id, then
    // went on live until the stop: one answer, each word once, exactly
    // the text the turn ended with.
    assert_eq!(r["responses"][1]["method"], "GET");
    assert_eq!(r["responses"][1]["status"], 200, "{r}");
    let answers = assistants(&r["messages"]);
    assert_eq!(answers.len(), 1, "{r}");
    if !cut.is_empty() {
        assert_eq!(
            answers[0]["id"], r["cut"]["messages"][1]["id"],
            "replaced in place"
        );
    }
    let text = text_of(answers[0]);
    assert!(
        text.len() > cut.len() && prompt.starts_with(&text),
        "{text:?}"
    );
    let stored = &r["transcript"]["messages"][1];
    assert_eq!(
        text_of(stored),
        text,
        "the chat shows what the turn said, once"
    );
    assert_eq!(stored["metadata"]["tether"]["status"], "interrupted");
    assert_eq!(r["status"], "ready");
}

#[test]
fn a_cut_fetch_resumes_with_the_answer_once_ai6() {
    cut_and_resume("ai");
}

#[test]
fn a_cut_fetch_resumes_with_the_answer_once_ai7() {
    cut_and_resume("ai7");
}

#[test]
fn after_kill_9_and_restart_the_answer_shows_once_and_says_how_it_ended() {
    if !available("ai_sdk::kill_restart") {
        return;
    }
    let dir = common::tempdir();
    let mut gw = gateway(dir.path(), &[]);
    let prompt = words(400);
    let mut s = Scenario::start(
        SCRIPT,
        "kill-restart",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", &prompt)],
    );
    s.expect_event("answering");
    gw.restart_same_port();
    s.go();
    let r = s.result();
    let cut = text_of(&r["cut"]["messages"][1]);
    assert!(!cut.is_empty() && prompt.starts_with(&cut), "{r}");
    // Nothing runs after the restart: the reconnect answers 204 and the
    // chat keeps what it had, once.
    let reconnect = r["responses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["method"] == "GET")
        .expect("a reconnect");
    assert_eq!(reconnect["status"], 204, "{r}");
    assert_eq!(assistants(&r["after"]["messages"]).len(), 1);
    assert_eq!(text_of(&r["after"]["messages"][1]), cut);
    // The transcript says how that turn ended; the chat went on.
    let t = &r["transcript"]["messages"];
    let killed = &t[1];
    assert_eq!(killed["id"], r["cut"]["messages"][1]["id"]);
    assert_eq!(killed["metadata"]["tether"]["status"], "error", "{killed}");
    assert_eq!(
        killed["metadata"]["tether"]["failureReason"],
        "gateway_restart"
    );
    assert_eq!(r["status"], "ready");
    assert_eq!(text_of(&t[3]), "after the restart");
    assert_eq!(t.as_array().unwrap().len(), 4, "{t}");
}

#[test]
fn two_chats_on_one_id_see_the_same_answer() {
    if !available("ai_sdk::two_tabs") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let prompt = words(150);
    let r = run(
        SCRIPT,
        "two-tabs",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", &prompt)],
    );
    let a = assistants(&r["a"]["messages"]);
    let b = assistants(&r["b"]["messages"]);
    assert_eq!((a.len(), b.len()), (1, 1), "{r}");
    assert_eq!(a[0]["id"], b[0]["id"]);
    assert_eq!(text_of(a[0]), prompt);
    assert_eq!(
        text_of(b[0]),
        prompt,
        "the second tab joined mid-answer and has it whole"
    );
    assert_eq!(r["responsesB"][0]["status"], 200);
    assert_eq!(
        (r["a"]["status"].as_str(), r["b"]["status"].as_str()),
        (Some("ready"), Some("ready"))
    );
}

async fn regenerate_replaces_the_answer_in_the_history_too(b: Backend) {
    if !available("ai_sdk::regenerate") {
        return;
    }
    let dir = common::tempdir();
    let mut gw = gateway_on(&b, dir.path(), &[]);
    let r = run_async(
        "regenerate",
        vec![("TETHER_URL", url(&gw)), ("PROMPT", "one|two".into())],
    )
    .await;
    let before = assistants(&r["before"]);
    let after = assistants(&r["messages"]);
    assert_eq!((before.len(), after.len()), (2, 2), "{r}");
    assert_eq!(before[0]["id"], after[0]["id"]);
    assert_ne!(before[1]["id"], after[1]["id"], "a new turn answered");
    assert_eq!(text_of(after[1]), "two");
    let session = after[1]["metadata"]["tether"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let replaced = before[1]["id"].as_str().unwrap().to_string();
    // The history the next turn sees leaves the replaced turn out (the
    // transcript is that history), from memory and, after a restart, from
    // the store, while its events stay in the log.
    for restart in [false, true] {
        if restart {
            gw.restart();
        }
        let mut c = gw.client().await;
        let res = c
            .ok(
                "session.resume",
                json!({"session_id": session, "attach": false}),
            )
            .await;
        let texts: Vec<(&str, &str)> = res["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap(), m["text"].as_str().unwrap()))
            .collect();
        assert_eq!(
            texts,
            vec![
                ("user", "one"),
                ("assistant", "one"),
                ("user", "two"),
                ("assistant", "two")
            ],
            "restarted: {restart}"
        );
        assert!(res["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["turn_id"] != replaced.as_str()));
        assert_eq!(res["session"]["message_count"], 4);
        let all = common::all_events(&mut c, &session).await;
        assert!(
            all.iter().any(|e| e["turn_id"] == replaced.as_str()),
            "its events are kept"
        );
    }
    let t: Vec<String> = r["transcript"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(t.len(), 4);
    assert!(!t.contains(&replaced));
    // A prompt replacing a turn the history does not hold is refused.
    let mut c = gw.client().await;
    let e = c
        .err(
            "prompt.submit",
            json!({"session_id": session, "text": "x", "replaces": replaced}),
        )
        .await;
    assert_eq!(e["code"], -32602, "{e}");
}

async fn two_first_requests_at_once_make_one_session(b: Backend) {
    if !available("ai_sdk::race") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway_on(&b, dir.path(), &[]);
    let r = run_async(
        "race",
        vec![("TETHER_URL", url(&gw)), ("PROMPT", "tab".into())],
    )
    .await;
    assert_eq!(r["sessions"][0], r["sessions"][1], "{r}");
    for chat in r["chats"].as_array().unwrap() {
        assert_eq!(chat["status"], "ready", "{r}");
    }
    let mut prompts: Vec<String> = r["transcript"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(text_of)
        .collect();
    prompts.sort();
    assert_eq!(prompts, vec!["tab 0", "tab 1"]);
    let mut c = gw.client().await;
    let list = c.ok("session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
}

async fn a_chat_is_created_once_and_found_again(b: Backend) {
    if !available("ai_sdk::created_once") {
        return;
    }
    let dir = common::tempdir();
    let mut gw = gateway_on(&b, dir.path(), &[]);
    // Seeded by its first request, found by the next, after a restart too.
    let first = run_async(
        "seeded",
        vec![("TETHER_URL", url(&gw)), ("PROMPT", "third".into())],
    )
    .await;
    let session = first["responses"][0]["session"]
        .as_str()
        .unwrap()
        .to_string();
    gw.restart();
    let again = run_async(
        "send",
        vec![("TETHER_URL", url(&gw)), ("PROMPT", "fourth".into())],
    )
    .await;
    assert_eq!(again["responses"][0]["session"], session.as_str());
    let texts: Vec<String> = again["transcript"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(text_of)
        .collect();
    assert_eq!(
        texts,
        vec!["first", "an answer", "third", "third", "fourth", "fourth"],
        "{again}"
    );
    let mut c = gw.client().await;
    let list = c.ok("session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["sessions"][0]["title"], "chat chat-1");
}

#[test]
fn an_edited_prompt_replaces_it_and_what_followed() {
    if !available("ai_sdk::edit") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "edit",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", "one|two")],
    );
    let texts: Vec<String> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(text_of)
        .collect();
    assert_eq!(texts, vec!["one (edited)", "one (edited)"], "{r}");
    let stored: Vec<String> = r["transcript"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(text_of)
        .collect();
    assert_eq!(stored, texts);
}

#[test]
fn two_profiles_chat_1_are_two_sessions() {
    if !available("ai_sdk::tokens") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(
        dir.path(),
        &["--token", "alice:token-a", "--token", "bob:token-b"],
    );
    let u = url(&gw);
    let alice = run(
        SCRIPT,
        "send",
        &[
            ("TETHER_URL", &u),
            ("TETHER_TOKEN", "token-a"),
            ("PROMPT", "from alice"),
        ],
    );
    let bob = run(
        SCRIPT,
        "send",
        &[
            ("TETHER_URL", &u),
            ("TETHER_TOKEN", "token-b"),
            ("PROMPT", "from bob"),
        ],
    );
    let sa = alice["responses"][0]["session"].as_str().unwrap();
    let sb = bob["responses"][0]["session"].as_str().unwrap();
    assert_ne!(sa, sb, "one chat id, two profiles, two sessions");
    let texts = |r: &Value| -> Vec<String> {
        r["transcript"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(text_of)
            .collect()
    };
    assert_eq!(texts(&alice), vec!["from alice", "from alice"]);
    assert_eq!(texts(&bob), vec!["from bob", "from bob"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bob_h = [("authorization", "Bearer token-b")];
        let r = http(
            &gw.addr,
            "GET",
            "/v1/ai-sdk/chat/chat-1/messages?profile=alice",
            &bob_h,
            b"",
        )
        .await;
        assert_eq!(r.status, 404, "another profile's chat is not there");
        let r = http(
            &gw.addr,
            "POST",
            "/v1/ai-sdk/chat/chat-1/stop?profile=alice",
            &bob_h,
            b"",
        )
        .await;
        assert_eq!(r.status, 404);
        let r = http(&gw.addr, "GET", "/v1/ai-sdk/chat/chat-1/messages", &[], b"").await;
        assert_eq!(r.status, 401);
        let r = http(
            &gw.addr,
            "GET",
            "/v1/ai-sdk/chat/chat-1/stream",
            &bob_h,
            b"",
        )
        .await;
        assert_eq!(r.status, 204, "nothing runs in bob's chat-1");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_4xx_and_change_nothing() {
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &["--max-frame-bytes", "4096"]);
    let json = [("content-type", "application/json")];
    let post = |body: String| {
        let addr = gw.addr.clone();
        async move { http(&addr, "POST", "/v1/ai-sdk/chat", &json, body.as_bytes()).await }
    };
    let prompt = r#"[{"role":"user","parts":[{"type":"text","text":"hi"}]}]"#;
    for (body, status) in [
        (format!(r#"{{"id":"a b","messages":{prompt}}}"#), 400),
        (format!(r#"{{"id":"..","messages":{prompt}}}"#), 400),
        (
            format!(r#"{{"id":"{}","messages":{prompt}}}"#, "x".repeat(129)),
            400,
        ),
        (r#"{"id":"c","messages":[]}"#.to_string(), 400),
        (
            r#"{"id":"c","messages":[{"role":"assistant","parts":[{"type":"text","text":"x"}]}]}"#
                .to_string(),
            400,
        ),
        (
            format!(r#"{{"id":"c","trigger":"bogus","messages":{prompt}}}"#),
            400,
        ),
        ("not json".to_string(), 400),
        (
            format!(
                r#"{{"id":"c","messages":{prompt},"pad":"{}"}}"#,
                "x".repeat(5000)
            ),
            413,
        ),
        (
            format!(r#"{{"id":"c","trigger":"regenerate-message","messages":{prompt}}}"#),
            409,
        ),
    ] {
        let r = post(body.clone()).await;
        assert_eq!(
            r.status,
            status,
            "{body:.80}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = http(
        &gw.addr,
        "POST",
        "/v1/ai-sdk/chat",
        &[("content-type", "text/plain")],
        b"{}",
    )
    .await;
    assert_eq!(r.status, 415);
    for path in [
        "/v1/ai-sdk/chat/a%20b/stream",
        "/v1/ai-sdk/chat/%2E%2E/messages",
    ] {
        let r = http(&gw.addr, "GET", path, &[], b"").await;
        assert_eq!(r.status, 400, "{path}");
    }
    // An unknown chat: nothing to resume, no messages, nothing to stop.
    let r = http(&gw.addr, "GET", "/v1/ai-sdk/chat/new-one/stream", &[], b"").await;
    assert_eq!(r.status, 204);
    let r = http(
        &gw.addr,
        "GET",
        "/v1/ai-sdk/chat/new-one/messages",
        &[],
        b"",
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!([])));
    let r = http(&gw.addr, "POST", "/v1/ai-sdk/chat/new-one/stop", &[], b"").await;
    assert_eq!(r.status, 404);
    // None of it made a session.
    let mut c = gw.client().await;
    let list = c.ok("session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]), "{list}");
}

#[test]
fn tether_attach_and_the_chat_see_each_others_prompts() {
    if !available("ai_sdk::attach") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let u = url(&gw);
    let env = [("TETHER_URL", u.as_str()), ("CHAT_ID", "mirror")];
    let first = run(SCRIPT, "send", &[env[0], env[1], ("PROMPT", "first")]);
    let session = first["responses"][0]["session"]
        .as_str()
        .unwrap()
        .to_string();
    let mut attach = Attached::start(&gw.url(), &session);
    // The chat's prompt reaches the terminal...
    let from_chat = run(
        SCRIPT,
        "send",
        &[env[0], env[1], ("PROMPT", "typed in the chat")],
    );
    assert_eq!(from_chat["status"], "ready");
    attach.wait_stdout("the chat's answer in the terminal", |o| {
        o.contains("typed in the chat")
    });
    // ...and a prompt typed in the terminal reaches the chat: the running
    // turn through the transport's reconnect, the prompt in the transcript.
    let mut follow = Scenario::start(SCRIPT, "follow", &env);
    follow.expect_event("ready");
    let typed = words(150);
    attach.line(&typed);
    attach.wait_stdout("the terminal's turn to stream", |o| o.contains("w0 w1 "));
    follow.go();
    let r = follow.result();
    assert_eq!(text_of(&r["message"]), typed, "{r}");
    let t = r["transcript"]["messages"].as_array().unwrap();
    let last_user = t.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert_eq!(text_of(last_user), typed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routes_draw_from_the_http_rate_bucket() {
    let dir = common::tempdir();
    // One request a second, a burst of two: of five requests in a row at
    // least one is refused (they would need seconds to all pass).
    let gw = gateway(dir.path(), &["--rate-limit-rps", "1"]);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = http(&gw.addr, "GET", "/v1/ai-sdk/chat/c/messages", &[], b"").await;
        if r.status == 429 {
            assert!(r.header("retry-after").is_some());
            assert_eq!(r.json()["error"]["code"], 4029);
        }
        statuses.push(r.status);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
}
