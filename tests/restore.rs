//! Restoring a SQLite backup, black-box, with the WAL a real gateway leaves
//! after load beside the store it replaces:
//!
//! - a clean stop leaves no WAL content, so a backup copied in place of a
//!   stopped gateway's `tether.db` (the documented steps) opens whole;
//! - `tether restore BACKUP` puts a backup in place of a store a killed
//!   gateway left with its WAL full of frames: it moves that WAL aside with
//!   its store, checks the copy, and the gateway on it serves exactly the
//!   backup's history, and lost history as lost history;
//! - it refuses while a gateway runs, and refuses a damaged backup,
//!   changing nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{all_events, session, submit, tempdir, turn_events, Client, Gateway};
use serde_json::{json, Value};

/// Runs `tether ARGS`; its exit code, stdout and stderr.
fn tether(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("TETHER_DATABASE_URL")
        .env_remove("TETHER_DATA_DIR")
        .output()
        .expect("run tether");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn wal_of(dir: &Path) -> PathBuf {
    dir.join("tether.db-wal")
}

fn wal_bytes(dir: &Path) -> u64 {
    std::fs::metadata(wal_of(dir)).map_or(0, |m| m.len())
}

/// `turns` turns on each of `sessions`.
async fn load(c: &mut Client, sessions: &[String], turns: usize, tag: &str) {
    for id in sessions {
        for i in 0..turns {
            let t = submit(c, id, &format!("{tag} {i} {}", "words ".repeat(40))).await;
            turn_events(c, &t).await;
        }
    }
}

/// Three sessions with turns, a backup of them, then more turns on them,
/// so the store (and its WAL) goes past the backup. The sessions, what
/// each held when the backup was taken, and the backup's path.
async fn loaded_with_backup(
    gw: &Gateway,
    out: &Path,
) -> (Vec<String>, Vec<Vec<Value>>, PathBuf, String) {
    let mut c = gw.client().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(session(&mut c).await);
    }
    load(&mut c, &ids, 8, "before").await;
    let mut backed = Vec::new();
    for id in &ids {
        backed.push(all_events(&mut c, id).await);
    }
    let copy = out.join("copy.db");
    let (code, stdout, stderr) = tether(&["backup", s(&copy), "--data-dir", s(&gw.data_dir)]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    load(&mut c, &ids, 30, "after").await;
    let epoch = c.epoch();
    (ids, backed, copy, epoch)
}

/// A gateway on the restored store serves each session exactly as the
/// backup held it, and a client that saw the newer store's events is told
/// its history was lost.
async fn serves_the_backup(gw: &Gateway, ids: &[String], backed: &[Vec<Value>]) {
    let mut c = gw.client().await;
    for (id, before) in ids.iter().zip(backed) {
        let now = all_events(&mut c, id).await;
        assert_eq!(&now, before, "session {id} is not what the backup held");
        let latest = before.last().expect("events")["seq"].as_u64().expect("seq");
        let r = c
            .ok(
                "session.resume",
                json!({"session_id": id, "last_seen": latest + 10, "omit_messages": true}),
            )
            .await;
        assert_eq!(r["resync"], true, "{r}");
        assert_eq!(r["latest_seq"].as_u64(), Some(latest), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_wal_so_the_documented_copy_opens_whole() {
    let dir = tempdir();
    let out = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let (ids, backed, copy, _) = loaded_with_backup(&gw, out.path()).await;
    assert!(wal_bytes(dir.path()) > 0, "the load wrote through the WAL");
    // A read-only connection of another process (an operator's `sqlite3`,
    // a monitoring query) stays open across the stop. A read-only
    // connection that closes last does not checkpoint, so the WAL is not
    // deleted by the last close: as when the gateway's own read pool
    // closes last, which it sometimes does.
    let mut reader = {
        use sqlx::ConnectOptions;
        sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("tether.db"))
            .read_only(true)
            .connect()
            .await
            .expect("open the store read-only")
    };
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut reader)
        .await
        .expect("read");
    assert_eq!(n, 3);
    assert_eq!(gw.terminate(), Some(0));
    sqlx::Connection::close(reader).await.expect("close");
    let left = wal_bytes(dir.path());

    // docs/RELIABILITY.md's steps by hand: the backup over tether.db, with
    // whatever the stop left beside it. (With WAL frames left, the gateway
    // replayed them into the backup: sessions malformed or short.)
    std::fs::copy(&copy, dir.path().join("tether.db")).expect("copy the backup in place");
    gw.restart();
    serves_the_backup(&gw, &ids, &backed).await;
    assert_eq!(left, 0, "a clean stop left WAL frames behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_restore_replaces_a_store_left_with_its_wal_by_a_killed_gateway() {
    let dir = tempdir();
    let out = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let (ids, backed, copy, epoch) = loaded_with_backup(&gw, out.path()).await;
    // Started again (which records at once what the store holds, in
    // `tether.served`), then more turns, then a crash: the WAL is left as
    // it was, full of the newer store's frames.
    gw.terminate();
    gw.restart();
    let mut c = gw.client().await;
    for id in &ids {
        c.ok(
            "session.resume",
            json!({"session_id": id, "attach": true, "omit_messages": true}),
        )
        .await;
    }
    load(&mut c, &ids, 3, "crashed").await;
    let newest: Vec<u64> = {
        let mut v = Vec::new();
        for id in &ids {
            let all = all_events(&mut c, id).await;
            v.push(all.last().expect("events")["seq"].as_u64().expect("seq"));
        }
        v
    };
    drop(c);
    gw.kill();
    let stale = wal_bytes(dir.path());
    assert!(stale > 0, "a killed gateway leaves its WAL");

    let (code, stdout, stderr) = tether(&["restore", s(&copy), "--data-dir", s(dir.path())]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("restored 3 sessions"), "{stdout}");
    assert!(stdout.contains("new epoch"), "{stdout}");
    assert!(!wal_of(dir.path()).exists(), "the stale WAL is still there");
    // The store it replaced is kept, with its WAL, as it was.
    let kept: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("tether.db.replaced-"))
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.iter().any(|n| n.ends_with("-wal")), "{kept:?}");
    let aside = kept.iter().find(|n| !n.ends_with("-wal")).expect("store");
    assert_eq!(
        std::fs::metadata(dir.path().join(format!("{aside}-wal")))
            .expect("its WAL")
            .len(),
        stale
    );

    gw.restart();
    serves_the_backup(&gw, &ids, &backed).await;
    let mut c = gw.client().await;
    assert_ne!(
        c.epoch(),
        epoch,
        "older than what the data directory served"
    );
    for (id, newest) in ids.iter().zip(newest) {
        let r = c
            .ok(
                "session.events.since",
                json!({"session_id": id, "last_seen": newest}),
            )
            .await;
        assert_eq!(r["truncated"], true, "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_is_refused_under_a_gateway_and_for_a_damaged_backup() {
    let dir = tempdir();
    let out = tempdir();
    let mut gw = Gateway::start(dir.path(), &[]);
    let (ids, _, copy, _) = loaded_with_backup(&gw, out.path()).await;
    let mut c = gw.client().await;
    let mut now = Vec::new();
    for id in &ids {
        now.push(all_events(&mut c, id).await);
    }
    drop(c);

    let (code, stdout, stderr) = tether(&["restore", s(&copy), "--data-dir", s(dir.path())]);
    assert_eq!(
        code, 64,
        "restored under a running gateway: {stdout}{stderr}"
    );
    assert!(stderr.contains("stop the gateway"), "{stderr}");
    let mut c = gw.client().await;
    assert_eq!(&all_events(&mut c, &ids[0]).await, &now[0]);
    drop(c);
    gw.kill();

    // A backup with a page overwritten in the middle.
    let mut bytes = std::fs::read(&copy).expect("read the backup");
    let page = 4096;
    let at = (bytes.len() / page / 2) * page;
    for b in &mut bytes[at..at + page] {
        *b = 0x5a;
    }
    let damaged = out.path().join("damaged.db");
    std::fs::write(&damaged, &bytes).expect("write");
    let (code, stdout, stderr) = tether(&["restore", s(&damaged), "--data-dir", s(dir.path())]);
    assert_ne!(code, 0, "restored a damaged backup: {stdout}{stderr}");
    assert!(stderr.contains("nothing restored"), "{stderr}");

    // Not a file at all.
    let (code, _, stderr) = tether(&[
        "restore",
        s(&out.path().join("missing.db")),
        "--data-dir",
        s(dir.path()),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no backup"), "{stderr}");

    // The store is as the killed gateway left it.
    gw.restart();
    let mut c = gw.client().await;
    for (id, events) in ids.iter().zip(&now) {
        assert_eq!(&all_events(&mut c, id).await, events);
    }
}
