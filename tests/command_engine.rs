//! The `command` engine (docs/ENGINES.md), black-box: the gateway's
//! host runs `examples/agent.py`, the very file the docs show, for every
//! turn and compress.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;
use std::time::Duration;

use common::{complete, session, submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

const AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agent.py");

/// Bounds the wait for a killed agent to disappear.
const GONE_WAIT: Duration = Duration::from_secs(30);

/// A gateway whose host runs `--engine command --command COMMAND`.
fn gateway(dir: &Path, command: &str) -> Gateway {
    let host = format!(
        "{} host --engine command --command \"{command}\"",
        env!("CARGO_BIN_EXE_tether")
    );
    Gateway::start(dir, &["--hosts", "1", "--host-command", &host])
}

/// A gateway running the example agent.
fn agent_gateway(dir: &Path) -> Gateway {
    gateway(dir, &format!("python3 {AGENT}"))
}

/// Creates a session (attached) and drains its `session.created`.
fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

fn deltas_text(events: &[Value]) -> String {
    of_type(events, "message.delta")
        .iter()
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect()
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.contains(") Z "),
        Err(_) => false,
    }
}

/// Waits (bounded) for `pid` to be gone.
async fn assert_gone(pid: u32) {
    let deadline = tokio::time::Instant::now() + GONE_WAIT;
    while alive(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent (pid {pid}) is still running after the interrupt"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts a turn whose agent prints `sleeping as pid N` and then blocks;
/// returns the turn id and N once that line is in.
async fn sleeping_turn(c: &mut Client, id: &str, prompt: &str) -> (String, u32) {
    let t = submit(c, id, prompt).await;
    loop {
        let e = c.next_event().await;
        assert_ne!(e["type"], "message.complete", "the turn ended: {e}");
        if e["type"] == "message.delta" {
            let text = e["payload"]["text"].as_str().unwrap();
            let pid = text
                .trim()
                .strip_prefix("sleeping as pid ")
                .unwrap_or_else(|| panic!("unexpected delta {text:?}"))
                .parse()
                .unwrap();
            return (t, pid);
        }
    }
}

/// Interrupts the session's turn `t`, which must end `interrupted` with
/// `text`, once.
async fn interrupt(c: &mut Client, id: &str, t: &str, text: &str) {
    let r = c.ok("session.interrupt", json!({"session_id": id})).await;
    assert_eq!(r["status"], "interrupted");
    let evs = turn_events(c, t).await;
    assert_eq!(complete(&evs)["status"], "interrupted");
    assert_eq!(complete(&evs)["text"], text);
}

#[tokio::test]
async fn the_agent_streams_its_lines_as_the_reply() {
    let dir = tempdir();
    let gw = agent_gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let t = submit(&mut c, &id, "hi there").await;
    let evs = turn_events(&mut c, &t).await;
    let want =
        format!("Hello from agent.py.\nYou said: hi there\nTurn {t}, 0 messages before it.\n");
    assert_eq!(complete(&evs)["status"], "complete");
    assert_eq!(complete(&evs)["text"], want);
    assert_eq!(deltas_text(&evs), want);
    // The agent streams one delta per line; deltas queued together for a
    // peer may reach it merged (delivery.max_delay_ms), so what a client
    // sees is whole lines: every delta ends with a line's newline.
    let deltas = of_type(&evs, "message.delta");
    assert!(!deltas.is_empty() && deltas.len() <= 3, "{deltas:?}");
    for d in &deltas {
        let text = d["payload"]["text"].as_str().unwrap_or_default();
        assert!(text.ends_with('\n'), "a delta cut a line: {text:?}");
    }

    // The next turn's agent gets the history on stdin.
    let t = submit(&mut c, &id, "again").await;
    let evs = turn_events(&mut c, &t).await;
    let text = complete(&evs)["text"].as_str().unwrap().to_string();
    assert!(
        text.ends_with(&format!("Turn {t}, 2 messages before it.\n")),
        "{text}"
    );
}

#[tokio::test]
async fn json_event_lines_become_tool_events_and_not_text() {
    let dir = tempdir();
    let gw = agent_gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let t = submit(&mut c, &id, "tool").await;
    let evs = turn_events(&mut c, &t).await;
    assert_eq!(complete(&evs)["status"], "complete");
    let types: Vec<&str> = evs
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|k| *k != "message.delta")
        .collect();
    assert_eq!(
        types,
        [
            "message.user",
            "message.start",
            "tool.start",
            "tool.complete",
            "message.complete"
        ]
    );
    let start = &of_type(&evs, "tool.start")[0]["payload"];
    assert_eq!(start["tool_id"], "t1");
    assert_eq!(start["name"], "clock");
    assert_eq!(start["args"], json!({}));
    let done = &of_type(&evs, "tool.complete")[0]["payload"];
    assert_eq!(done["tool_id"], "t1");
    assert_eq!(done["is_error"], false);
    assert!(done["result"].is_string(), "{done}");
    let text = complete(&evs)["text"].as_str().unwrap();
    assert!(text.starts_with("Hello from agent.py.\nYou said: tool\n"));
    assert!(!text.contains("tool.start"), "{text}");
}

#[tokio::test]
async fn a_non_zero_exit_fails_the_turn_once_with_the_end_of_stderr() {
    let dir = tempdir();
    let gw = agent_gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let t = submit(&mut c, &id, "fail").await;
    let evs = turn_events(&mut c, &t).await;
    assert_eq!(complete(&evs)["status"], "error");
    assert_eq!(complete(&evs)["failure_reason"], "engine_error");
    let error = of_type(&evs, "error");
    assert_eq!(error.len(), 1, "{evs:?}");
    assert_eq!(
        error[0]["payload"]["message"],
        "the agent exited with status 3: agent.py: the model is on fire"
    );

    // The session goes on, and the failed turn ended exactly once.
    let t2 = submit(&mut c, &id, "after").await;
    assert_eq!(
        complete(&turn_events(&mut c, &t2).await)["status"],
        "complete"
    );
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    let ends = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "message.complete" && e["turn_id"] == t.as_str())
        .count();
    assert_eq!(ends, 1);
}

#[tokio::test]
async fn an_interrupt_ends_the_turn_and_kills_the_agent() {
    let dir = tempdir();
    let gw = agent_gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let (t, pid) = sleeping_turn(&mut c, &id, "sleep").await;
    assert!(alive(pid), "the agent runs while the turn does");
    interrupt(&mut c, &id, &t, &format!("sleeping as pid {pid}\n")).await;
    assert_gone(pid).await;

    // The host is still good for the next turn.
    let t = submit(&mut c, &id, "after").await;
    assert_eq!(
        complete(&turn_events(&mut c, &t).await)["status"],
        "complete"
    );
}

#[tokio::test]
async fn an_agent_that_ignores_sigterm_is_killed_with_its_children() {
    let dir = tempdir();
    // An ignored signal stays ignored in a child, so the background `sleep`
    // ignores SIGTERM too: only the SIGKILL that follows ends it, and only
    // a signal to the whole process group reaches it (it is the agent's
    // child, not the agent).
    let script = dir.path().join("stubborn.sh");
    std::fs::write(
        &script,
        "trap '' TERM\nsleep 3600 &\necho \"sleeping as pid $!\"\nwait\n",
    )
    .unwrap();
    let gw = gateway(dir.path(), &format!("sh {}", script.display()));
    let mut c = gw.client().await;
    let id = session(&mut c).await;

    let (t, pid) = sleeping_turn(&mut c, &id, "anything").await;
    interrupt(&mut c, &id, &t, &format!("sleeping as pid {pid}\n")).await;
    assert_gone(pid).await;
}

/// A gateway whose agent is the shell script `body`.
fn script_gateway(dir: &Path, body: &str) -> Gateway {
    let script = dir.join("agent.sh");
    std::fs::write(&script, body).unwrap();
    gateway(dir, &format!("sh {}", script.display()))
}

#[tokio::test]
async fn delta_events_stream_text_without_a_line_of_its_own() {
    let dir = tempdir();
    let gw = script_gateway(
        dir.path(),
        r#"cat >/dev/null
printf '{"type":"message.delta","text":"par"}\n'
printf '{"type":"message.delta","payload":{"text":"tial "}}\n'
printf '{"type":"reasoning.delta","text":"hmm"}\n'
printf '{"type": "not.an.event"}\n'
printf 'no newline'
"#,
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "go").await;
    let evs = turn_events(&mut c, &t).await;
    let want = "partial {\"type\": \"not.an.event\"}\nno newline";
    assert_eq!(complete(&evs)["status"], "complete");
    assert_eq!(complete(&evs)["text"], want);
    assert_eq!(deltas_text(&evs), want);
    let reasoning = of_type(&evs, "reasoning.delta");
    assert_eq!(reasoning.len(), 1);
    assert_eq!(reasoning[0]["payload"]["text"], "hmm");
}

#[tokio::test]
async fn a_malformed_event_line_fails_the_turn_and_stops_the_agent() {
    let dir = tempdir();
    let gw = script_gateway(
        dir.path(),
        "printf '{\"type\":\"tool.start\",\"name\":\"x\"}\\n'\nexec sleep 3600\n",
    );
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let t = submit(&mut c, &id, "go").await;
    let evs = turn_events(&mut c, &t).await;
    assert_eq!(complete(&evs)["status"], "error");
    assert_eq!(complete(&evs)["failure_reason"], "engine_error");
    let message = of_type(&evs, "error")[0]["payload"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("`tool.start`") && message.contains("tool_id"),
        "{message}"
    );
    assert!(of_type(&evs, "tool.start").is_empty());
}

#[tokio::test]
async fn compress_takes_the_agents_stdout_as_the_summary() {
    let dir = tempdir();
    let gw = agent_gateway(dir.path());
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    for prompt in ["first", "second"] {
        let t = submit(&mut c, &id, prompt).await;
        turn_events(&mut c, &t).await;
    }

    let r = c.ok("session.compress", json!({"session_id": id})).await;
    assert_eq!(r["status"], "compressed");
    assert_eq!(r["removed"], 4);
    let compacted = loop {
        let e = c.next_event().await;
        if e["type"] == "session.compacted" {
            break e;
        }
    };
    assert_eq!(
        compacted["payload"]["summary"],
        "4 messages; the user said: first / second"
    );
}

#[test]
fn the_docs_show_exactly_the_agent_these_tests_run() {
    let root = env!("CARGO_MANIFEST_DIR");
    let agent = std::fs::read_to_string(AGENT).unwrap();
    let docs = std::fs::read_to_string(format!("{root}/docs/ENGINES.md")).unwrap();
    assert!(
        docs.contains(&format!("```python\n{agent}```\n")),
        "docs/ENGINES.md must show examples/agent.py verbatim"
    );
}
