//! A store whose history went backwards (a restored backup, a failover to a
//! lagging replica, a hand-edited database) is never answered as if nothing
//! happened (PROTOCOL 1.3, 1.4, 1.9, Part 4 "History that went
//! backwards"): a watermark above a session's `latest_seq` is lost history
//! (`resync`, `truncated`), on `session.resume`, `session.events.since` and
//! SSE; and a store found older than the one its data directory last
//! served gets a new epoch at start.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::path::Path;

use common::http::sse;
use common::{submit, tempdir, turn_events, Backend, Client, Gateway};
use serde_json::{json, Value};

/// A session with a seeded transcript, `c` not attached; its id.
async fn seeded(c: &mut Client, n: usize) -> String {
    let seed: Vec<Value> = (0..n)
        .map(|i| json!({"role": "user", "text": format!("m{i}")}))
        .collect();
    let r = c
        .ok("session.create", json!({"messages": seed, "attach": false}))
        .await;
    r["session"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string()
}

/// Runs one echo turn on `id` (attaching `c` first); the session's
/// `latest_seq` after it.
async fn turn(c: &mut Client, id: &str) -> u64 {
    c.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    let turn = submit(c, id, "hello").await;
    let events = turn_events(c, &turn).await;
    let last = events
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .expect("durable events");
    c.ok("session.detach", json!({"session_id": id})).await;
    last
}

/// `session.resume` and `session.events.since` from `last_seen`, which is
/// above the session's `latest_seq` (`latest`): both say the history after
/// `latest` is gone.
async fn assert_lost_history(c: &mut Client, id: &str, last_seen: u64, latest: u64) {
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": last_seen, "attach": false}),
        )
        .await;
    assert_eq!(r["latest_seq"], latest, "{r}");
    assert_eq!(r["resync"], true, "resume from {last_seen} > {latest}: {r}");
    assert_eq!(
        r["truncated"], true,
        "resume from {last_seen} > {latest}: {r}"
    );
    assert_eq!(r["events"], json!([]), "{r}");
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": last_seen}),
        )
        .await;
    assert_eq!(r["latest_seq"], latest, "{r}");
    assert_eq!(r["truncated"], true, "since {last_seen} > {latest}: {r}");
    assert_eq!(r["has_more"], false, "{r}");
    assert_eq!(r["events"], json!([]), "{r}");
}

/// A watermark above `latest_seq`, on a live session and on one read from
/// the store after a restart, while a watermark at `latest_seq` is still
/// "nothing missed".
async fn a_watermark_above_latest_is_lost_history(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let id = seeded(&mut c, 3).await;
    let latest = turn(&mut c, &id).await;
    assert_lost_history(&mut c, &id, latest + 6, latest).await;
    assert_lost_history(&mut c, &id, u64::MAX, latest).await;
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": latest, "attach": false}),
        )
        .await;
    assert_eq!(r["resync"], false, "{r}");
    assert_eq!(r["truncated"], false, "{r}");
    assert_eq!(r["events"], json!([]), "{r}");

    // Not live: read from the store after a restart.
    gw.restart();
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": latest + 1}),
        )
        .await;
    assert_eq!(r["truncated"], true, "{r}");
    assert_lost_history(&mut c, &id, latest + 1, latest).await;
}

/// SSE: a `Last-Event-ID` above `latest_seq` (even u64::MAX) starts the
/// stream with a `resync` event a browser's `EventSource` receives, whose
/// `id:` is `latest_seq`; live events follow.
async fn sse_resync_is_an_event(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-replay-events", "3"]);
    let mut c = gw.client().await;
    let id = seeded(&mut c, 5).await;
    let path = format!("/v1/sessions/{id}/events");
    let epoch = c.epoch();

    let mut s = sse(
        &gw.addr,
        &path,
        &[("Last-Event-ID", "18446744073709551615")],
    )
    .await;
    let ev = s.event().await;
    assert_eq!(ev.event.as_deref(), Some("resync"), "{ev:?}");
    assert_eq!(ev.id.as_deref(), Some("6"), "{ev:?}");
    let data = ev.params();
    assert_eq!(data["reason"], "history_lost", "{data}");
    assert_eq!(data["latest_seq"], 6, "{data}");
    assert_eq!(data["last_seen"], json!(u64::MAX), "{data}");
    assert_eq!(data["epoch"], epoch, "{data}");
    assert_eq!(data["session_id"], id, "{data}");
    // Live events go on after latest_seq.
    c.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    submit(&mut c, &id, "hi").await;
    let ev = s.event().await;
    assert_eq!(ev.id.as_deref(), Some("7"), "{ev:?}");
    drop(s);

    // More missed than the replay limit: a resync event too.
    let mut s = sse(&gw.addr, &format!("{path}?last_seen=1"), &[]).await;
    let ev = s.event().await;
    assert_eq!(ev.event.as_deref(), Some("resync"), "{ev:?}");
    let data = ev.params();
    assert_eq!(data["reason"], "replay_limit", "{data}");
    assert_eq!(data["last_seen"], 1, "{data}");
    assert_eq!(ev.id, Some(data["latest_seq"].to_string()), "{ev:?}");
}

/// The scenario of a restored backup of the whole data directory: the
/// store holds less than a client saw; that client's resume is a resync,
/// not "nothing missed", even after the restored store wrote more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_data_directory_answers_the_old_watermark_with_a_resync() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let backup = dir.path().join("backup");
    let mut gw = Gateway::start(&data, &[]);
    let mut c = gw.client().await;
    let id = seeded(&mut c, 2).await;
    turn(&mut c, &id).await;
    drop(c);
    assert_eq!(gw.terminate(), Some(0));
    copy_dir(&data, &backup);

    gw.restart();
    let mut c = gw.client().await;
    let mut watermark = 0;
    for _ in 0..3 {
        watermark = turn(&mut c, &id).await;
    }
    drop(c);
    gw.kill();
    std::fs::remove_dir_all(&data).expect("remove data");
    copy_dir(&backup, &data);

    gw.restart();
    let mut c = gw.client().await;
    let latest = turn(&mut c, &id).await;
    assert!(latest < watermark, "{latest} < {watermark}");
    assert_lost_history(&mut c, &id, watermark, latest).await;
}

/// The store is found older than the one its data directory last served
/// (rolled back by hand here: events deleted, `latest_seq` rewound): it
/// gets a new epoch at start, so every client drops its watermarks, even
/// one the rolled-back store has written past again. An ordinary restart
/// keeps the epoch.
async fn a_store_older_than_the_one_served_gets_a_new_epoch(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let epoch = c.epoch();
    let id = seeded(&mut c, 2).await;
    let kept = turn(&mut c, &id).await;
    for _ in 0..2 {
        turn(&mut c, &id).await;
    }
    drop(c);
    // A crash, then a clean stop: the epoch stays.
    gw.kill();
    gw.restart();
    let c = gw.client().await;
    assert_eq!(c.epoch(), epoch, "an ordinary restart changed the epoch");
    drop(c);
    assert_eq!(gw.terminate(), Some(0));

    roll_back(&b, &gw, dir.path(), &id, kept).await;
    gw.restart();
    let mut c = gw.client().await;
    let new_epoch = c.epoch();
    assert_ne!(new_epoch, epoch, "a rolled-back store kept its epoch");
    let r = c
        .ok("session.resume", json!({"session_id": id, "attach": false}))
        .await;
    assert_eq!(r["epoch"], new_epoch);
    assert_eq!(r["latest_seq"], kept, "{r}");
    // The new epoch is the store's now: the next start keeps it.
    drop(c);
    gw.restart();
    let c = gw.client().await;
    assert_eq!(c.epoch(), new_epoch, "the new epoch did not stay");
}

/// Rolls session `id` back to `kept` in the stopped gateway's store, as a
/// restore of an older copy would leave it.
async fn roll_back(b: &Backend, gw: &Gateway, dir: &Path, id: &str, kept: u64) {
    let kept = i64::try_from(kept).expect("kept");
    let statements = [
        "DELETE FROM events WHERE session_id = $1 AND seq > $2",
        "UPDATE sessions SET latest_seq = $2 WHERE id = $1",
    ];
    match b {
        Backend::Sqlite => {
            use sqlx::Connection;
            let url = format!("sqlite://{}", dir.join("tether.db").display());
            let mut conn = sqlx::SqliteConnection::connect(&url)
                .await
                .expect("open the SQLite store");
            for sql in statements {
                sqlx::query(&sql.replace('$', "?"))
                    .bind(id)
                    .bind(kept)
                    .execute(&mut conn)
                    .await
                    .expect("roll back");
            }
        }
        Backend::Postgres(_) => {
            use sqlx::Connection;
            let url = gw.database_url().expect("database url");
            let mut conn = sqlx::PgConnection::connect(url)
                .await
                .expect("connect to the database");
            for sql in statements {
                sqlx::query(sql)
                    .bind(id)
                    .bind(kept)
                    .execute(&mut conn)
                    .await
                    .expect("roll back");
            }
        }
    }
}

/// `cp -a from to`.
fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

backends!(
    a_watermark_above_latest_is_lost_history,
    sse_resync_is_an_event,
    a_store_older_than_the_one_served_gets_a_new_epoch,
);
