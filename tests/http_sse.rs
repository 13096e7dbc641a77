//! Black-box tests of the HTTP transport: `POST /rpc`, the SSE events
//! endpoint and the Origin rule (PROTOCOL 1.1, 1.9), over hand-written
//! HTTP/1.1 on a plain TCP socket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use common::Backend;

use std::time::Duration;

use common::http::{http, sse, Resp, Sse};
use common::{tempdir, Gateway, FRAME_WAIT};
use serde_json::{json, Value};

/// `POST /rpc` with a JSON body.
async fn rpc(addr: &str, body: &str) -> Resp {
    http(
        addr,
        "POST",
        "/rpc",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await
}

/// `POST /rpc` of one request; returns its `result`, asserting success.
async fn ok(addr: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let r = rpc(addr, &body).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert!(v.get("error").is_none(), "{method} failed: {v}");
    v["result"].clone()
}

/// A session with 3 seed messages: durable events 1..4.
async fn seeded(addr: &str) -> String {
    let r = ok(
        addr,
        "session.create",
        json!({"title":"sse","messages":[
            {"role":"user","text":"one"},
            {"role":"assistant","text":"two"},
            {"role":"user","text":"three"}]}),
    )
    .await;
    r["session"]["session_id"].as_str().unwrap().to_string()
}

async fn post_rpc_answers_requests_and_batches_in_the_body(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();

    let r = rpc(addr, r#"{"jsonrpc":"2.0","id":7,"method":"gateway.ping"}"#).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let v = r.json();
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["ok"], true);

    // A charset parameter is fine.
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[("Content-Type", "application/json; charset=utf-8")],
        br#"{"jsonrpc":"2.0","id":"x","method":"gateway.ping"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["ok"], true);

    let r = rpc(
        addr,
        r#"[{"jsonrpc":"2.0","id":1,"method":"gateway.ping"},
            {"jsonrpc":"2.0","method":"gateway.ping"},
            {"jsonrpc":"2.0","id":2,"method":"nope"}]"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let arr = v.as_array().expect("batch answer is an array");
    assert_eq!(arr.len(), 2, "{v}");
    let by_id = |id: Value| arr.iter().find(|a| a["id"] == id).cloned().unwrap();
    assert_eq!(by_id(json!(1))["result"]["ok"], true);
    assert_eq!(by_id(json!(2))["error"]["code"], -32601);

    // Notifications only: executed, nothing to answer.
    let r = rpc(addr, r#"{"jsonrpc":"2.0","method":"gateway.ping"}"#).await;
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    let r = rpc(
        addr,
        r#"[{"jsonrpc":"2.0","method":"gateway.ping"},{"jsonrpc":"2.0","method":"gateway.ping"}]"#,
    )
    .await;
    assert_eq!(r.status, 204);
}

async fn post_rpc_refuses_bad_bodies_with_the_right_status(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--max-frame-bytes", "2048"]);
    let addr = gw.addr.as_str();
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;

    let r = http(
        addr,
        "POST",
        "/rpc",
        &[("Content-Type", "text/plain")],
        ping,
    )
    .await;
    assert_eq!(r.status, 415);
    let r = http(addr, "POST", "/rpc", &[], ping).await;
    assert_eq!(r.status, 415);

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"gateway.ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(3000)
    );
    let r = rpc(addr, &big).await;
    assert_eq!(r.status, 413);
    // Just under the limit is served.
    let fits = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"gateway.ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(1900)
    );
    let r = rpc(addr, &fits).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["ok"], true);

    let r = rpc(addr, "{not json").await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32700);
    assert_eq!(v["id"], Value::Null);

    // Not UTF-8: the same as a binary frame.
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[("Content-Type", "application/json")],
        &[0xff, 0xfe, b'{'],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -32700);

    let r = rpc(addr, "[]").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -32600);
}

async fn a_post_peer_never_attaches(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let r = ok(
        addr,
        "session.create",
        json!({"title":"posted","attach":true}),
    )
    .await;
    assert_eq!(r["session"]["peers"], 0, "{r}");
    let id = r["session"]["session_id"].as_str().unwrap();
    let r = ok(
        addr,
        "session.resume",
        json!({"session_id": id, "attach": true}),
    )
    .await;
    assert_eq!(r["session"]["peers"], 0, "{r}");
    // Each POST was a peer of its own, gone once answered.
    let stats = ok(addr, "session.events.stats", json!({})).await;
    assert_eq!(stats["peers"], 1, "{stats}");
}

async fn sse_replays_after_last_event_id_then_streams_live_exactly_once(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let id = seeded(addr).await;

    // The header wins over the query.
    let path = format!("/v1/sessions/{id}/events?last_seen=0");
    let mut s = sse(addr, &path, &[("Last-Event-ID", "2")]).await;
    let a = s.event().await;
    let b = s.event().await;
    assert_eq!(a.id.as_deref(), Some("3"));
    assert_eq!(a.event.as_deref(), Some("message.complete"));
    assert_eq!(b.id.as_deref(), Some("4"));
    assert_eq!(b.event.as_deref(), Some("message.user"));
    let p = b.params();
    assert_eq!(p["seq"], 4);
    assert_eq!(p["session_id"], id.as_str());
    assert_eq!(p["type"], "message.user");
    assert_eq!(p["payload"]["text"], "three");
    assert!(!b.data.contains('\n'));

    let r = ok(addr, "session.close", json!({"session_id": id})).await;
    assert_eq!(r["closed"], true);
    let c = s.event().await;
    assert_eq!(c.id.as_deref(), Some("5"));
    assert_eq!(c.event.as_deref(), Some("session.closed"));
    assert_eq!(c.params()["seq"], 5);
    // Nothing follows `session.closed`: the stream ends.
    s.expect_end().await;

    // A closed session cannot be streamed: 410, as 4002 on every route
    // (PROTOCOL 1.6).
    let r = Sse::open(addr, &format!("/v1/sessions/{id}/events"), &[]).await;
    assert_eq!(r.err().expect("closed session refused").status, 410);
}

async fn sse_last_seen_zero_gives_everything(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let id = seeded(addr).await;
    let mut s = sse(addr, &format!("/v1/sessions/{id}/events?last_seen=0"), &[]).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        let e = s.event().await;
        got.push((e.id.clone().unwrap(), e.event.clone().unwrap()));
    }
    let want: Vec<(String, String)> = [
        ("1", "session.created"),
        ("2", "message.user"),
        ("3", "message.complete"),
        ("4", "message.user"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
}

async fn sse_without_a_watermark_streams_live_events_with_ids_on_durable_ones_only(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let id = seeded(addr).await;
    let mut s = sse(addr, &format!("/v1/sessions/{id}/events"), &[]).await;
    let r = ok(
        addr,
        "prompt.submit",
        json!({"session_id": id, "text": "hello there"}),
    )
    .await;
    assert_eq!(r["status"], "started");
    let mut deltas = String::new();
    let first = s.event().await;
    assert_eq!(first.event.as_deref(), Some("message.user"));
    assert_eq!(first.id.as_deref(), Some("5"));
    let mut last = 5;
    loop {
        let e = s.event().await;
        let p = e.params();
        match e.event.as_deref().unwrap() {
            "message.delta" => {
                assert!(e.id.is_none(), "transient event with an id: {e:?}");
                deltas.push_str(p["payload"]["text"].as_str().unwrap());
            }
            kind => {
                let seq: u64 = e.id.as_deref().expect("durable id").parse().unwrap();
                assert_eq!(seq, last + 1, "{kind}");
                last = seq;
                if kind == "message.complete" {
                    assert_eq!(p["payload"]["text"], "hello there");
                    break;
                }
            }
        }
    }
    assert_eq!(deltas, "hello there");
}

async fn sse_of_an_unknown_session_or_another_profile_is_404(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let id = seeded(addr).await;
    let r = Sse::open(
        addr,
        "/v1/sessions/s_01JNOSUCHSESSION0000000000/events",
        &[],
    )
    .await;
    assert_eq!(r.err().expect("unknown session refused").status, 404);
    let r = Sse::open(
        addr,
        &format!("/v1/sessions/{id}/events?profile=other"),
        &[],
    )
    .await;
    assert_eq!(r.err().expect("other profile refused").status, 404);
    let r = Sse::open(addr, &format!("/v1/sessions/{id}/events?last_seen=x"), &[]).await;
    assert_eq!(r.err().expect("bad watermark refused").status, 400);
    // The right profile, named explicitly, is served.
    let mut s = sse(
        addr,
        &format!("/v1/sessions/{id}/events?profile=default&last_seen=3"),
        &[],
    )
    .await;
    assert_eq!(s.event().await.id.as_deref(), Some("4"));
}

/// A session deleted under an SSE stream: the stream's last event is
/// `session.deleted`, then it ends (it stayed open sending keep-alives).
async fn an_sse_stream_of_a_deleted_session_ends_with_session_deleted(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let id = seeded(addr).await;
    let mut s = sse(addr, &format!("/v1/sessions/{id}/events?last_seen=0"), &[]).await;
    for seq in 1..=4 {
        assert_eq!(s.event().await.id, Some(seq.to_string()));
    }
    ok(addr, "session.delete", json!({"session_id": id})).await;
    let last = s.event().await;
    assert_eq!(last.event.as_deref(), Some("session.deleted"), "{last:?}");
    assert_eq!(last.id, None, "not a stored event");
    assert_eq!(last.params()["session_id"], id.as_str());
    s.expect_end().await;
}

async fn a_foreign_origin_is_refused_and_the_own_one_is_served(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;
    let json_ct = ("Content-Type", "application/json");

    let r = http(
        addr,
        "POST",
        "/rpc",
        &[json_ct, ("Origin", "http://evil.example")],
        ping,
    )
    .await;
    assert_eq!(r.status, 403);
    let own = format!("http://{addr}");
    let r = http(addr, "POST", "/rpc", &[json_ct, ("Origin", &own)], ping).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["ok"], true);

    // The events stream and the WebSocket upgrade too.
    let id = seeded(addr).await;
    let path = format!("/v1/sessions/{id}/events?last_seen=3");
    let r = Sse::open(addr, &path, &[("Origin", "http://evil.example")]).await;
    assert_eq!(r.err().expect("foreign origin refused").status, 403);
    let mut s = sse(addr, &path, &[("Origin", &own)]).await;
    assert_eq!(s.event().await.id.as_deref(), Some("4"));

    let ws_headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let mut evil = ws_headers.to_vec();
    evil.push(("Origin", "http://127.0.0.1:1"));
    let r = http(addr, "GET", "/ws", &evil, b"").await;
    assert_eq!(r.status, 403);

    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = gw.url().into_client_request().unwrap();
    req.headers_mut().insert("Origin", own.parse().unwrap());
    let (mut ws, resp) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(req),
    )
    .await
    .expect("upgrade in time")
    .expect("own origin upgrades");
    assert_eq!(resp.status(), 101);
    use futures::StreamExt;
    let first = tokio::time::timeout(FRAME_WAIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.to_text().unwrap().contains("gateway.ready"));
}

/// The session's `peers`, read over `POST /rpc` without attaching.
async fn peers(addr: &str, id: &str) -> u64 {
    let r = ok(
        addr,
        "session.resume",
        json!({"session_id": id, "attach": false, "omit_messages": true}),
    )
    .await;
    r["session"]["peers"].as_u64().unwrap()
}

async fn an_sse_stream_is_an_attached_peer_until_the_client_goes_or_the_gateway_drains(b: Backend) {
    let dir = tempdir();
    let mut gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.clone();
    let id = seeded(&addr).await;
    let s = sse(&addr, &format!("/v1/sessions/{id}/events"), &[]).await;
    assert_eq!(peers(&addr, &id).await, 1);
    drop(s);
    let mut n = 1;
    for _ in 0..100 {
        n = peers(&addr, &id).await;
        if n == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(n, 0, "the stream's peer did not detach");

    // A drain ends open streams, and the gateway exits cleanly.
    let mut s = sse(&addr, &format!("/v1/sessions/{id}/events"), &[]).await;
    assert_eq!(peers(&addr, &id).await, 1);
    let code = tokio::task::spawn_blocking(move || gw.terminate())
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    s.expect_end().await;
}

async fn an_origin_on_the_allow_list_is_served(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(
        &b,
        dir.path(),
        &["--allow-origin", "http://app.example:3000"],
    );
    let addr = gw.addr.as_str();
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;
    let json_ct = ("Content-Type", "application/json");
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[json_ct, ("Origin", "http://app.example:3000")],
        ping,
    )
    .await;
    assert_eq!(r.status, 200);
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[json_ct, ("Origin", "http://app.example:3001")],
        ping,
    )
    .await;
    assert_eq!(r.status, 403);
}

async fn posts_from_one_address_share_a_rate_bucket(b: Backend) {
    let dir = tempdir();
    // 5 per second, burst 10: each POST is a new peer, so only a bucket
    // shared across them can hold a client to its rate.
    let gw = Gateway::start_on(&b, dir.path(), &["--rate-limit-rps", "5"]);
    let addr = gw.addr.as_str();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;
    let mut limited = None;
    for _ in 0..40 {
        let r = rpc(addr, ping).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200);
    }
    let r = limited.expect("a client over its rate is refused");
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    let v = r.json();
    assert_eq!(v["error"]["code"], 4029);
    assert!(v["error"]["data"]["retry_after_ms"].as_u64().unwrap() > 0);
    // Once the bucket refills, the same client is served again.
    tokio::time::sleep(Duration::from_millis(retry * 1000)).await;
    assert_eq!(rpc(addr, ping).await.status, 200);
}

async fn a_rebound_host_name_is_refused_on_loopback(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &[]);
    let addr = gw.addr.as_str();
    let port = addr.rsplit_once(':').unwrap().1;
    let evil_host = format!("evil.example:{port}");
    let evil_origin = format!("http://{evil_host}");
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#;
    // DNS rebinding: the page's origin matches its Host, but the Host names
    // another machine than the one this loopback socket belongs to.
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[
            ("Host", &evil_host),
            ("Origin", &evil_origin),
            ("Content-Type", "application/json"),
        ],
        ping,
    )
    .await;
    assert_eq!(r.status, 403);
    let r = http(addr, "GET", "/ws", &[("Host", &evil_host)], b"").await;
    assert_eq!(r.status, 403);
    // Loopback names are served, with or without a matching Origin.
    let local = format!("localhost:{port}");
    let r = http(
        addr,
        "POST",
        "/rpc",
        &[
            ("Host", &local),
            ("Origin", &format!("http://{local}")),
            ("Content-Type", "application/json"),
        ],
        ping,
    )
    .await;
    assert_eq!(r.status, 200);
}

async fn health_and_readiness_probes(b: Backend) {
    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--token", "p:secret"]);
    let addr = gw.addr.as_str();
    let r = http(addr, "GET", "/healthz", &[], b"").await;
    assert_eq!((r.status, r.body.as_slice()), (200, b"ok\n".as_slice()));
    // Ready once a host slot is up (probes need no token).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = http(addr, "GET", "/readyz", &[], b"").await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503);
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(gw);

    let dir = tempdir();
    let gw = Gateway::start_on(&b, dir.path(), &["--hosts", "0"]);
    let r = http(&gw.addr, "GET", "/readyz", &[], b"").await;
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("no compute host up"));
}

backends!(
    post_rpc_answers_requests_and_batches_in_the_body,
    post_rpc_refuses_bad_bodies_with_the_right_status,
    a_post_peer_never_attaches,
    sse_replays_after_last_event_id_then_streams_live_exactly_once,
    sse_last_seen_zero_gives_everything,
    sse_without_a_watermark_streams_live_events_with_ids_on_durable_ones_only,
    sse_of_an_unknown_session_or_another_profile_is_404,
    an_sse_stream_of_a_deleted_session_ends_with_session_deleted,
    a_foreign_origin_is_refused_and_the_own_one_is_served,
    an_sse_stream_is_an_attached_peer_until_the_client_goes_or_the_gateway_drains,
    an_origin_on_the_allow_list_is_served,
    posts_from_one_address_share_a_rate_bucket,
    a_rebound_host_name_is_refused_on_loopback,
    health_and_readiness_probes,
);
