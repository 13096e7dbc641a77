//! A PostgreSQL that stops answering without closing its connections
//! (every process of the server SIGSTOPped, as a hung or cut-off server
//! looks): a write is answered 5072 within the documented bound
//! (docs/RELIABILITY.md, PROTOCOL Part 4 "PostgreSQL going away while
//! serving": `write_wait`, 5 s), not after 10-17 s; once the server goes on,
//! nothing that was answered 5072 is in the store, nothing acknowledged is
//! lost, and writes work again.
//!
//! The server is the test's own (`PgServer`), so only its processes are
//! stopped. Without PostgreSQL's binaries this skips with one loud line;
//! with `TETHER_REQUIRE_POSTGRES=1` it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::time::{Duration, Instant};

use common::{all_events, session, submit, tempdir, turn_events, Backend, Client, Gateway};
use serde_json::{json, Value};
use tether_store::testing::PgServer;

/// The documented bound on a write's answer.
const BOUND: Duration = Duration::from_secs(5);
/// Scheduling slack on a loaded 2-core machine, on top of the bound.
const SLACK: Duration = Duration::from_millis(1500);

/// `method` answers 5072 within the bound.
async fn refused_in_time(c: &mut Client, method: &str, params: Value) {
    let started = Instant::now();
    let r = c.call(method, params).await;
    let took = started.elapsed();
    println!("{method} answered after {took:?}: {r}");
    assert_eq!(r["error"]["code"], 5072, "{method}: {r}");
    assert!(
        took <= BOUND + SLACK,
        "{method} answered 5072 after {took:?}, past the bound of {BOUND:?}"
    );
}

/// Continues the server when dropped.
struct Paused<'a>(&'a PgServer);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_hung_postgres_answers_5072_within_the_bound_and_loses_nothing() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let dir = tempdir();
    let gw = Gateway::start_on(&Backend::Postgres(pg.url()), dir.path(), &[]);
    let mut c = gw.client().await;
    let id = session(&mut c).await;
    let turn = submit(&mut c, &id, "before").await;
    turn_events(&mut c, &turn).await;
    let before = all_events(&mut c, &id).await;

    pg.pause();
    // Dropped before the gateway (whose database is dropped with it): a
    // failed assertion must not leave the server stopped under that drop.
    let paused = Paused(&pg);
    refused_in_time(
        &mut c,
        "prompt.submit",
        json!({"session_id": id, "text": "during"}),
    )
    .await;
    refused_in_time(
        &mut c,
        "session.create",
        json!({"title": "during", "attach": false}),
    )
    .await;
    drop(paused);

    // Writes work again once the writer is back (it reconnects by itself).
    let mut accepted = None;
    for _ in 0..60 {
        let r = c
            .call("prompt.submit", json!({"session_id": id, "text": "after"}))
            .await;
        if r.get("error").is_none() {
            accepted = Some(
                r["result"]["turn_id"]
                    .as_str()
                    .expect("turn_id")
                    .to_string(),
            );
            break;
        }
        assert_eq!(r["error"]["code"], 5072, "{r}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let turn = accepted.expect("no write was accepted within 30 s of the server going on");
    turn_events(&mut c, &turn).await;

    // Nothing answered 5072 is stored, nothing acknowledged is lost, and
    // the seqs run on without a gap.
    let events = all_events(&mut c, &id).await;
    assert_eq!(
        &events[..before.len()],
        &before[..],
        "acknowledged events changed"
    );
    let seqs = common::seqs(&events);
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "seqs are not 1..n");
    let texts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.user")
        .map(|e| &e["payload"]["text"])
        .collect();
    assert_eq!(texts, [&json!("before"), &json!("after")], "{events:?}");
    let list = c.ok("session.list", json!({})).await;
    let titles: Vec<&Value> = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| &s["title"])
        .collect();
    assert_eq!(
        titles,
        [&json!("t")],
        "a create answered 5072 left a session: {list}"
    );
}
