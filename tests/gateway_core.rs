//! Black-box tests of the gateway core over WebSocket JSON-RPC.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::Duration;

use common::{seqs, tempdir, Gateway};
use serde_json::{json, Value};

fn is_hex16(s: &str) -> bool {
    s.len() == 16
        && s.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

async fn ready_frame_comes_first_and_names_the_store_epoch(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let a = gw.client().await;
    let b = gw.client().await;
    assert_eq!(a.ready["server"], "tether");
    assert_eq!(a.ready["protocol"], 1);
    assert_eq!(a.ready["profile"], "default");
    assert_eq!(a.ready["limits"]["max_frame_bytes"], 1048576);
    assert!(is_hex16(&a.epoch()), "epoch {}", a.epoch());
    assert_eq!(a.epoch(), b.epoch());
    let pa = a.ready["peer_id"].as_str().unwrap();
    let pb = b.ready["peer_id"].as_str().unwrap();
    assert!(pa.starts_with("p_") && pb.starts_with("p_") && pa != pb);
}

async fn bad_frames_get_precise_errors_and_the_connection_stays_usable(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;

    c.send_text("{not json").await;
    let f = c.next_frame().await;
    assert_eq!(f["error"]["code"], -32700);
    assert_eq!(f["id"], Value::Null);

    c.send_binary(vec![1, 2, 3]).await;
    let f = c.next_frame().await;
    assert_eq!(f["error"]["code"], -32700);

    c.send_text(r#"{"jsonrpc":"2.0","id":7,"method":"no.such"}"#)
        .await;
    let f = c.next_frame().await;
    assert_eq!(f["id"], 7);
    assert_eq!(f["error"]["code"], -32601);

    c.send_text(r#"{"jsonrpc":"2.0","id":8,"method":"session.resume","params":{"session_id":5}}"#)
        .await;
    let f = c.next_frame().await;
    assert_eq!(f["error"]["code"], -32602);
    assert_eq!(f["error"]["data"]["field"], "session_id");

    c.send_text(r#"{"jsonrpc":"2.0","id":9,"method":"session.create","params":{"messages":[{"role":"user","text":"a"},{"role":"robot","text":"b"}]}}"#).await;
    let f = c.next_frame().await;
    assert_eq!(f["error"]["code"], -32602);
    assert_eq!(f["error"]["data"]["field"], "messages[1].role");

    c.send_text("[]").await;
    let f = c.next_frame().await;
    assert_eq!(f["error"]["code"], -32600);
    assert_eq!(f["id"], Value::Null);

    // A notification is executed but never answered: the next frame is the
    // answer to the request that follows it.
    c.send_text(r#"{"jsonrpc":"2.0","method":"gateway.ping"}"#)
        .await;
    let r = c.call("gateway.ping", json!({})).await;
    assert_eq!(r["result"]["ok"], true);
    assert!(
        c.inbox.is_empty(),
        "notification was answered: {:?}",
        c.inbox
    );

    // Nothing above created a session.
    let list = c.ok("session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]));
}

async fn a_batch_is_answered_as_an_array_without_its_notifications(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    c.send_text(
        r#"[{"jsonrpc":"2.0","id":1,"method":"gateway.ping"},
            {"jsonrpc":"2.0","method":"gateway.ping"},
            {"jsonrpc":"2.0","id":2,"method":"nope"},
            {"jsonrpc":"2.0","id":3,"method":"session.events.since","params":{"session_id":"s_x"}},
            5]"#,
    )
    .await;
    let f = c.next_frame().await;
    let arr = f.as_array().expect("batch answer is an array");
    assert_eq!(arr.len(), 4, "{f}");
    let by_id = |id: Value| arr.iter().find(|r| r["id"] == id).cloned().unwrap();
    assert_eq!(by_id(json!(1))["result"]["ok"], true);
    assert_eq!(by_id(json!(2))["error"]["code"], -32601);
    assert_eq!(by_id(json!(3))["error"]["data"]["field"], "last_seen");
    assert_eq!(by_id(Value::Null)["error"]["code"], -32600);
}

async fn a_reply_goes_only_to_the_requester(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let mut b = gw.client().await;
    let s = a.ok("session.create", json!({"title":"shared"})).await;
    let id = s["session"]["session_id"].as_str().unwrap().to_string();
    a.events(1).await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
    a.ok("gateway.ping", json!({})).await;
    a.ok(
        "session.events.since",
        json!({"session_id": id, "last_seen": 0}),
    )
    .await;
    b.expect_silence(Duration::from_millis(300)).await;
}

async fn create_list_resume_close(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = c
            .ok(
                "session.create",
                json!({"title": format!("t{i}"), "attach": false}),
            )
            .await;
        let info = &r["session"];
        assert_eq!(info["status"], "idle");
        assert_eq!(info["profile"], "default");
        assert_eq!(info["latest_seq"], 1);
        assert_eq!(info["peers"], 0);
        assert_eq!(info["parent_session_id"], Value::Null);
        assert_eq!(r["epoch"], c.epoch());
        ids.push(info["session_id"].as_str().unwrap().to_string());
    }
    // Newest first, paged with a cursor.
    let p1 = c.ok("session.list", json!({"limit": 2})).await;
    let p1_ids: Vec<_> = p1["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(p1_ids, vec![ids[2].clone(), ids[1].clone()]);
    let cursor = p1["next_cursor"].as_str().expect("a next page").to_string();
    let p2 = c
        .ok("session.list", json!({"limit": 2, "cursor": cursor}))
        .await;
    assert_eq!(p2["sessions"][0]["session_id"], ids[0].as_str());
    assert_eq!(p2["next_cursor"], Value::Null);

    // Resume attaches and reports the peer.
    let r = c.ok("session.resume", json!({"session_id": ids[1]})).await;
    assert_eq!(r["session"]["peers"], 1);
    assert_eq!(r["latest_seq"], 1);
    assert_eq!(r["messages"], json!([]));
    assert_eq!(r["active_turn"], Value::Null);
    assert!(r.get("events").is_none());

    // Close: the attached peer sees session.closed with the next seq.
    assert_eq!(
        c.ok("session.close", json!({"session_id": ids[1]})).await["closed"],
        true
    );
    let ev = c.next_event().await;
    assert_eq!(ev["type"], "session.closed");
    assert_eq!(ev["seq"], 2);
    assert_eq!(ev["session_id"], ids[1].as_str());
    // Closed sessions leave the default listing, stay with include_closed.
    let l = c.ok("session.list", json!({})).await;
    assert_eq!(l["sessions"].as_array().unwrap().len(), 2);
    let l = c.ok("session.list", json!({"include_closed": true})).await;
    let closed: Vec<_> = l["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "closed")
        .collect();
    assert_eq!(closed.len(), 1);
    // A closed session cannot be resumed, but its events remain readable.
    assert_eq!(
        c.err("session.resume", json!({"session_id": ids[1]})).await["code"],
        4002
    );
    let since = c
        .ok(
            "session.events.since",
            json!({"session_id": ids[1], "last_seen": 0}),
        )
        .await;
    assert_eq!(seqs(since["events"].as_array().unwrap()), vec![1, 2]);
    // Closing again is harmless; detaching when not attached says so.
    c.ok("session.close", json!({"session_id": ids[1]})).await;
    assert_eq!(
        c.ok("session.detach", json!({"session_id": ids[0]})).await["detached"],
        false
    );
    assert_eq!(
        c.err("session.resume", json!({"session_id": "s_nope"}))
            .await["code"],
        4001
    );
}

async fn a_seeded_create_is_whole_and_its_creator_sees_every_event_once(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let seed = json!([
        {"role":"system","text":"be brief"},
        {"role":"user","text":"hello"},
        {"role":"assistant","text":"hi there"}
    ]);
    let r = c
        .ok("session.create", json!({"title":"seeded","messages": seed}))
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    assert_eq!(r["session"]["latest_seq"], 4);
    assert_eq!(r["session"]["message_count"], 3);
    let evs = c.events(4).await;
    let types: Vec<_> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session.created",
            "message.system",
            "message.user",
            "message.complete"
        ]
    );
    assert_eq!(seqs(&evs), vec![1, 2, 3, 4]);
    assert_eq!(evs[0]["payload"]["title"], "seeded");
    assert_eq!(
        evs[3]["payload"],
        json!({"text":"hi there","status":"complete"})
    );
    c.expect_silence(Duration::from_millis(200)).await;

    let mut d = gw.client().await;
    let r = d
        .ok("session.resume", json!({"session_id": id, "last_seen": 2}))
        .await;
    let msgs = r["messages"].as_array().unwrap();
    let roles: Vec<_> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant"]);
    assert_eq!(msgs[2]["text"], "hi there");
    assert_eq!(seqs(r["events"].as_array().unwrap()), vec![3, 4]);
    assert_eq!(r["truncated"], false);
    assert_eq!(r["resync"], false);
}

async fn two_peers_receive_identical_durable_frames_in_identical_order(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut a = gw.client().await;
    let mut b = gw.client().await;
    let r = a
        .ok(
            "session.create",
            json!({"messages":[{"role":"user","text":"x"}]}),
        )
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    let a_first = a.events(2).await;
    let rb = b
        .ok("session.resume", json!({"session_id": id, "last_seen": 0}))
        .await;
    // B's replay is exactly what A received live.
    assert_eq!(rb["events"].as_array().unwrap(), &a_first);
    a.ok("session.close", json!({"session_id": id})).await;
    let ea = a.next_event().await;
    let eb = b.next_event().await;
    assert_eq!(ea, eb);
    assert_eq!(ea["seq"], 3);
}

async fn events_since_reads_past_the_ring_completely(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--ring-events", "8"]);
    let mut c = gw.client().await;
    let seed: Vec<Value> = (0..49)
        .map(|i| json!({"role":"user","text": format!("m{i}")}))
        .collect();
    let r = c
        .ok("session.create", json!({"messages": seed, "attach": false}))
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();

    let all = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0}),
        )
        .await;
    assert_eq!(
        seqs(all["events"].as_array().unwrap()),
        (1..=50).collect::<Vec<_>>()
    );
    assert_eq!(all["truncated"], false);
    assert_eq!(all["has_more"], false);
    assert_eq!(all["latest_seq"], 50);
    assert_eq!(all["epoch"], c.epoch());

    let mut got = Vec::new();
    let mut last = 0;
    loop {
        let page = c
            .ok(
                "session.events.since",
                json!({"session_id": id, "last_seen": last, "limit": 15}),
            )
            .await;
        let evs = page["events"].as_array().unwrap().clone();
        got.extend(seqs(&evs));
        last = *got.last().unwrap();
        if page["has_more"] == false {
            break;
        }
    }
    assert_eq!(got, (1..=50).collect::<Vec<_>>());

    // The same from the ring and from the store are the same bytes.
    let tail = c
        .ok(
            "session.events.since",
            json!({"session_id": id, "last_seen": 45}),
        )
        .await;
    assert_eq!(
        tail["events"].as_array().unwrap()[..],
        all["events"].as_array().unwrap()[45..]
    );

    // A resume beyond the ring replays from the store too.
    let r = c
        .ok(
            "session.resume",
            json!({"session_id": id, "last_seen": 3, "omit_messages": true}),
        )
        .await;
    assert_eq!(
        seqs(r["events"].as_array().unwrap()),
        (4..=50).collect::<Vec<_>>()
    );
    assert!(r.get("messages").is_none());
}

async fn a_resume_over_the_replay_limit_asks_for_a_resync(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-replay-events", "5"]);
    let mut c = gw.client().await;
    let seed: Vec<Value> = (0..9)
        .map(|i| json!({"role":"user","text": format!("m{i}")}))
        .collect();
    let r = c
        .ok("session.create", json!({"messages": seed, "attach": false}))
        .await;
    let id = r["session"]["session_id"].as_str().unwrap();
    let r = c
        .ok("session.resume", json!({"session_id": id, "last_seen": 2}))
        .await;
    assert_eq!(r["resync"], true);
    assert_eq!(r["events"], json!([]));
    assert_eq!(r["latest_seq"], 10);
    assert_eq!(r["messages"].as_array().unwrap().len(), 9);
}

async fn a_restart_keeps_the_epoch_and_continues_seq_and_a_new_store_gets_a_new_epoch(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let epoch = c.epoch();
    let r = c
        .ok(
            "session.create",
            json!({"messages":[{"role":"user","text":"a"},{"role":"assistant","text":"b"}]}),
        )
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    c.events(3).await;
    drop(c);

    gw.restart(); // SIGKILL, then a new process on the same data dir
    let mut c = gw.client().await;
    assert_eq!(c.epoch(), epoch);
    let r = c
        .ok("session.resume", json!({"session_id": id, "last_seen": 1}))
        .await;
    assert_eq!(r["latest_seq"], 3);
    assert_eq!(seqs(r["events"].as_array().unwrap()), vec![2, 3]);
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    c.ok("session.close", json!({"session_id": id})).await;
    assert_eq!(c.next_event().await["seq"], 4);

    let other = tempdir();
    let gw2 = Gateway::start_on(&b, other.path(), &[]);
    assert_ne!(gw2.client().await.epoch(), epoch);
}

async fn profiles_cannot_see_each_other(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let r = c
        .ok(
            "session.create",
            json!({"profile":"alice","title":"secret","attach":false}),
        )
        .await;
    let id = r["session"]["session_id"].as_str().unwrap().to_string();
    assert_eq!(r["session"]["profile"], "alice");
    for method in ["session.resume", "session.close"] {
        assert_eq!(
            c.err(method, json!({"session_id": id})).await["code"],
            4001,
            "{method}"
        );
        assert_eq!(
            c.err(method, json!({"session_id": id, "profile":"bob"}))
                .await["code"],
            4001,
            "{method}"
        );
    }
    assert_eq!(
        c.err(
            "session.events.since",
            json!({"session_id": id, "last_seen": 0, "profile":"bob"})
        )
        .await["code"],
        4001
    );
    assert_eq!(
        c.ok("session.list", json!({"profile":"bob"})).await["sessions"],
        json!([])
    );
    assert_eq!(c.ok("session.list", json!({})).await["sessions"], json!([]));
    let l = c.ok("session.list", json!({"profile":"alice"})).await;
    assert_eq!(l["sessions"][0]["session_id"], id.as_str());
    c.ok(
        "session.resume",
        json!({"session_id": id, "profile":"alice"}),
    )
    .await;
    let stats = c.ok("session.events.stats", json!({})).await;
    assert_eq!(
        stats["sessions_live"], 0,
        "default profile sees none of alice's: {stats}"
    );
}

async fn sigterm_drains_closes_peers_with_1001_and_exits_zero(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    c.ok("session.create", json!({})).await;
    let code = gw.terminate();
    assert_eq!(code, Some(0));
    assert_eq!(c.expect_close().await, 1001);
}

async fn stats_count_live_sessions_peers_and_ring(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let mut c = gw.client().await;
    let _d = gw.client().await;
    c.ok(
        "session.create",
        json!({"messages":[{"role":"user","text":"x"}]}),
    )
    .await;
    let s = c.ok("session.events.stats", json!({})).await;
    assert_eq!(s["sessions_live"], 1);
    assert_eq!(s["peers"], 2);
    assert_eq!(s["ring"]["sessions"], 1);
    assert_eq!(s["ring"]["events"], 2);
    assert!(s["ring"]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(s["active_turns"], json!([]));
}

async fn a_frame_over_the_limit_gets_4013_and_the_connection_stays(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-frame-bytes", "2048"]);
    let mut c = gw.client().await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"gateway.ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(4000)
    );
    c.send_text(&big).await;
    let f = c.next_frame().await;
    assert_eq!(f["error"]["code"], 4013);
    assert_eq!(f["id"], Value::Null);
    c.ok("gateway.ping", json!({})).await;
    // Beyond 4× the limit the connection is closed with 1009.
    c.send_text(&"y".repeat(9000)).await;
    assert_eq!(c.expect_close().await, 1009);
}

async fn a_peer_over_its_rate_gets_4029_and_a_flooding_one_is_closed_with_1008(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--rate-limit-rps", "5"]);
    let mut c = gw.client().await;
    // A burst of 20 in one batch: the first 10 (the burst) pass.
    let batch: Vec<Value> = (0..20)
        .map(|i| json!({"jsonrpc":"2.0","id": i,"method":"gateway.ping"}))
        .collect();
    c.send_text(&Value::Array(batch).to_string()).await;
    let answers = c.next_frame().await;
    let answers = answers.as_array().expect("batch answer");
    let limited: Vec<_> = answers
        .iter()
        .filter(|a| a["error"]["code"] == 4029)
        .collect();
    assert_eq!(answers.len() - limited.len(), 10, "{answers:?}");
    assert!(
        limited[0]["error"]["data"]["retry_after_ms"]
            .as_u64()
            .unwrap()
            > 0
    );
    // Flooding for more than 3 s in a row ends the connection with 1008.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(4500) {
        if !c
            .try_send_text(r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#)
            .await
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let code = c.expect_close().await;
    assert_eq!(code, 1008);
    // Others are not affected.
    let mut d = gw.client().await;
    d.ok("gateway.ping", json!({})).await;
}

backends!(
    ready_frame_comes_first_and_names_the_store_epoch,
    bad_frames_get_precise_errors_and_the_connection_stays_usable,
    a_batch_is_answered_as_an_array_without_its_notifications,
    a_reply_goes_only_to_the_requester,
    create_list_resume_close,
    a_seeded_create_is_whole_and_its_creator_sees_every_event_once,
    two_peers_receive_identical_durable_frames_in_identical_order,
    events_since_reads_past_the_ring_completely,
    a_resume_over_the_replay_limit_asks_for_a_resync,
    a_restart_keeps_the_epoch_and_continues_seq_and_a_new_store_gets_a_new_epoch,
    profiles_cannot_see_each_other,
    sigterm_drains_closes_peers_with_1001_and_exits_zero,
    stats_count_live_sessions_peers_and_ring,
    a_frame_over_the_limit_gets_4013_and_the_connection_stays,
    a_peer_over_its_rate_gets_4029_and_a_flooding_one_is_closed_with_1008,
);
