//! AG-UI's own client against the gateway's AG-UI routes (docs/PROTOCOL.md
//! "The AG-UI routes"): `HttpAgent` from `@ag-ui/client` 1.x, whose event
//! verifier is always on, and the TypeScript library's `TetherAgent`, run
//! by tests/frontends/ag_ui.mjs against the real binary. The echo engine's
//! per-word delay makes turns long enough to cut, join and stop; every
//! wait is for a count of events, never for a time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;
#[path = "frontends/harness.rs"]
mod harness;

use common::http::http;
use common::Gateway;
use harness::{available, run, text_of, words};
use serde_json::{json, Value};

const SCRIPT: &str = "ag_ui.mjs";

fn gateway(dir: &std::path::Path, extra: &[&str]) -> Gateway {
    let host = format!(
        "{} host --engine echo --delay-ms 40",
        env!("CARGO_BIN_EXE_tether")
    );
    let mut args = vec!["--host-command", host.as_str()];
    args.extend_from_slice(extra);
    Gateway::start(dir, &args)
}

fn url(gw: &Gateway) -> String {
    format!("http://{}", gw.addr)
}

fn types(r: &Value) -> Vec<&str> {
    r["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

fn count(r: &Value, kind: &str) -> usize {
    types(r).iter().filter(|t| **t == kind).count()
}

fn answer(messages: &Value) -> &Value {
    let a: Vec<&Value> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(a.len(), 1, "one answer: {messages}");
    a[0]
}

/// The text the turn ended with, as the session stores it (read on the AI
/// SDK routes: the thread id names the same session there).
fn stored_answer(r: &Value) -> String {
    text_of(answer(&r["transcript"]))
}

#[test]
fn a_run_with_a_tool_passes_the_verifier() {
    if !available("ag_ui::run") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "run",
        &[
            ("TETHER_URL", &url(&gw)),
            ("PROMPT", "/tool lookup {\"q\":1}\nfound it"),
        ],
    );
    assert_eq!(r["error"], Value::Null, "{r}");
    assert_eq!(
        types(&r),
        vec![
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let a = answer(&r["messages"]);
    assert_eq!(a["content"], "found it");
    assert_eq!(
        a["toolCalls"][0]["function"],
        json!({"name": "lookup", "arguments": "{\"q\":1}"})
    );
    let tool = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool message");
    assert_eq!(tool["content"], "{\"q\":1}");
    assert_eq!(stored_answer(&r), "found it");
}

#[test]
fn todos_are_the_runs_state() {
    if !available("ag_ui::todos") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "run",
        &[
            ("TETHER_URL", &url(&gw)),
            ("PROMPT", "/todo plan; build\ndone"),
        ],
    );
    let snapshot = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "STATE_SNAPSHOT")
        .expect("a snapshot");
    let items: Vec<&str> = snapshot["snapshot"]["todos"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap())
        .collect();
    assert_eq!(items, vec!["plan", "build"], "{r}");
    assert_eq!(
        r["events"].as_array().unwrap().last().unwrap()["type"],
        "RUN_FINISHED"
    );
}

#[test]
fn a_failed_turn_is_run_error() {
    if !available("ag_ui::failed") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "run",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", "/error boom")],
    );
    assert_eq!(types(&r), vec!["RUN_STARTED", "RUN_ERROR"], "{r}");
    let e = &r["events"][1];
    assert_eq!(
        (e["message"].as_str(), e["code"].as_str()),
        (Some("boom"), Some("engine_error"))
    );
}

#[test]
fn stop_from_another_client_finishes_the_run_cancelled() {
    if !available("ag_ui::stop") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let r = run(
        SCRIPT,
        "stop",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", "/hang")],
    );
    assert_eq!(r["stopped"]["status"], 200, "{r}");
    let last = r["events"].as_array().unwrap().last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{r}");
    assert_eq!(last["outcome"], json!({"type": "cancelled"}));
    assert_eq!(answer(&r["messages"])["content"], "…");
}

#[test]
fn a_cut_run_continues_from_its_last_event_id() {
    if !available("ag_ui::resume") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let prompt = words(400);
    let r = run(
        SCRIPT,
        "resume",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", &prompt)],
    );
    // The POST was cut after 3 contents; the agent went on from the id of
    // the last event it had, on the resume route.
    let resumed = &r["responses"][1];
    assert_eq!(resumed["method"], "GET", "{r}");
    assert_eq!(resumed["status"], 200);
    assert!(
        resumed["lastEventId"]
            .as_str()
            .is_some_and(|id| id.split('.').count() == 4),
        "{resumed}"
    );
    // One run, one message, each byte once: what the turn ended with.
    assert_eq!(
        (count(&r, "RUN_STARTED"), count(&r, "TEXT_MESSAGE_START")),
        (1, 1),
        "{r}"
    );
    assert_eq!(
        r["events"].as_array().unwrap().last().unwrap()["outcome"],
        json!({"type": "cancelled"})
    );
    let text = answer(&r["messages"])["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.len() > 9 && prompt.starts_with(&text), "{text:?}");
    assert_eq!(stored_answer(&r), text);
}

#[test]
fn connect_with_last_event_id_continues_exactly_where_the_client_was() {
    if !available("ag_ui::reload") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let prompt = words(150);
    let r = run(
        SCRIPT,
        "reload",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", &prompt)],
    );
    let cut = answer(&r["cut"]["messages"])["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!cut.is_empty() && prompt.starts_with(&cut), "{r}");
    // The id matches what the client applied: the text it had, in bytes.
    let id = r["lastEventId"].as_str().expect("an id");
    assert_eq!(
        id.split('.').nth(2),
        Some(cut.len().to_string().as_str()),
        "{id}"
    );
    // The connect opened the run again and sent the rest, once.
    assert_eq!(types(&r)[0], "RUN_STARTED");
    assert_eq!(r["error"], Value::Null, "{r}");
    assert_eq!(answer(&r["messages"])["content"], prompt.as_str());
    assert_eq!(stored_answer(&r), prompt);
}

#[test]
fn a_second_client_joins_a_run_mid_way() {
    if !available("ag_ui::join") {
        return;
    }
    let dir = common::tempdir();
    let gw = gateway(dir.path(), &[]);
    let prompt = words(150);
    let r = run(
        SCRIPT,
        "join",
        &[("TETHER_URL", &url(&gw)), ("PROMPT", &prompt)],
    );
    assert_eq!(
        answer(&r["a"]["messages"])["content"],
        prompt.as_str(),
        "{r}"
    );
    assert_eq!(
        answer(&r["b"]["messages"])["content"],
        prompt.as_str(),
        "{r}"
    );
    assert_eq!(
        answer(&r["a"]["messages"])["id"],
        answer(&r["b"]["messages"])["id"]
    );
    assert_eq!(r["b"]["types"][0], "RUN_STARTED");
}

/// Reads a POST /v1/ag-ui stream to its end.
async fn post_run(
    gw: &Gateway,
    token: Option<&str>,
    thread: &str,
    prompt: &str,
) -> common::http::Resp {
    let body = json!({"threadId": thread, "runId": "r", "messages": [{"id": "m", "role": "user", "content": prompt}],
        "tools": [], "context": [], "state": {}, "forwardedProps": {}});
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    http(
        &gw.addr,
        "POST",
        "/v1/ag-ui",
        &headers,
        body.to_string().as_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_per_profile_and_bad_input_is_4xx() {
    let dir = common::tempdir();
    let gw = gateway(
        dir.path(),
        &["--token", "alice:token-a", "--token", "bob:token-b"],
    );
    let a = post_run(&gw, Some("token-a"), "chat-1", "from alice").await;
    let b = post_run(&gw, Some("token-b"), "chat-1", "from bob").await;
    assert_eq!((a.status, b.status), (200, 200));
    let (sa, sb) = (
        a.header("x-tether-session-id").unwrap(),
        b.header("x-tether-session-id").unwrap(),
    );
    assert_ne!(sa, sb, "one thread id, two profiles, two sessions");
    let body = String::from_utf8_lossy(&a.body);
    assert!(body.contains("alice") && !body.contains("bob"), "{body}");
    assert!(
        body.lines().any(|l| l.starts_with("id: ")),
        "every event has an id: {body}"
    );
    assert_eq!(post_run(&gw, None, "chat-1", "x").await.status, 401);
    let bob = [("authorization", "Bearer token-b")];
    let r = http(
        &gw.addr,
        "POST",
        "/v1/ag-ui/threads/chat-1/stop?profile=alice",
        &bob,
        b"",
    )
    .await;
    assert_eq!(r.status, 404);
    for (path, headers, status) in [
        ("/v1/ag-ui/threads/a%20b/events", vec![], 400),
        (
            "/v1/ag-ui/threads/chat-1/events",
            vec![("last-event-id", "garbage")],
            400,
        ),
        (
            "/v1/ag-ui/threads/chat-1/events",
            vec![("last-event-id", "999.1.0.0")],
            400,
        ),
        ("/v1/ag-ui/threads/chat-1/events", vec![], 204),
        ("/v1/ag-ui/threads/never-used/events", vec![], 204),
    ] {
        let mut h = headers.clone();
        h.push(("authorization", "Bearer token-b"));
        let r = http(&gw.addr, "GET", path, &h, b"").await;
        assert_eq!(
            r.status,
            status,
            "{path} {headers:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = http(&gw.addr, "GET", "/v1/ag-ui/capabilities", &bob, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["transport"]["resumable"], true);
    for bad in [
        r#"{"threadId":"c","messages":[]}"#,
        r#"{"threadId":"../x","messages":[{"role":"user","content":"x"}]}"#,
        r#"{"messages":[]}"#,
    ] {
        let h = [
            ("content-type", "application/json"),
            ("authorization", "Bearer token-b"),
        ];
        let r = http(&gw.addr, "POST", "/v1/ag-ui", &h, bad.as_bytes()).await;
        assert_eq!(r.status, 400, "{bad}");
    }
}

#[test]
fn the_tether_agent_types_check_against_ag_ui_s_own() {
    if !available("ag_ui::types") {
        return;
    }
    let out = std::process::Command::new("node")
        .current_dir(harness::dir())
        .args([
            "node_modules/typescript/bin/tsc",
            "--noEmit",
            "--strict",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--target",
            "es2022",
            "--lib",
            "es2022,dom",
            "--preserveSymlinks",
            "types.ts",
        ])
        .output()
        .expect("run tsc");
    assert!(
        out.status.success(),
        "tsc: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
