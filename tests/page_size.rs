//! `--sqlite-page-size`: a new store is made with the size asked for, an
//! existing one keeps the size it was made with whatever the flag says, and
//! a size SQLite would not take is a usage error (64, as every bad flag of
//! `tether serve`) that creates nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::process::Command;

use common::{session, tempdir, Gateway};
use serde_json::json;
use tether_store::testing::sqlite_page_size as page_size;

#[tokio::test]
async fn a_new_store_takes_the_page_size_and_keeps_it() {
    let dir = tempdir();
    let db = dir.path().join("tether.db");
    let mut gw = Gateway::start(dir.path(), &["--sqlite-page-size", "4096"]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    drop(c);
    assert_eq!(gw.terminate(), Some(0));
    assert_eq!(page_size(&db).await, 4096);

    // Started again with another size (the default): the file keeps its
    // own, and its sessions.
    let gw = Gateway::start(dir.path(), &[]);
    let mut c = gw.client().await;
    let list = c.ok("session.list", json!({})).await;
    assert_eq!(list["sessions"][0]["session_id"], id.as_str(), "{list}");
    drop(c);
    drop(gw);
    assert_eq!(page_size(&db).await, 4096);

    let other = tempdir();
    let gw = Gateway::start(other.path(), &[]);
    drop(gw);
    assert_eq!(page_size(&other.path().join("tether.db")).await, 2048);
}

#[test]
fn a_size_sqlite_would_not_take_is_a_usage_error_that_creates_nothing() {
    let dir = tempdir();
    for bad in ["3000", "256", "131072", "4k"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--sqlite-page-size",
                bad,
            ])
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .expect("run tether");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{bad}: {stderr}");
        assert!(
            stderr.contains("--sqlite-page-size") && stderr.contains("power of two"),
            "{bad}: {stderr}"
        );
        assert!(!dir.path().join("tether.db").exists(), "{bad}");
    }
}
