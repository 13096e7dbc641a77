//! `tether backup PATH`, black-box: an online copy of a running gateway's
//! SQLite store, taken while turns write to it. The copy opens as a store,
//! holds every event committed before the backup began, and a gateway
//! started on it later answers a client that saw more as lost history,
//! never as "nothing missed".
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;
use std::process::Command;

use common::{all_events, session, submit, tempdir, turn_events, Gateway};
use serde_json::json;

/// Runs `tether backup ARGS`; its exit code, stdout and stderr.
fn backup(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("backup")
        .args(args)
        .env_remove("TETHER_DATABASE_URL")
        .output()
        .expect("run tether backup");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_holds_what_was_committed_and_restores_as_lost_history() {
    let dir = tempdir();
    let mut gw = Gateway::start(dir.path(), &["--hosts", "2"]);
    let mut c = gw.client().await;
    let s = session(&mut c).await;
    for i in 0..3 {
        let t = submit(&mut c, &s, &format!("before {i}")).await;
        turn_events(&mut c, &t).await;
    }
    let before = all_events(&mut c, &s).await;
    let committed = before.last().expect("events")["seq"].as_u64().unwrap();

    // Turns keep writing on another connection while the copy is taken.
    let url = gw.url();
    let sid = s.clone();
    let load = tokio::spawn(async move {
        let mut w = common::Client::connect(&url).await;
        w.ok(
            "session.resume",
            json!({"session_id": sid, "attach": true, "omit_messages": true}),
        )
        .await;
        for i in 0..20 {
            let t = submit(&mut w, &sid, &format!("during {i}")).await;
            turn_events(&mut w, &t).await;
        }
    });
    let out = tempdir();
    let copy = out.path().join("copy.db");
    let data = dir.path().to_path_buf();
    let copy_arg = copy.clone();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        backup(&[path_str(&copy_arg), "--data-dir", path_str(&data)])
    })
    .await
    .expect("backup task");
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("backed up"), "{stdout}");
    load.await.expect("load");
    let after = all_events(&mut c, &s).await;
    let newest = after.last().expect("events")["seq"].as_u64().unwrap();
    assert!(newest > committed);

    // A gateway on the copy, in a data directory of its own.
    let dir2 = tempdir();
    let copy_url = format!("sqlite://{}", copy.display());
    let gw2 = Gateway::start(dir2.path(), &["--database-url", &copy_url]);
    let mut c2 = gw2.client().await;
    assert_eq!(c2.epoch(), c.epoch(), "a backup is the same history");
    // The copy held `copied` events (the report reads them back from it);
    // the gateway on it may have written more since (the ending of a turn
    // the copy caught running).
    let copied: usize = stdout
        .split(" events")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event count in {stdout:?}"));
    assert!(
        copied as u64 >= committed,
        "the copy lacks events committed before it began: {copied} < {committed}"
    );
    let restored = all_events(&mut c2, &s).await;
    let restored_latest = restored.last().expect("events")["seq"].as_u64().unwrap();
    // What it held is exactly the original's prefix.
    assert_eq!(restored[..copied], after[..copied]);

    // A client that saw the original's newest events comes back to the
    // restored copy: lost history, not "nothing missed".
    if restored_latest < newest {
        let r = c2
            .ok(
                "session.resume",
                json!({"session_id": s, "last_seen": newest, "omit_messages": true}),
            )
            .await;
        assert_eq!(r["resync"], true, "{r}");
        assert_eq!(r["latest_seq"].as_u64(), Some(restored_latest), "{r}");
    }
    drop(gw2);
    gw.kill();
}

#[test]
fn a_backup_never_overwrites_and_refuses_what_is_not_a_store() {
    let dir = tempdir();
    let out = tempdir();
    // No store there yet.
    let (code, _, stderr) = backup(&[
        path_str(&out.path().join("a.db")),
        "--data-dir",
        path_str(dir.path()),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no SQLite store"), "{stderr}");

    // A file that is not a tether store.
    std::fs::write(dir.path().join("tether.db"), b"not a database").unwrap();
    let (code, _, stderr) = backup(&[
        path_str(&out.path().join("b.db")),
        "--data-dir",
        path_str(dir.path()),
    ]);
    assert_ne!(code, 0, "{stderr}");
    assert!(!out.path().join("b.db").exists());

    // An existing destination is left alone.
    let existing = out.path().join("c.db");
    std::fs::write(&existing, b"keep me").unwrap();
    let (code, _, stderr) = backup(&[path_str(&existing), "--data-dir", path_str(dir.path())]);
    assert_ne!(code, 0);
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");

    // PostgreSQL is backed up with its own tools; the password is masked.
    let (code, _, stderr) = backup(&[
        path_str(&out.path().join("d.db")),
        "--database-url",
        "postgres://u:secret@127.0.0.1:1/db",
    ]);
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("pg_dump"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
}
