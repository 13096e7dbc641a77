//! Params validation, driven through `parse_frame` as a peer would.

use super::*;
use crate::envelope::{parse_frame, Call, Incoming, Item};
use crate::error::codes;
use serde_json::json;

fn single(text: &str) -> Item {
    match parse_frame(text) {
        Incoming::Single(item) => item,
        other => panic!("expected a single item for {text}, got {other:?}"),
    }
}

fn call(text: &str) -> Call {
    match single(text) {
        Item::Call(c) => c,
        other => panic!("expected a call for {text}, got {other:?}"),
    }
}

fn item_error(text: &str) -> (Option<Value>, RpcError) {
    match single(text) {
        Item::Error { id, error } => (id, error),
        other => panic!("expected an error for {text}, got {other:?}"),
    }
}

fn request(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

/// The `data.field` of the -32602 that `method` with `params` must produce.
fn bad_field(method: &str, params: &str) -> String {
    let (id, e) = item_error(&request(method, params));
    assert_eq!(id, Some(json!(1)));
    assert_eq!(e.code, codes::INVALID_PARAMS, "{method} {params}: {e:?}");
    e.field().expect("data.field").to_owned()
}

#[test]
fn missing_required_fields() {
    for m in [
        "session.resume",
        "session.detach",
        "session.close",
        "session.branch",
        "prompt.submit",
        "session.interrupt",
        "session.compress",
        "session.events.since",
        "handoff.request",
        "handoff.state",
    ] {
        assert_eq!(bad_field(m, "{}"), "session_id", "{m}");
        assert_eq!(bad_field(m, r#"{"session_id":5}"#), "session_id", "{m}");
        assert_eq!(bad_field(m, r#"{"session_id":null}"#), "session_id", "{m}");
        assert_eq!(
            bad_field(m, r#"{"session_id":{"a":1}}"#),
            "session_id",
            "{m}"
        );
    }
    assert_eq!(bad_field("prompt.submit", r#"{"session_id":"s"}"#), "text");
    assert_eq!(
        bad_field("prompt.submit", r#"{"session_id":"s","text":5}"#),
        "text"
    );
    assert_eq!(
        bad_field("session.events.since", r#"{"session_id":"s"}"#),
        "last_seen"
    );
    assert_eq!(
        bad_field("handoff.request", r#"{"session_id":"s"}"#),
        "target"
    );
    assert_eq!(bad_field("handoff.claim", "{}"), "target");
    assert_eq!(bad_field("handoff.claim", r#"{"target":[]}"#), "target");
    assert_eq!(bad_field("handoff.complete", "{}"), "handoff_id");
    assert_eq!(
        bad_field("handoff.complete", r#"{"handoff_id":7}"#),
        "handoff_id"
    );
    assert_eq!(bad_field("handoff.fail", r#"{"error":"e"}"#), "handoff_id");
    assert_eq!(bad_field("handoff.fail", r#"{"handoff_id":"h"}"#), "error");
    assert_eq!(
        bad_field(
            "handoff.fail",
            r#"{"handoff_id":"h","error":"e","only_if_pending":"yes"}"#
        ),
        "only_if_pending"
    );
}

#[test]
fn wrong_types_name_the_field() {
    let cases = [
        ("session.create", r#"{"title":5}"#, "title"),
        ("session.create", r#"{"profile":false}"#, "profile"),
        ("session.create", r#"{"attach":"yes"}"#, "attach"),
        (
            "session.create",
            r#"{"close_on_disconnect":1}"#,
            "close_on_disconnect",
        ),
        (
            "session.create",
            r#"{"follow_profile_config":[]}"#,
            "follow_profile_config",
        ),
        ("session.create", r#"{"messages":"x"}"#, "messages"),
        ("session.create", r#"{"messages":[5]}"#, "messages[0]"),
        ("session.create", r#"{"engine":[]}"#, "engine"),
        (
            "session.create",
            r#"{"messages":[{"role":"user"}]}"#,
            "messages[0].text",
        ),
        (
            "session.create",
            r#"{"messages":[{"text":"a"}]}"#,
            "messages[0].role",
        ),
        (
            "session.create",
            r#"{"messages":[{"role":"user","text":"a"},{"role":"bot","text":"b"}]}"#,
            "messages[1].role",
        ),
        (
            "session.create",
            r#"{"messages":[{"role":"user","text":"a"},{"role":"tool","text":"b"}]}"#,
            "messages[1].role",
        ),
        (
            "session.create",
            r#"{"messages":[{"role":"user","text":"a"},{"role":"user","text":1}]}"#,
            "messages[1].text",
        ),
        (
            "session.resume",
            r#"{"session_id":"s","last_seen":"3"}"#,
            "last_seen",
        ),
        (
            "session.resume",
            r#"{"session_id":"s","last_seen":-1}"#,
            "last_seen",
        ),
        (
            "session.resume",
            r#"{"session_id":"s","last_seen":1.5}"#,
            "last_seen",
        ),
        (
            "session.resume",
            r#"{"session_id":"s","omit_messages":0}"#,
            "omit_messages",
        ),
        (
            "session.resume",
            r#"{"session_id":"s","attach":"no"}"#,
            "attach",
        ),
        ("session.list", r#"{"cursor":5}"#, "cursor"),
        (
            "session.list",
            r#"{"include_closed":"x"}"#,
            "include_closed",
        ),
        ("session.list", r#"{"limit":"10"}"#, "limit"),
        (
            "session.branch",
            r#"{"session_id":"s","upto_seq":-1}"#,
            "upto_seq",
        ),
        (
            "session.branch",
            r#"{"session_id":"s","title":{}}"#,
            "title",
        ),
        (
            "session.compress",
            r#"{"session_id":"s","focus":1}"#,
            "focus",
        ),
        (
            "session.events.since",
            r#"{"session_id":"s","last_seen":-1}"#,
            "last_seen",
        ),
        (
            "session.events.since",
            r#"{"session_id":"s","last_seen":null}"#,
            "last_seen",
        ),
        (
            "session.detach",
            r#"{"session_id":"s","profile":1}"#,
            "profile",
        ),
    ];
    for (method, params, field) in cases {
        assert_eq!(bad_field(method, params), field, "{method} {params}");
    }
}

#[test]
fn error_message_is_readable() {
    let (_, e) = item_error(&request(
        "session.create",
        r#"{"messages":[{"role":"user","text":"a"},{"role":"bot","text":"b"}]}"#,
    ));
    assert!(e.message.contains("bot"), "{}", e.message);
    assert!(!e.message.contains("line 1"), "{}", e.message);
    assert_eq!(e.data, Some(json!({"field": "messages[1].role"})));
}

#[test]
fn limits_out_of_range() {
    for limit in ["0", "501", "-1", "4294967296", "99999999999999999999"] {
        let p = format!(r#"{{"limit":{limit}}}"#);
        assert_eq!(bad_field("session.list", &p), "limit", "{p}");
    }
    for limit in ["0", "10001", "-5"] {
        let p = format!(r#"{{"session_id":"s","last_seen":0,"limit":{limit}}}"#);
        assert_eq!(bad_field("session.events.since", &p), "limit", "{p}");
    }
    let ok = |m: &str, p: &str| call(&request(m, p)).request;
    assert!(
        matches!(ok("session.list", r#"{"limit":1}"#), Request::SessionList(p) if p.limit == 1)
    );
    assert!(
        matches!(ok("session.list", r#"{"limit":500}"#), Request::SessionList(p) if p.limit == 500)
    );
    assert!(matches!(
        ok("session.events.since", r#"{"session_id":"s","last_seen":0,"limit":10000}"#),
        Request::EventsSince(p) if p.limit == 10000 && p.last_seen == 0
    ));
}

#[test]
fn huge_numbers() {
    for n in [
        "1e400",
        "-1e400",
        "1180591620717411303424",
        "18446744073709551616",
    ] {
        let p = format!(r#"{{"session_id":"s","last_seen":{n}}}"#);
        assert_eq!(bad_field("session.events.since", &p), "last_seen", "{p}");
        assert_eq!(bad_field("session.resume", &p), "last_seen", "{p}");
    }
    // u64::MAX itself is a valid watermark.
    let c = call(&request(
        "session.resume",
        r#"{"session_id":"s","last_seen":18446744073709551615}"#,
    ));
    assert!(matches!(c.request, Request::SessionResume(p) if p.last_seen == Some(u64::MAX)));
    // A huge number in an ignored field is fine; as an id it is unreadable.
    assert!(matches!(
        single(&request("gateway.ping", r#"{"x":1e400}"#)),
        Item::Call(_)
    ));
    let (id, e) = item_error(r#"{"jsonrpc":"2.0","id":1e400,"method":"gateway.ping"}"#);
    assert_eq!((id, e.code), (Some(Value::Null), codes::INVALID_REQUEST));
}

#[test]
fn from_parts_matches_parse_frame() {
    let err = |m: &str, p: Value| Request::from_parts(m, p).unwrap_err();
    let e = err(
        "session.create",
        json!({"messages":[{"role":"user","text":"a"},{"role":"bot","text":"b"}]}),
    );
    assert_eq!(
        (e.code, e.field()),
        (codes::INVALID_PARAMS, Some("messages[1].role"))
    );
    let e = err("session.create", json!({"messages":[{"role":"user"}]}));
    assert_eq!(e.field(), Some("messages[0].text"));
    assert_eq!(
        err("prompt.submit", json!({"session_id":"s"})).field(),
        Some("text")
    );
    assert_eq!(
        err("session.resume", json!({"session_id":1})).field(),
        Some("session_id")
    );
    assert_eq!(err("session.list", json!([])).field(), Some("params"));
    assert_eq!(
        err("session.list", json!({"limit":0})).field(),
        Some("limit")
    );
    assert_eq!(err("nope", json!({})).code, codes::METHOD_NOT_FOUND);
    assert_eq!(
        Request::from_parts("session.list", Value::Null).unwrap(),
        Request::SessionList(ListParams::default())
    );
}

/// Minimal valid params for every method.
fn minimal(method: &str) -> Value {
    match method {
        "gateway.ping"
        | "session.events.stats"
        | "session.create"
        | "session.list"
        | "gateway.hello" => json!({}),
        "prompt.submit" => json!({"session_id":"s","text":"hi"}),
        "session.events.since" => json!({"session_id":"s","last_seen":0}),
        "handoff.request" => json!({"session_id":"s","target":"t"}),
        "handoff.claim" => json!({"target":"t"}),
        "handoff.complete" => json!({"handoff_id":"h"}),
        "handoff.fail" => json!({"handoff_id":"h","error":"e"}),
        "session.rename" => json!({"session_id":"s","title":"t"}),
        "gateway.refresh_token" => json!({"token":"t"}),
        _ => json!({"session_id":"s"}),
    }
}

#[test]
fn every_method_parses_and_names_itself() {
    assert_eq!(METHODS.len(), 22);
    for &m in METHODS {
        let params = minimal(m);
        let text = request(m, &params.to_string());
        let c = call(&text);
        assert_eq!(c.request.method(), m);
        assert_eq!(Request::from_parts(m, params).unwrap(), c.request);
        // Written back out, the request decodes to itself.
        let again = c.request.params().unwrap().unwrap_or(Value::Null);
        assert_eq!(Request::from_parts(m, again).unwrap(), c.request, "{m}");
        // With a profile, every method that takes params keeps it; but a
        // hello: a peer's profile is never its own word.
        if m == "gateway.hello" {
            let r = Request::from_parts(m, json!({"profile": "work"})).unwrap();
            assert!(r.params().unwrap().unwrap().get("profile").is_none());
        } else if !matches!(
            m,
            "gateway.ping" | "session.events.stats" | "gateway.refresh_token"
        ) {
            let mut p = minimal(m);
            p["profile"] = json!("work");
            let r = Request::from_parts(m, p).unwrap();
            assert_eq!(r.params().unwrap().unwrap()["profile"], "work", "{m}");
        }
    }
}

#[test]
fn delivery_budget_is_bounded_and_named() {
    for m in ["session.create", "session.resume"] {
        let with = |d: &str| format!(r#"{{"session_id":"s_1","delivery":{d}}}"#);
        for bad in [
            r#"{"max_delay_ms":1001}"#,
            r#"{"max_delay_ms":-1}"#,
            r#"{"max_delay_ms":"5"}"#,
            r#"{"max_delay_ms":1.5}"#,
        ] {
            assert_eq!(
                bad_field(m, &with(bad)),
                "delivery.max_delay_ms",
                "{m} {bad}"
            );
        }
        assert_eq!(bad_field(m, &with("5")), "delivery", "{m}");
        for good in [
            r#"{"max_delay_ms":1000}"#,
            r#"{"max_delay_ms":0}"#,
            "{}",
            "null",
        ] {
            let c = call(&request(m, &with(good)));
            let delivery = match c.request {
                Request::SessionCreate(p) => p.delivery,
                Request::SessionResume(p) => p.delivery,
                other => panic!("{other:?}"),
            };
            assert!(
                delivery.is_none_or(|d| d.max_delay_ms <= 1000),
                "{m} {good}"
            );
        }
    }
}

/// A NUL in any string param is -32602 naming the field, whatever the
/// method; in an id it names nothing (4001, 4090 for a handoff); in an
/// unknown field, which is ignored, it changes nothing.
#[test]
fn nul_in_a_string_is_refused_naming_the_field() {
    let nul = r"a\u0000b";
    for (method, params, field) in [
        ("session.create", format!(r#"{{"title":"{nul}"}}"#), "title"),
        (
            "session.create",
            format!(r#"{{"profile":"{nul}"}}"#),
            "profile",
        ),
        (
            "session.create",
            format!(
                r#"{{"messages":[{{"role":"user","text":"x"}},{{"role":"user","text":"{nul}"}}]}}"#
            ),
            "messages[1].text",
        ),
        (
            "session.create",
            format!(r#"{{"engine":{{"model":"{nul}"}}}}"#),
            "engine.model",
        ),
        (
            "session.list",
            format!(r#"{{"profile":"{nul}"}}"#),
            "profile",
        ),
        ("session.list", format!(r#"{{"cursor":"{nul}"}}"#), "cursor"),
        (
            "session.branch",
            format!(r#"{{"session_id":"s_1","title":"{nul}"}}"#),
            "title",
        ),
        (
            "prompt.submit",
            format!(r#"{{"session_id":"s_1","text":"{nul}"}}"#),
            "text",
        ),
        (
            "session.compress",
            format!(r#"{{"session_id":"s_1","focus":"{nul}"}}"#),
            "focus",
        ),
        (
            "handoff.request",
            format!(r#"{{"session_id":"s_1","target":"{nul}"}}"#),
            "target",
        ),
        (
            "handoff.claim",
            format!(r#"{{"target":"{nul}"}}"#),
            "target",
        ),
        (
            "handoff.fail",
            format!(r#"{{"handoff_id":"h_1","error":"{nul}"}}"#),
            "error",
        ),
        (
            "session.resume",
            format!(r#"{{"session_id":"s_1","profile":"{nul}"}}"#),
            "profile",
        ),
    ] {
        assert_eq!(bad_field(method, &params), field, "{method} {params}");
        // The same through a params `Value` (how a batch item may come).
        let value: Value = serde_json::from_str(&params).expect("params");
        let e = Request::from_parts(method, value).expect_err("refused");
        assert_eq!(e.code, codes::INVALID_PARAMS, "{method} {params}");
        assert_eq!(e.field(), Some(field), "{method} {params}");
    }
    for method in ["session.resume", "session.close", "session.events.since"] {
        let params = r#"{"session_id":"s_\u0000","last_seen":0}"#;
        let (_, e) = item_error(&request(method, params));
        assert_eq!(e.code, codes::SESSION_NOT_FOUND, "{method}: {e:?}");
    }
    let (_, e) = item_error(&request("handoff.complete", r#"{"handoff_id":"h_\u0000"}"#));
    assert_eq!(e.code, codes::HANDOFF_CONFLICT, "{e:?}");
    // Ignored fields stay ignored; an escaped backslash before `u0000` is no NUL.
    call(&request(
        "session.create",
        r#"{"title":"ok","other":"\u0000"}"#,
    ));
    call(&request("session.create", r#"{"title":"a\\u0000"}"#));
}
