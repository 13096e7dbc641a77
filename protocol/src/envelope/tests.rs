use super::*;
use crate::error::codes;
use crate::methods::*;
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

fn frame_error(text: &str) -> RpcError {
    match parse_frame(text) {
        Incoming::Invalid(e) => e,
        other => panic!("expected a whole-frame error for {text:.80}, got {other:?}"),
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
fn valid_request() {
    let c = call(r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping"}"#);
    assert_eq!(c.id, Some(json!(1)));
    assert_eq!(c.request, Request::Ping);

    let c = call(
        r#"{"jsonrpc":"2.0","id":"a-1","method":"session.create","params":
            {"title":"t","messages":[{"role":"user","text":"hi"}],"future_field":1}}"#,
    );
    assert_eq!(c.id, Some(json!("a-1")));
    let expected = CreateParams {
        title: Some("t".into()),
        messages: vec![SeedMessage {
            role: SeedRole::User,
            text: "hi".into(),
        }],
        ..CreateParams::default()
    };
    assert_eq!(c.request, Request::SessionCreate(expected));

    let c = call(&request(
        "prompt.submit",
        r#"{"session_id":"s_x","text":"a \"quoted\" \u00e9"}"#,
    ));
    assert_eq!(
        c.request,
        Request::Write(SessionWrite::PromptSubmit(SubmitParams {
            session_id: "s_x".into(),
            profile: None,
            text: "a \"quoted\" \u{e9}".into(),
            replaces: None,
            multitask: None,
            drop_queued: false,
            dedupe_key: None,
        }))
    );
}

#[test]
fn ids_are_echoed_verbatim() {
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":null,"method":"gateway.ping"}"#).id,
        Some(Value::Null)
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":1.5,"method":"gateway.ping"}"#).id,
        Some(json!(1.5))
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":-7,"method":"gateway.ping"}"#).id,
        Some(json!(-7))
    );
    for bad in ["{}", "[1]", "true"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{bad},"method":"gateway.ping"}}"#);
        let (id, e) = item_error(&text);
        assert_eq!(id, Some(Value::Null), "{text}");
        assert_eq!(e.code, codes::INVALID_REQUEST);
    }
}

#[test]
fn minus_zero_is_an_id_echoed_as_sent() {
    let id = call(r#"{"jsonrpc":"2.0","id":-0,"method":"gateway.ping"}"#)
        .id
        .expect("an id");
    let echoed = encode_result(&id, &json!({"ok": true}));
    assert_eq!(echoed, r#"{"jsonrpc":"2.0","id":-0,"result":{"ok":true}}"#);
    let echoed = encode_error(&id, &RpcError::method_not_found("x"));
    assert!(
        echoed.starts_with(r#"{"jsonrpc":"2.0","id":-0,"error":"#),
        "{echoed}"
    );
    // Zero itself and other numbers are untouched.
    assert_eq!(
        encode_result(&json!(0), &1),
        r#"{"jsonrpc":"2.0","id":0,"result":1}"#
    );
    assert_eq!(
        encode_result(&json!(-1.5), &1),
        r#"{"jsonrpc":"2.0","id":-1.5,"result":1}"#
    );
    // `-00` is not JSON; integers beyond 64 bits are still refused.
    let (id, e) =
        item_error(r#"{"jsonrpc":"2.0","id":-18446744073709551616,"method":"gateway.ping"}"#);
    assert_eq!(id, Some(Value::Null));
    assert!(e.message.contains("beyond 64 bits"), "{}", e.message);
}

#[test]
fn numbers_no_float_holds_are_out_of_range() {
    for n in ["1e400", "-1e400", "1E+999"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"gateway.ping"}}"#);
        let (id, e) = item_error(&text);
        assert_eq!(
            (id, e.code),
            (Some(Value::Null), codes::INVALID_REQUEST),
            "{text}"
        );
        assert!(e.message.contains("out of range"), "{text}: {}", e.message);
        let p = format!(r#"{{"session_id":"s","last_seen":{n}}}"#);
        let (_, e) = item_error(&request("session.events.since", &p));
        assert_eq!(e.field(), Some("last_seen"));
        assert!(e.message.contains("out of range"), "{p}: {}", e.message);
    }
}

#[test]
fn notification() {
    let c = call(r#"{"jsonrpc":"2.0","method":"gateway.ping"}"#);
    assert_eq!(c.id, None);
    // A notification that fails after it is known to be a request is not answered.
    let (id, e) = item_error(r#"{"jsonrpc":"2.0","method":"nope"}"#);
    assert_eq!((id, e.code), (None, codes::METHOD_NOT_FOUND));
    let (id, e) = item_error(r#"{"jsonrpc":"2.0","method":"prompt.submit","params":{}}"#);
    assert_eq!((id, e.code), (None, codes::INVALID_PARAMS));
    // One that is not even a request is answered with id null.
    let (id, e) = item_error(r#"{"jsonrpc":"2.0"}"#);
    assert_eq!((id, e.code), (Some(Value::Null), codes::INVALID_REQUEST));
    let (id, e) = item_error(r#"{"method":"gateway.ping"}"#);
    assert_eq!((id, e.code), (Some(Value::Null), codes::INVALID_REQUEST));
}

#[test]
fn batch_with_good_and_bad_members() {
    let text = r#"[
        {"jsonrpc":"2.0","id":1,"method":"gateway.ping"},
        {"jsonrpc":"2.0","method":"gateway.ping"},
        {"jsonrpc":"1.0","id":2,"method":"gateway.ping"},
        5,
        {"jsonrpc":"2.0","id":3,"method":"no.such"},
        {"jsonrpc":"2.0","id":4,"method":"session.resume","params":{"session_id":5}},
        []
    ]"#;
    let items = match parse_frame(text) {
        Incoming::Batch(items) => items,
        other => panic!("{other:?}"),
    };
    assert_eq!(items.len(), 7);
    assert_eq!(
        items[0],
        Item::Call(Call {
            id: Some(json!(1)),
            request: Request::Ping
        })
    );
    assert_eq!(
        items[1],
        Item::Call(Call {
            id: None,
            request: Request::Ping
        })
    );
    let errs: Vec<(Option<Value>, i64, Option<String>)> = items[2..]
        .iter()
        .map(|i| match i {
            Item::Error { id, error } => (id.clone(), error.code, error.field().map(str::to_owned)),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        errs,
        vec![
            (Some(json!(2)), codes::INVALID_REQUEST, None),
            (Some(Value::Null), codes::INVALID_REQUEST, None),
            (Some(json!(3)), codes::METHOD_NOT_FOUND, None),
            (
                Some(json!(4)),
                codes::INVALID_PARAMS,
                Some("session_id".into())
            ),
            (Some(Value::Null), codes::INVALID_REQUEST, None),
        ]
    );
}

#[test]
fn empty_batch() {
    for text in ["[]", " [ ] ", "\n[\n]\n"] {
        let e = frame_error(text);
        assert_eq!(e.code, codes::INVALID_REQUEST, "{text}");
    }
}

#[test]
fn garbage_and_truncated_json() {
    for text in [
        "",
        "   ",
        "hello",
        "{",
        r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping""#,
        r#"{"jsonrpc":"2.0","id":1,"method":"gateway.pi"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"gateway.ping"},"#,
        "{}{}",
        r#"{"a":1,}"#,
        "{'a':1}",
        "\u{feff}{}",
    ] {
        let e = frame_error(text);
        assert_eq!(e.code, codes::PARSE_ERROR, "{text:?}");
        assert_eq!(e.data, None);
    }
}

#[test]
fn non_object_frames() {
    for text in ["5", r#""x""#, "null", "true", " 1.5 "] {
        let (id, e) = item_error(text);
        assert_eq!(id, Some(Value::Null), "{text}");
        assert_eq!(e.code, codes::INVALID_REQUEST, "{text}");
    }
}

#[test]
fn jsonrpc_version() {
    for version in [r#""1.0""#, "2.0", "2", "null", r#""2.0 ""#] {
        let text = format!(r#"{{"jsonrpc":{version},"id":9,"method":"gateway.ping"}}"#);
        let (id, e) = item_error(&text);
        assert_eq!(
            (id, e.code),
            (Some(json!(9)), codes::INVALID_REQUEST),
            "{text}"
        );
    }
    let (id, e) = item_error(r#"{"id":9,"method":"gateway.ping"}"#);
    assert_eq!((id, e.code), (Some(json!(9)), codes::INVALID_REQUEST));
    // An escaped "2.0" is still "2.0".
    let c = call(r#"{"jsonrpc":"2\u002e0","id":9,"method":"gateway.ping"}"#);
    assert_eq!(c.request, Request::Ping);
}

#[test]
fn method_checks() {
    let (id, e) = item_error(r#"{"jsonrpc":"2.0","id":1}"#);
    assert_eq!((id, e.code), (Some(json!(1)), codes::INVALID_REQUEST));
    for m in ["5", "null", "[]", r#"{"a":1}"#] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":{m}}}"#);
        let (id, e) = item_error(&text);
        assert_eq!(
            (id, e.code),
            (Some(json!(1)), codes::INVALID_REQUEST),
            "{text}"
        );
    }
    let (id, e) = item_error(r#"{"jsonrpc":"2.0","id":"q","method":"session.explode"}"#);
    assert_eq!((id, e.code), (Some(json!("q")), codes::METHOD_NOT_FOUND));
    assert!(e.message.contains("session.explode"), "{}", e.message);
    // Duplicate members are not a valid request.
    let (id, e) =
        item_error(r#"{"jsonrpc":"2.0","id":1,"method":"gateway.ping","method":"gateway.ping"}"#);
    assert_eq!((id, e.code), (Some(Value::Null), codes::INVALID_REQUEST));
}

#[test]
fn params_must_be_an_object() {
    for p in ["[]", "[1,2]", r#""x""#, "5", "true"] {
        assert_eq!(bad_field("gateway.ping", p), "params", "{p}");
        assert_eq!(bad_field("session.list", p), "params", "{p}");
    }
    // Absent or null params mean {}.
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":1,"method":"session.list"}"#).request,
        Request::SessionList(ListParams::default())
    );
    assert_eq!(
        call(&request("session.list", "null")).request,
        Request::SessionList(ListParams::default())
    );
    // Methods without params ignore whatever object they get.
    assert_eq!(
        call(&request("session.events.stats", r#"{"x":1}"#)).request,
        Request::EventsStats
    );
}

/// A ping frame whose params hold `inner` levels of arrays: total depth is
/// `inner + 2` (the request object and the params object).
fn nested(total_depth: usize) -> String {
    let inner = total_depth - 2;
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"gateway.ping","params":{{"x":{}{}}}}}"#,
        "[".repeat(inner),
        "]".repeat(inner)
    )
}

#[test]
fn nesting_depth() {
    assert!(matches!(single(&nested(10)), Item::Call(_)));
    assert!(matches!(single(&nested(MAX_JSON_DEPTH)), Item::Call(_)));
    let e = frame_error(&nested(MAX_JSON_DEPTH + 1));
    assert_eq!(e.code, codes::INVALID_REQUEST);
    assert!(e.message.contains("nesting too deep"));
    // Brackets inside strings (with escaped quotes) do not count.
    let s = format!(r#"\"{}"#, "[{".repeat(200));
    let text = request("gateway.ping", &format!(r#"{{"x":"{s}"}}"#));
    assert!(matches!(single(&text), Item::Call(_)), "{text}");
    // A batch adds a level.
    let batch = format!("[{}]", nested(MAX_JSON_DEPTH));
    assert_eq!(frame_error(&batch).code, codes::INVALID_REQUEST);
}

#[test]
fn very_deep_input_does_not_overflow() {
    let n = 100_000;
    let closed = format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert_eq!(frame_error(&closed).code, codes::INVALID_REQUEST);
    let open = "[".repeat(n);
    assert_eq!(frame_error(&open).code, codes::INVALID_REQUEST);
    let objects = format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    assert_eq!(frame_error(&objects).code, codes::INVALID_REQUEST);
    let in_params = request("session.create", &format!(r#"{{"engine":{closed}}}"#));
    assert_eq!(frame_error(&in_params).code, codes::INVALID_REQUEST);
}

#[test]
fn encode_frames() {
    assert_eq!(
        encode_result(&json!(1), &json!({"ok": true})),
        r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#
    );
    assert_eq!(
        encode_result(&json!("a"), &crate::methods::PingResult { ok: true }),
        r#"{"jsonrpc":"2.0","id":"a","result":{"ok":true}}"#
    );
    assert_eq!(
        encode_error(&Value::Null, &RpcError::new(-32700, "parse error")),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#
    );
    assert_eq!(
        encode_error(&json!(2), &RpcError::invalid_params("text", "missing")),
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid params: text: missing","data":{"field":"text"}}}"#
    );
    assert_eq!(encode_batch(&[]), "[]");
    assert_eq!(encode_batch(&["{\"a\":1}".into()]), r#"[{"a":1}]"#);
    assert_eq!(
        encode_batch(&["1".into(), "2".into(), "3".into()]),
        "[1,2,3]"
    );
    assert_eq!(
        encode_notification("event", &json!({"type":"x"})),
        r#"{"jsonrpc":"2.0","method":"event","params":{"type":"x"}}"#
    );
}

#[test]
fn encode_result_reports_unserializable_results() {
    use std::collections::BTreeMap;
    let mut bad: BTreeMap<Vec<u8>, u8> = BTreeMap::new();
    bad.insert(vec![1], 1);
    let s = encode_result(&json!(5), &bad);
    let r: ResponseFrame = serde_json::from_str(&s).unwrap();
    assert_eq!(r.id, json!(5));
    assert_eq!(r.error.map(|e| e.code), Some(codes::INTERNAL_ERROR));
}

#[test]
fn response_and_request_frames_round_trip() {
    let r: ResponseFrame =
        serde_json::from_str(&encode_result(&json!(3), &json!({"closed": true}))).unwrap();
    assert_eq!(
        r,
        ResponseFrame {
            jsonrpc: "2.0".into(),
            id: json!(3),
            result: Some(json!({"closed": true})),
            error: None,
        }
    );
    let err = RpcError::resume_too_large(3, 2);
    let r: ResponseFrame = serde_json::from_str(&encode_error(&json!("x"), &err)).unwrap();
    assert_eq!(r.error, Some(err));
    assert_eq!(r.result, None);
    assert_eq!(
        serde_json::from_str::<ResponseFrame>(&serde_json::to_string(&r).unwrap()).unwrap(),
        r
    );

    let f = RequestFrame::new(
        Some(json!(1)),
        "prompt.submit",
        SubmitParams {
            session_id: "s_1".into(),
            profile: None,
            text: "hi".into(),
            replaces: None,
            multitask: None,
            drop_queued: false,
            dedupe_key: None,
        },
    );
    let text = serde_json::to_string(&f).unwrap();
    assert_eq!(
        text,
        r#"{"jsonrpc":"2.0","id":1,"method":"prompt.submit","params":{"session_id":"s_1","text":"hi"}}"#
    );
    assert_eq!(
        serde_json::from_str::<RequestFrame<SubmitParams>>(&text).unwrap(),
        f
    );
    // What a client writes, the gateway parses.
    assert_eq!(
        call(&text),
        Call {
            id: Some(json!(1)),
            request: Request::Write(SessionWrite::PromptSubmit(f.params.clone()))
        }
    );
    let n = RequestFrame::new(None, "gateway.ping", json!({}));
    let text = serde_json::to_string(&n).unwrap();
    assert_eq!(
        text,
        r#"{"jsonrpc":"2.0","method":"gateway.ping","params":{}}"#
    );
    assert_eq!(call(&text).id, None);
}
