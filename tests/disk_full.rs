//! A turn whose `message.complete` cannot be written (disk full) still ends
//! with exactly one `message.complete` once the disk takes writes again.
//!
//! In-process, with compute hosts, and a store writer that refuses the
//! first appends holding a `message.complete` with SQLITE_FULL's error
//! (5070), as a full disk would: the turn was accepted (its `message.user`
//! is on disk), so the session must keep trying until its end is written,
//! and the client must see it once, in order, with nothing missing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chaos::client::Conn;
use serde_json::{json, Value};
use tether_actors::{GatewayArgs, GatewayConfig, GatewayHandle, HostConfig, WriterFactory};
use tether_protocol::SessionId;
use tether_store::{open_sqlite, open_sqlite_writer, StoreConfig, StoreError, StoreWrite, WriteOp};

/// Wraps the real writer; fails the appends that carry a
/// `message.complete` while `refusals` lasts, and counts them.
struct FullDisk {
    inner: Box<dyn StoreWrite>,
    refusals: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

fn carries_complete(op: &WriteOp) -> bool {
    matches!(op, WriteOp::Append { events, .. }
        if events.iter().any(|e| e.kind == "message.complete"))
}

impl StoreWrite for FullDisk {
    fn commit<'a, 'c>(
        &'a mut self,
        ops: Vec<WriteOp>,
    ) -> Pin<Box<dyn Future<Output = Vec<Result<(), StoreError>>> + Send + 'c>>
    where
        'a: 'c,
    {
        Box::pin(async move {
            let refuse: Vec<bool> = ops
                .iter()
                .map(|op| {
                    carries_complete(op)
                        && self
                            .refusals
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok()
                })
                .collect();
            // Ops are independent in the real writer: running the others
            // without the refused ones is what a full disk failing only
            // those would leave.
            let passed: Vec<WriteOp> = ops
                .into_iter()
                .zip(&refuse)
                .filter(|(_, r)| !**r)
                .map(|(op, _)| op)
                .collect();
            let mut results = self.inner.commit(passed).await.into_iter();
            refuse
                .iter()
                .map(|r| {
                    if *r {
                        self.refused.fetch_add(1, Ordering::SeqCst);
                        Err(StoreError::Full("database or disk is full".into()))
                    } else {
                        results
                            .next()
                            .unwrap_or_else(|| Err(StoreError::Io("missing result".into())))
                    }
                })
                .collect()
        })
    }

    fn latest_seq<'a, 'b, 'c>(
        &'a mut self,
        session_id: &'b SessionId,
    ) -> Pin<Box<dyn Future<Output = Result<u64, StoreError>> + Send + 'c>>
    where
        'a: 'c,
        'b: 'c,
    {
        self.inner.latest_seq(session_id)
    }
}

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_the_disk_refused_is_written_once_it_has_room() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::new(dir.path().join("tether.db"));
    let opened = open_sqlite(&cfg).await.unwrap();
    let reader = opened.reader.clone();
    // The disk refuses the turn's end three times: the first write and two
    // retries.
    let refusals = Arc::new(AtomicUsize::new(3));
    let refused = Arc::new(AtomicUsize::new(0));
    let factory: WriterFactory = {
        let (refusals, refused) = (refusals.clone(), refused.clone());
        Arc::new(move || {
            let cfg = cfg.clone();
            let (refusals, refused) = (refusals.clone(), refused.clone());
            Box::pin(async move {
                let inner = open_sqlite_writer(&cfg).await?;
                Ok(Box::new(FullDisk {
                    inner,
                    refusals,
                    refused,
                }) as Box<dyn StoreWrite>)
            })
        })
    };
    let mut hosts = HostConfig::new(vec![
        env!("CARGO_BIN_EXE_tether").to_string(),
        "host".into(),
        "--engine".into(),
        "echo".into(),
    ]);
    hosts.slots = 1;
    hosts.data_dir = Some(dir.path().to_path_buf());
    let gw = GatewayHandle::start(GatewayArgs {
        config: GatewayConfig::default(),
        hosts: Some(hosts),
        reader: opened.reader,
        handoffs: opened.handoffs,
        eraser: opened.eraser,
        epoch: opened.epoch,
        writer_factory: factory,
        cluster: None,
    })
    .await
    .unwrap();

    let mut c = Conn::open(gw.ctx()).await.unwrap();
    let r = c
        .call("session.create", json!({"title": "full", "attach": true}))
        .await
        .unwrap_or_else(|e| panic!("create: {e:?}"));
    let sid = r["session"]["session_id"].as_str().unwrap().to_string();
    let submitted = c
        .call(
            "prompt.submit",
            json!({"session_id": sid, "text": "the disk was full"}),
        )
        .await
        .unwrap_or_else(|e| panic!("submit: {e:?}"));
    let turn = submitted["turn_id"].as_str().unwrap().to_string();

    // Read events until the turn's end arrives.
    let mut events: Vec<Value> = Vec::new();
    loop {
        let e = c
            .event(WAIT)
            .await
            .unwrap_or_else(|e| panic!("connection lost: {e:?}"))
            .unwrap_or_else(|| panic!("no message.complete; got {events:?}"));
        let done = e["type"] == "message.complete" && e["turn_id"] == turn.as_str();
        events.push(e);
        if done {
            break;
        }
    }
    assert_eq!(
        refused.load(Ordering::SeqCst),
        3,
        "the disk refused it thrice"
    );
    let complete = events.last().unwrap();
    assert_eq!(complete["payload"]["status"], "complete", "{complete}");
    assert_eq!(complete["payload"]["text"], "the disk was full");

    // The session still works, and what the store holds is whole: one
    // complete, seqs 1..n without a gap.
    let r = c
        .call("prompt.submit", json!({"session_id": sid, "text": "again"}))
        .await
        .unwrap_or_else(|e| panic!("second submit: {e:?}"));
    let second = r["turn_id"].as_str().unwrap().to_string();
    loop {
        let e = c.event(WAIT).await.unwrap().expect("second turn's end");
        if e["type"] == "message.complete" && e["turn_id"] == second.as_str() {
            break;
        }
    }
    let stored = reader
        .events_since(&SessionId::from(sid.as_str()), 0, 1000)
        .await
        .unwrap();
    let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let completes: Vec<_> = stored
        .iter()
        .filter(|e| e.kind == "message.complete")
        .collect();
    assert_eq!(completes.len(), 2, "one per turn: {stored:?}");
    assert_eq!(completes[0].turn_id.as_deref(), Some(turn.as_str()));
    gw.shutdown(Duration::from_secs(5)).await;
}
