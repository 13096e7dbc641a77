//! Invariants of the client frame decoder (`parse_frame`) and of the
//! answers the gateway builds from its outcome.
//!
//! Besides "no panic", three oracles:
//! 1. shape: whole-frame errors are -32700/-32600, member errors are
//!    -32600/-32601/-32602, a -32602 names `data.field`, a -32600 is always
//!    answered, and anything JSON-valid is never a -32700;
//! 2. differential: when the frame also parses as a `serde_json::Value`, each
//!    member's outcome is recomputed through `Request::from_parts` (the
//!    value path) and must agree with the text path;
//! 3. round trip: a decoded call, written back out as a client would, decodes
//!    to the same call, and every answer is a well-formed response frame.

use serde_json::{Map, Value};
use tether_protocol::codes;
use tether_protocol::{
    encode_batch, encode_error, parse_frame, Call, Incoming, Item, Request, ResponseFrame, RpcError,
};

use crate::dup_keys::distinct_keys;
use crate::json_eq::same;

/// Every check, on one frame.
pub fn check(text: &str) {
    let incoming = parse_frame(text);
    let mut answers = Vec::new();
    match &incoming {
        Incoming::Invalid(e) => {
            assert!(
                e.code == codes::PARSE_ERROR || e.code == codes::INVALID_REQUEST,
                "whole-frame error {e:?}"
            );
            if e.code == codes::PARSE_ERROR {
                assert!(
                    serde_json::from_str::<serde::de::IgnoredAny>(text).is_err(),
                    "JSON reported as a parse error: {e:?}"
                );
            }
            answers.push(answer(&Value::Null, e));
        }
        Incoming::Single(item) => {
            check_item(item);
            answers.extend(item_answer(item));
        }
        Incoming::Batch(items) => {
            assert!(!items.is_empty(), "empty batch accepted");
            for item in items {
                check_item(item);
                answers.extend(item_answer(item));
            }
        }
    }
    if matches!(incoming, Incoming::Batch(_)) && !answers.is_empty() {
        let batch = encode_batch(&answers);
        match serde_json::from_str::<Vec<ResponseFrame>>(&batch) {
            Ok(frames) => assert_eq!(frames.len(), answers.len()),
            Err(e) => panic!("batch answer {batch:?} is not an array of responses: {e}"),
        }
    }
    differential(text, &incoming);
}

fn check_item(item: &Item) {
    match item {
        Item::Call(call) => {
            if let Some(id) = &call.id {
                assert!(valid_id(id), "id {id:?} accepted");
            }
            check_reencodes(call);
        }
        Item::Error { id, error } => {
            match error.code {
                codes::INVALID_REQUEST => assert!(id.is_some(), "-32600 left unanswered"),
                codes::METHOD_NOT_FOUND => {}
                codes::INVALID_PARAMS => {
                    assert!(
                        error.field().is_some(),
                        "-32602 without data.field: {error:?}"
                    )
                }
                other => panic!("member error code {other}: {error:?}"),
            }
            if let Some(id) = id {
                assert!(valid_id(id), "answered with id {id:?}");
            }
        }
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::Null | Value::String(_) | Value::Number(_))
}

/// The answer the gateway would send for `item`, checked to be a
/// well-formed response carrying exactly that error (calls are answered by
/// the actors; only their id matters here).
fn item_answer(item: &Item) -> Option<String> {
    match item {
        Item::Call(_) => None,
        Item::Error { id: None, .. } => None,
        Item::Error {
            id: Some(id),
            error,
        } => Some(answer(id, error)),
    }
}

fn answer(id: &Value, error: &RpcError) -> String {
    let text = encode_error(id, error);
    let frame: ResponseFrame = match serde_json::from_str(&text) {
        Ok(f) => f,
        Err(e) => panic!("answer {text:?} is not a response frame: {e}"),
    };
    assert!(same(&frame.id, id), "answer id {:?} for {id:?}", frame.id);
    assert_eq!(frame.error.as_ref(), Some(error), "answer {text:?}");
    assert!(frame.result.is_none());
    text
}

/// The params object a client would send for `req` (`None`: no params).
pub fn params_of(req: &Request) -> Option<Value> {
    match req.params() {
        Ok(v) => v,
        Err(e) => panic!("params of {req:?} do not serialize: {e}"),
    }
}

/// Equal up to float drift (see `json_eq`).
fn same_request(a: &Request, b: &Request) -> bool {
    if a == b {
        return true;
    }
    a.method() == b.method()
        && match (params_of(a), params_of(b)) {
            (Some(x), Some(y)) => same(&x, &y),
            (x, y) => x == y,
        }
}

/// A call written back out decodes to itself.
fn check_reencodes(call: &Call) {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    if let Some(id) = &call.id {
        m.insert("id".into(), id.clone());
    }
    m.insert("method".into(), Value::from(call.request.method()));
    if let Some(p) = params_of(&call.request) {
        m.insert("params".into(), p);
    }
    let text = Value::Object(m).to_string();
    match parse_frame(&text) {
        Incoming::Single(Item::Call(again)) => {
            let ids_same = match (&again.id, &call.id) {
                (Some(a), Some(b)) => same(a, b),
                (a, b) => a == b,
            };
            assert!(
                ids_same && same_request(&again.request, &call.request),
                "{call:?} re-encoded as {text} decodes as {again:?}"
            );
        }
        other => panic!("{call:?} re-encoded as {text} decodes as {other:?}"),
    }
}

/// The value path's verdict on one member, compared with the text path's.
fn differential(text: &str, incoming: &Incoming) {
    // Frames with numbers no `Value` holds (1e400) have no value path, and
    // frames with a repeated key have no single meaning to compare.
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    if !distinct_keys(text) {
        return;
    }
    match (incoming, &value) {
        (Incoming::Single(item), _) => compare_member(&value, item),
        (Incoming::Batch(items), Value::Array(members)) => {
            assert_eq!(items.len(), members.len(), "one item per batch member");
            for (member, item) in members.iter().zip(items) {
                compare_member(member, item);
            }
        }
        (Incoming::Batch(_), other) => panic!("a batch from a non-array {other}"),
        (Incoming::Invalid(e), Value::Array(a)) if a.is_empty() => {
            assert_eq!(e.code, codes::INVALID_REQUEST, "empty batch: {e:?}")
        }
        // Otherwise only nesting beyond the limit makes valid JSON invalid.
        (Incoming::Invalid(e), _) => assert!(
            e.code == codes::INVALID_REQUEST && e.message.contains("nesting too deep"),
            "valid JSON rejected as a whole: {e:?}"
        ),
    }
}

fn compare_member(member: &Value, item: &Item) {
    let invalid = |id: Value| (Some(id), Err((codes::INVALID_REQUEST, None)));
    let Some(obj) = member.as_object() else {
        return expect(item, invalid(Value::Null));
    };
    let id = match obj.get("id") {
        None => None,
        Some(id) if valid_id(id) => {
            // An integer beyond 64 bits reads as a float in a `Value`; the
            // text path rejects it, and the value path cannot tell it from
            // a float literal, so accept either verdict for float ids.
            if id.is_f64()
                && matches!(item, Item::Error { id: Some(Value::Null), error } if error.code == codes::INVALID_REQUEST)
            {
                return;
            }
            Some(id.clone())
        }
        Some(_) => return expect(item, invalid(Value::Null)),
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return expect(item, invalid(answer_id));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str) else {
        return expect(item, invalid(answer_id));
    };
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    let verdict = Request::from_parts(method, params).map_err(|e| (e.code, field(&e)));
    expect(item, (id, verdict));
}

fn field(e: &RpcError) -> Option<String> {
    e.field().map(str::to_owned)
}

type Verdict = (Option<Value>, Result<Request, (i64, Option<String>)>);

fn expect(item: &Item, (id, verdict): Verdict) {
    match (item, &verdict) {
        (Item::Call(call), Ok(req)) => {
            assert_eq!(call.id, id, "call id");
            assert!(
                same_request(&call.request, req),
                "text path {:?} vs value path {req:?}",
                call.request
            );
        }
        (Item::Error { id: got, error }, Err((code, want_field))) => {
            assert_eq!(got, &id, "answer id of {error:?}");
            assert_eq!(
                error.code, *code,
                "text path {error:?} vs value path {verdict:?}"
            );
            if *code == codes::INVALID_PARAMS {
                assert_eq!(field(error), *want_field, "field of {error:?}");
            }
        }
        _ => panic!("text path {item:?} vs value path {id:?} {verdict:?}"),
    }
}
