//! Erased means gone from the files, black-box on SQLite: after
//! `session.delete` (within the bound docs/RELIABILITY.md gives, on a
//! running gateway) and after `tether admin erase-profile` (when it
//! returns), no byte of an erased title or prompt is left in `tether.db` or
//! `tether.db-wal`. Each session is written the way a used one is: turns
//! (its row rewritten at each, its turn marker set and cleared) and
//! renames, every step of which may leave an old copy of its row behind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

const TITLE: &str = "zq-residue-title-5d1e";
const PROMPT: &str = "zq-residue-prompt-8b07";

/// docs/RELIABILITY.md, "Deletion": the WAL is scrubbed at the
/// checkpointer's next round (half a second) after the erase; this leaves
/// room for a loaded test machine.
const SCRUBBED_WITHIN: Duration = Duration::from_secs(10);

const FILES: [&str; 2] = ["tether.db", "tether.db-wal"];

/// The files of `dir` that hold either marker.
fn holding(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for file in FILES {
        let Ok(bytes) = std::fs::read(dir.join(file)) else {
            continue;
        };
        for marker in [TITLE, PROMPT] {
            if bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                found.push(format!("{file}: {marker}"));
            }
        }
    }
    found
}

/// A new session (attached to `c`): its id.
async fn create(c: &mut Client, params: Value) -> String {
    let r = c.ok("session.create", params).await;
    r["session"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string()
}

/// A session of `profile` used for a while: turns with the prompt marker,
/// renames with the title marker.
async fn used_session(c: &mut Client, profile: &str) -> String {
    let id = create(
        c,
        json!({"title": format!("{TITLE} first"), "profile": profile}),
    )
    .await;
    // Long, then short: a row that shrinks is written at the tail of the
    // space its longer version took, whose head (the key, the profile, the
    // title) stays in the page's free space unless it is overwritten.
    for i in 0..6 {
        let pad = if i % 2 == 0 { 900 } else { 0 };
        let r = c
            .ok(
                "prompt.submit",
                json!({"session_id": id, "profile": profile,
                       "text": format!("{PROMPT} {i} {}", "x".repeat(pad))}),
            )
            .await;
        turn_events(c, r["turn_id"].as_str().expect("turn_id")).await;
        c.ok(
            "session.rename",
            json!({"session_id": id, "profile": profile,
                   "title": format!("{TITLE} {i} {}", "y".repeat(pad))}),
        )
        .await;
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_is_gone_from_the_files_within_the_bound() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut c = gw.client().await;
    let id = used_session(&mut c, "default").await;
    // Another session goes on being written: what the delete leaves must
    // not be kept alive by other writes either.
    let other = create(&mut c, json!({"title": "kept"})).await;
    assert!(
        !holding(dir.path()).is_empty(),
        "the markers are in the files before the delete"
    );

    let r = c.ok("session.delete", json!({"session_id": id})).await;
    assert_eq!(r, json!({"deleted": true}));
    let t = submit(&mut c, &other, "after the delete").await;
    turn_events(&mut c, &t).await;
    let deadline = Instant::now() + SCRUBBED_WITHIN;
    let mut left = holding(dir.path());
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = holding(dir.path());
    }
    assert!(
        left.is_empty(),
        "{SCRUBBED_WITHIN:?} after session.delete the files still hold {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_profile_is_gone_from_the_files_when_the_command_returns() {
    let dir = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let mut c = gw.client().await;
    for _ in 0..3 {
        used_session(&mut c, "alice").await;
    }
    let bob = create(&mut c, json!({"title": "bob's", "profile": "bob"})).await;
    let r = c
        .ok(
            "prompt.submit",
            json!({"session_id": bob, "profile": "bob", "text": "bob speaks"}),
        )
        .await;
    turn_events(&mut c, r["turn_id"].as_str().expect("turn_id")).await;
    drop(c);
    gw.terminate();
    assert!(
        !holding(dir.path()).is_empty(),
        "the markers are in the files before the erase"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["admin", "erase-profile", "alice", "--data-dir"])
        .arg(dir.path())
        .env_remove("TETHER_DATABASE_URL")
        .output()
        .expect("run tether admin");
    assert!(out.status.success(), "{out:?}");
    let left = holding(dir.path());
    assert!(
        left.is_empty(),
        "after erase-profile the files still hold {left:?}"
    );

    // What was not erased is whole.
    gw.restart();
    let mut c = gw.client().await;
    let b = c
        .ok(
            "session.resume",
            json!({"session_id": bob, "profile": "bob", "attach": false}),
        )
        .await;
    assert_eq!(b["session"]["title"], "bob's");
}
