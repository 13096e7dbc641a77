//! Hosts that keep histories between turns (PROTOCOL Part 2,
//! `history_cache_bytes`), black-box: whatever a host keeps, and however
//! little room it has for them, every turn's engine sees exactly the
//! session's segment before its prompt, across sessions that take turns on
//! one host, a compaction, and a host restart.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;

use common::{complete, session, submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

/// An agent for the `command` engine that answers with what it was sent:
/// each message of its history as `seq:role:length`, and the prompt.
const AGENT: &str = r#"
import json, os, sys
turn = json.load(sys.stdin)
if os.environ.get("TETHER_OP") == "compress":
    print("summary of %d" % len(turn["history"]))
    sys.exit(0)
if turn["prompt"] == "crash":
    # Kills the host process (the nearest `tether` above this one).
    pid = os.getppid()
    while open("/proc/%d/comm" % pid).read().strip() != "tether":
        pid = int(open("/proc/%d/stat" % pid).read().rsplit(") ", 1)[1].split()[1])
    os.kill(pid, 9)
    sys.exit(0)
seen = ["%d:%s:%d" % (m["seq"], m["role"], len(m["text"])) for m in turn["history"]]
print(" ".join(seen) + " | " + turn["prompt"])
"#;

/// A gateway with one host that keeps `kb` KiB of histories (0: none).
fn gateway(dir: &Path, kb: u32) -> Gateway {
    let agent = dir.join("agent.py");
    std::fs::write(&agent, AGENT).unwrap();
    let host = format!(
        "{} host --engine command --command \"python3 {}\" --history-cache-kb {kb}",
        env!("CARGO_BIN_EXE_tether"),
        agent.display()
    );
    Gateway::start(dir, &["--hosts", "1", "--host-command", &host])
}

/// What the agent should answer for the next turn of `id`: the session's
/// transcript as a second client reads it, and the prompt.
async fn expected(observer: &mut Client, id: &str, prompt: &str) -> String {
    let r = observer
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    let seen: Vec<String> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}:{}:{}",
                m["seq"],
                m["role"].as_str().unwrap(),
                m["text"].as_str().unwrap().len()
            )
        })
        .collect();
    format!("{} | {prompt}\n", seen.join(" "))
}

/// Runs one turn and checks the engine saw the whole segment before it.
async fn turn(c: &mut Client, observer: &mut Client, id: &str, prompt: &str) {
    let want = expected(observer, id, prompt).await;
    let t = submit(c, id, prompt).await;
    let evs = turn_events(c, &t).await;
    let done = complete(&evs);
    assert_eq!(done["status"], "complete", "{done}");
    assert_eq!(done["text"], want.as_str(), "turn {prompt:?} of {id}");
}

/// Three sessions taking turns on one host, one of them compacted halfway.
async fn sessions_take_turns(gw: &Gateway) -> Vec<String> {
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut c = gw.client().await;
        ids.push(session(&mut c).await);
        clients.push(c);
    }
    let mut observer = gw.client().await;
    for round in 0..6 {
        for (i, c) in clients.iter_mut().enumerate() {
            // Prompts of different lengths, so that sessions outgrow a
            // small budget at different times.
            let prompt = format!("round {round} {}", "word ".repeat(i * 7 + round));
            turn(c, &mut observer, &ids[i], &prompt).await;
        }
        if round == 2 {
            let r = clients[0]
                .ok("session.compress", json!({"session_id": ids[0]}))
                .await;
            assert!(
                r["status"] == "compressed" || r["status"] == "pending",
                "{r}"
            );
            // The reply can come before the compaction is durable; the
            // event comes after, and only then does every reader see the
            // new segment.
            loop {
                let e = clients[0].next_event().await;
                if e["type"] == "session.compacted" {
                    break;
                }
            }
        }
    }
    ids
}

#[tokio::test]
async fn every_engine_sees_the_whole_segment_with_a_host_that_keeps_histories() {
    let dir = tempdir();
    let gw = gateway(dir.path(), 8192);
    sessions_take_turns(&gw).await;
}

#[tokio::test]
async fn a_budget_smaller_than_the_sessions_evicts_without_losing_a_message() {
    // One KiB holds a few messages: sessions are dropped to make room for
    // each other, and outgrow it to be sent whole.
    let dir = tempdir();
    let gw = gateway(dir.path(), 1);
    sessions_take_turns(&gw).await;
}

#[tokio::test]
async fn a_host_that_keeps_nothing_is_sent_every_whole_history() {
    let dir = tempdir();
    let gw = gateway(dir.path(), 0);
    sessions_take_turns(&gw).await;
}

#[tokio::test]
async fn a_restarted_host_starts_from_nothing_and_is_sent_whole_histories() {
    let dir = tempdir();
    let gw = gateway(dir.path(), 8192);
    let mut c = gw.client().await;
    let mut observer = gw.client().await;
    let id = session(&mut c).await;
    for n in 0..3 {
        turn(&mut c, &mut observer, &id, &format!("before {n}")).await;
    }
    // The agent kills its own host (and itself): the turn ends with a
    // host crash, and a new host process takes the next one.
    let t = submit(&mut c, &id, "crash").await;
    let evs = turn_events(&mut c, &t).await;
    let done: &Value = complete(&evs);
    assert_eq!(done["status"], "error", "{done}");
    assert_eq!(done["failure_reason"], "host_crash", "{done}");
    for n in 0..3 {
        turn(&mut c, &mut observer, &id, &format!("after {n}")).await;
    }
}
