use super::*;
use crate::methods::MessageRole;
use serde_json::json;

/// Encodes as a line, checks the JSON, and parses the line back.
fn round_trip<T>(frame: &T, expected: Value)
where
    T: Serialize + HostLine + PartialEq + std::fmt::Debug,
{
    let line = encode_host_line(frame);
    assert!(line.ends_with('\n'));
    assert_eq!(line.matches('\n').count(), 1, "one line: {line:?}");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v, expected);
    let back: T = parse_host_line(&line).unwrap();
    assert_eq!(&back, frame);
}

fn history() -> Vec<Message> {
    vec![Message {
        seq: 2,
        role: MessageRole::User,
        text: "line one\nline two".into(),
        turn_id: None,
        ts: "x".into(),
        status: None,
        failure_reason: None,
        error: None,
    }]
}

#[test]
fn to_host_frames() {
    let mut config = Map::new();
    config.insert("model".into(), json!("m"));
    round_trip(
        &ToHost::TurnStart(TurnStart {
            turn_id: "t_1".into(),
            session_id: "s_1".into(),
            trace_id: "3f9c2a1b7d4e".into(),
            history_base: None,
            history: History::from_messages(&history()),
            prompt: "hi".into(),
            config,
        }),
        json!({"type":"turn.start","turn_id":"t_1","session_id":"s_1","trace_id":"3f9c2a1b7d4e",
               "history":[{"seq":2,"role":"user","text":"line one\nline two","ts":"x"}],
               "prompt":"hi","config":{"model":"m"}}),
    );
    round_trip(
        &ToHost::Interrupt {
            turn_id: "t_1".into(),
        },
        json!({"type":"interrupt","turn_id":"t_1"}),
    );
    round_trip(
        &ToHost::Control(ControlRequest {
            request_id: "r1".into(),
            op: "compress".into(),
            session_id: "s_1".into(),
            history: vec![],
            args: json!({"focus": null}),
        }),
        json!({"type":"control","request_id":"r1","op":"compress","session_id":"s_1",
               "history":[],"args":{"focus":null}}),
    );
    round_trip(
        &ToHost::HistoryDrop {
            session_id: "s_1".into(),
        },
        json!({"type":"history.drop","session_id":"s_1"}),
    );
    round_trip(&ToHost::Ping { nonce: 7 }, json!({"type":"ping","nonce":7}));
    round_trip(&ToHost::Shutdown, json!({"type":"shutdown"}));
    round_trip(
        &ToHost::Error {
            message: "bad line".into(),
        },
        json!({"type":"error","message":"bad line"}),
    );
}

#[test]
fn from_host_frames() {
    round_trip(
        &FromHost::Hello {
            protocol: 1,
            pid: 42,
            engine: "echo".into(),
            version: "0.1.0".into(),
            history_cache_bytes: None,
        },
        json!({"type":"hello","protocol":1,"pid":42,"engine":"echo","version":"0.1.0"}),
    );
    round_trip(
        &FromHost::Hello {
            protocol: 1,
            pid: 42,
            engine: "echo".into(),
            version: "0.1.0".into(),
            history_cache_bytes: Some(8 << 20),
        },
        json!({"type":"hello","protocol":1,"pid":42,"engine":"echo","version":"0.1.0",
               "history_cache_bytes":8_388_608}),
    );
    round_trip(
        &FromHost::Hb {
            active_turns: 1,
            rss_kb: 2048,
        },
        json!({"type":"hb","active_turns":1,"rss_kb":2048}),
    );
    round_trip(
        &FromHost::Event {
            turn_id: "t_1".into(),
            event: HostEvent {
                kind: "message.delta".into(),
                payload: json!({"text":"hi ","offset":0}).into(),
            },
        },
        json!({"type":"event","turn_id":"t_1",
               "event":{"type":"message.delta","payload":{"text":"hi ","offset":0}}}),
    );
    round_trip(
        &FromHost::TurnEnd {
            turn_id: "t_1".into(),
            status: TurnEndStatus::Complete,
            text: "hi".into(),
            usage: None,
        },
        json!({"type":"turn.end","turn_id":"t_1","status":"complete","text":"hi"}),
    );
    round_trip(
        &FromHost::TurnEnd {
            turn_id: "t_1".into(),
            status: TurnEndStatus::Complete,
            text: "hi".into(),
            usage: Some(json!({"prompt_tokens":3,"completion_tokens":1})),
        },
        json!({"type":"turn.end","turn_id":"t_1","status":"complete","text":"hi",
               "usage":{"prompt_tokens":3,"completion_tokens":1}}),
    );
    round_trip(
        &FromHost::TurnEnd {
            turn_id: "t_1".into(),
            status: TurnEndStatus::Interrupted,
            text: "".into(),
            usage: None,
        },
        json!({"type":"turn.end","turn_id":"t_1","status":"interrupted","text":""}),
    );
    round_trip(
        &FromHost::TurnError {
            turn_id: "t_1".into(),
            reason: "engine_error".into(),
            message: "boom".into(),
        },
        json!({"type":"turn.error","turn_id":"t_1","reason":"engine_error","message":"boom"}),
    );
    round_trip(
        &FromHost::ControlAck {
            request_id: "r1".into(),
            result: json!({"summary":"Summary of 2 messages.","removed":2}),
        },
        json!({"type":"control.ack","request_id":"r1",
               "result":{"summary":"Summary of 2 messages.","removed":2}}),
    );
    round_trip(
        &FromHost::ControlError {
            request_id: "r1".into(),
            message: "no".into(),
        },
        json!({"type":"control.error","request_id":"r1","message":"no"}),
    );
    round_trip(
        &FromHost::Pong { nonce: 7 },
        json!({"type":"pong","nonce":7}),
    );
    round_trip(&FromHost::ShutdownAck, json!({"type":"shutdown.ack"}));
    round_trip(
        &FromHost::Error {
            message: "what".into(),
        },
        json!({"type":"error","message":"what"}),
    );
}

#[test]
fn host_event_payload_defaults_to_null() {
    let f: FromHost =
        parse_host_line(r#"{"type":"event","turn_id":"t","event":{"type":"status.update"}}"#)
            .unwrap();
    assert_eq!(
        f,
        FromHost::Event {
            turn_id: "t".into(),
            event: HostEvent {
                kind: "status.update".into(),
                payload: Value::Null.into(),
            },
        }
    );
}

#[test]
fn parse_errors() {
    assert!(matches!(
        parse_host_line::<FromHost>("not json"),
        Err(HostFrameError::Json(_))
    ));
    assert!(matches!(
        parse_host_line::<FromHost>(""),
        Err(HostFrameError::Json(_))
    ));
    assert!(matches!(
        parse_host_line::<FromHost>(r#"{"no_type":1}"#),
        Err(HostFrameError::Json(_))
    ));
    assert!(matches!(
        parse_host_line::<FromHost>(r#"{"type":5}"#),
        Err(HostFrameError::Json(_))
    ));
    assert_eq!(
        parse_host_line::<FromHost>(r#"{"type":"telemetry","x":1}"#),
        Err(HostFrameError::UnknownType("telemetry".into()))
    );
    // A gateway-only type is unknown to the gateway's reader.
    assert_eq!(
        parse_host_line::<FromHost>(r#"{"type":"turn.start"}"#),
        Err(HostFrameError::UnknownType("turn.start".into()))
    );
    assert_eq!(
        parse_host_line::<ToHost>(r#"{"type":"hello","protocol":1}"#),
        Err(HostFrameError::UnknownType("hello".into()))
    );
    // A known type with bad fields is a JSON error, even when a nested
    // value is an unknown variant.
    assert!(matches!(
        parse_host_line::<FromHost>(r#"{"type":"hb","active_turns":"x","rss_kb":1}"#),
        Err(HostFrameError::Json(_))
    ));
    assert!(matches!(
        parse_host_line::<FromHost>(
            r#"{"type":"turn.end","turn_id":"t","status":"turn.end","text":""}"#
        ),
        Err(HostFrameError::Json(_))
    ));
    assert!(matches!(
        parse_host_line::<FromHost>(r#"{"type":"pong"}"#),
        Err(HostFrameError::Json(_))
    ));
    // CRLF and extra fields are tolerated.
    assert_eq!(
        parse_host_line::<FromHost>("{\"type\":\"pong\",\"nonce\":1,\"extra\":true}\r\n"),
        Ok(FromHost::Pong { nonce: 1 })
    );
    let e = HostFrameError::UnknownType("x".into());
    assert_eq!(e.to_string(), "unknown host frame type `x`");
}

#[test]
fn event_payload_keeps_the_hosts_text() {
    let line = r#"{"turn_id":"t_1","event":{"payload": {"b": [1, 2.50], "a":"x"},"type":"tool.start"},"type":"event"}"#;
    let FromHost::Event { turn_id, event } = parse_host_line::<FromHost>(line).unwrap() else {
        panic!("not an event frame");
    };
    assert_eq!(turn_id.as_str(), "t_1");
    assert_eq!(event.kind, "tool.start");
    assert_eq!(event.payload.get(), r#"{"b": [1, 2.50], "a":"x"}"#);
    assert!(event.payload.is_object());
    // A malformed event frame is still an error, with the tag known.
    assert!(matches!(
        parse_host_line::<FromHost>(r#"{"type":"event","event":{"type":"x"}}"#),
        Err(HostFrameError::Json(_))
    ));
    assert!(matches!(
        parse_host_line::<FromHost>(
            r#"{"type":"event","turn_id":"t","event":{"type":"x","payload":[1,}}"#
        ),
        Err(HostFrameError::Json(_))
    ));
}

/// The exact bytes of a `turn.start` line: the type tag first, then the
/// fields in the order PROTOCOL Part 2 lists them. Hosts that scan for the
/// tag without a full parse depend on it.
#[test]
fn turn_start_line_bytes() {
    let mut config = Map::new();
    config.insert("model".into(), json!("m"));
    let frame = ToHost::TurnStart(TurnStart {
        turn_id: "t_1".into(),
        session_id: "s_1".into(),
        trace_id: "3f9c2a1b7d4e".into(),
        history_base: None,
        history: History::from_messages(&history()),
        prompt: "hi \"quoted\"\n".into(),
        config,
    });
    // The spliced line the gateway writes and serde's are the same bytes.
    let line = frame.to_line();
    assert_eq!(line, encode_host_line(&frame));
    assert_eq!(
        line,
        concat!(
            r#"{"type":"turn.start","turn_id":"t_1","session_id":"s_1","trace_id":"3f9c2a1b7d4e","#,
            r#""history":[{"seq":2,"role":"user","text":"line one\nline two","ts":"x"}],"#,
            r#""prompt":"hi \"quoted\"\n","config":{"model":"m"}}"#,
            "\n"
        )
    );
}

/// To a host that keeps histories, a `turn.start` names how many messages
/// it holds, ahead of the rest: the same bytes serde writes for the frame
/// with that base and those messages, and what a host reads back.
#[test]
fn turn_start_line_after_a_base() {
    let turn = TurnStart {
        turn_id: "t_2".into(),
        session_id: "s_1".into(),
        trace_id: "3f9c2a1b7d4e".into(),
        history_base: None,
        history: History::empty(),
        prompt: "next".into(),
        config: Map::new(),
    };
    let items = r#"{"seq":2,"role":"user","text":"a","ts":"x"}"#;
    let line = turn.line_after(3, items).unwrap();
    let mut want = turn.clone();
    want.history_base = Some(3);
    want.history = History::from_raw(RawValue::from_string(format!("[{items}]")).unwrap()).unwrap();
    assert_eq!(line, encode_host_line(&ToHost::TurnStart(want.clone())));
    assert!(line.starts_with(
        r#"{"type":"turn.start","turn_id":"t_2","session_id":"s_1","trace_id":"3f9c2a1b7d4e","history_base":3,"history":["#
    ));
    assert_eq!(
        parse_host_line::<ToHost>(&line).unwrap(),
        ToHost::TurnStart(want)
    );
}

/// A history read from a line is spliced into a line again, so a line
/// break between its tokens (JSON whitespace) must not come back out as
/// one; an escaped one inside a string is text and stays.
#[test]
fn a_line_break_between_history_tokens_does_not_split_the_line_it_is_spliced_into() {
    let line = "{\"type\":\"turn.start\",\"turn_id\":\"t_1\",\"session_id\":\"s_1\",\
                \"trace_id\":\"3f9c2a1b7d4e\",\"history\":[{\"seq\":1,\"role\":\"user\",\
                \"text\"\n:\"a\\nb\",\"ts\":\"x\"}\r\n],\"prompt\":\"p\",\"config\":{}}";
    let frame = parse_host_line::<ToHost>(line).unwrap();
    let again = encode_host_line(&frame);
    assert_eq!(again.matches('\n').count(), 1, "{again:?}");
    assert!(again.ends_with('\n'));
    assert_eq!(parse_host_line::<ToHost>(&again).unwrap(), frame);
    let ToHost::TurnStart(turn) = frame else {
        panic!("not a turn.start: {frame:?}");
    };
    assert_eq!(turn.history.messages().unwrap()[0].text, "a\nb");
}

/// A host line nested deeper than a client frame may be is refused before
/// it is parsed (the gateway's reader); the host's reader has no such bound.
#[test]
fn host_lines_nested_past_64_levels_are_refused() {
    fn event(levels: usize) -> String {
        // The frame, its event, then a payload making up the depth.
        let inner = levels - 2;
        format!(
            r#"{{"type":"event","turn_id":"t","event":{{"type":"tool.start","payload":{}{}}}}}"#,
            "[".repeat(inner),
            "]".repeat(inner)
        )
    }
    assert!(matches!(
        parse_host_line::<FromHost>(&event(64)),
        Ok(FromHost::Event { .. })
    ));
    assert_eq!(
        parse_host_line::<FromHost>(&event(65)),
        Err(HostFrameError::TooDeep(64))
    );
    assert_eq!(
        parse_host_line::<FromHost>(&event(200_000)),
        Err(HostFrameError::TooDeep(64))
    );
    // Brackets inside strings are text.
    let line = format!(
        r#"{{"type":"turn.end","turn_id":"t","status":"complete","text":"{}"}}"#,
        "[".repeat(1000)
    );
    assert!(parse_host_line::<FromHost>(&line).is_ok());
    let control = format!(
        r#"{{"type":"control","request_id":"r","op":"compress","session_id":"s","history":[],"args":{}1{}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    assert!(parse_host_line::<ToHost>(&control).is_ok());
}

#[test]
fn gateway_status_kinds_and_foreign_types_are_forbidden_to_hosts() {
    let event = |kind: &str, payload: &str| HostEvent {
        kind: kind.into(),
        payload: RawPayload::from(
            serde_json::value::RawValue::from_string(payload.into()).unwrap(),
        ),
    };
    for kind in GATEWAY_STATUS_KINDS {
        let e = event(
            "status.update",
            &format!(r#"{{"kind":"{kind}","text":"x"}}"#),
        );
        assert!(e.forbidden().is_some(), "{kind}");
    }
    // An escaped spelling is the same kind.
    assert!(event("status.update", r#"{"kind":"compact\u0065d"}"#)
        .forbidden()
        .is_some());
    assert_eq!(
        event("status.update", r#"{"kind":"thinking"}"#).forbidden(),
        None
    );
    // A payload without a kind is the session's to judge.
    assert_eq!(event("status.update", "null").forbidden(), None);
    assert_eq!(
        event("tool.start", r#"{"kind":"queued"}"#).forbidden(),
        None
    );
    assert!(event("message.complete", "{}").forbidden().is_some());
}
