//! `tether admin erase-profile NAME`, black-box, on both stores: with the
//! gateway stopped it erases every session of the profile; afterwards no
//! route returns anything of it, the other profiles are untouched, clients
//! keep their epoch (an erase is not lost history), and a `tether backup`
//! taken afterwards holds no byte of it. It refuses to run while a gateway
//! holds the store.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;
use std::process::Command;

use common::{session_with, tempdir, turn_events, Backend, Gateway};
use serde_json::json;

const MARKER: &str = "zq-erased-profile-41c2e";

fn file_holds(path: &Path, needle: &str) -> bool {
    match std::fs::read(path) {
        Ok(bytes) => bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
        Err(_) => false,
    }
}

/// Runs `tether admin ARGS` on `gw`'s store; its exit code and output.
fn admin(gw: &Gateway, args: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.arg("admin")
        .args(args)
        .arg("--data-dir")
        .arg(&gw.data_dir)
        .env_remove("TETHER_DATABASE_URL");
    if let Some(url) = gw.database_url() {
        cmd.arg("--database-url").arg(url);
    }
    let out = cmd.output().expect("run tether admin");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn a_profile_erased_leaves_nothing(backend: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&backend, dir.path(), &[]);
    let mut c = gw.client().await;
    let mut alice = Vec::new();
    for i in 0..3 {
        let id = session_with(
            &mut c,
            json!({"title": format!("{MARKER} {i}"), "profile": "alice"}),
        )
        .await;
        let r = c
            .ok(
                "prompt.submit",
                json!({"session_id": id, "profile": "alice", "text": format!("secret {MARKER}")}),
            )
            .await;
        turn_events(&mut c, r["turn_id"].as_str().expect("turn_id")).await;
        alice.push(id);
    }
    c.ok(
        "session.close",
        json!({"session_id": alice[2], "profile": "alice"}),
    )
    .await;
    assert_eq!(c.next_event().await["type"], "session.closed");
    let bob = session_with(&mut c, json!({"title": "bob's", "profile": "bob"})).await;
    let epoch = c.epoch();
    drop(c);

    // Not while a gateway holds the store.
    let (code, out) = admin(&gw, &["erase-profile", "alice"]);
    assert_ne!(code, 0, "erased under a running gateway: {out}");

    gw.terminate();
    let (code, out) = admin(&gw, &["erase-profile", "alice"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("3 sessions"), "{out}");

    gw.restart();
    let mut c = gw.client().await;
    assert_eq!(c.epoch(), epoch, "an erase is not lost history");
    let listed = c
        .ok(
            "session.list",
            json!({"profile": "alice", "include_closed": true}),
        )
        .await;
    assert_eq!(listed["sessions"], json!([]), "{listed}");
    for id in &alice {
        for (method, params) in [
            (
                "session.resume",
                json!({"session_id": id, "profile": "alice"}),
            ),
            (
                "session.events.since",
                json!({"session_id": id, "profile": "alice", "last_seen": 0}),
            ),
        ] {
            let e = c.err(method, params).await;
            assert_eq!(e["code"], 4001, "{method}: {e}");
        }
    }
    let b = c
        .ok(
            "session.resume",
            json!({"session_id": bob, "profile": "bob", "attach": false}),
        )
        .await;
    assert_eq!(b["session"]["title"], "bob's");
    drop(c);

    if backend == Backend::Sqlite {
        let copy = dir.path().join("after-erase.db");
        let copy_str = copy.to_str().expect("utf-8");
        let data_dir = dir.path().to_str().expect("utf-8");
        let out = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["backup", copy_str, "--data-dir", data_dir])
            .env_remove("TETHER_DATABASE_URL")
            .output()
            .expect("backup");
        assert!(out.status.success(), "{out:?}");
        assert!(
            !file_holds(&copy, MARKER),
            "the backup holds the erased profile"
        );
        gw.terminate();
        for file in ["tether.db", "tether.db-wal"] {
            assert!(
                !file_holds(&dir.path().join(file), MARKER),
                "{file} still holds the erased profile"
            );
        }
    }
}

backends!(a_profile_erased_leaves_nothing);
