use super::*;
use serde::de::DeserializeOwned;
use serde_json::json;

fn round_trip<T>(v: &T, expected: Value)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(v).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), expected);
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, v);
}

#[test]
fn event_type_names_and_durability() {
    let table = [
        ("session.created", true),
        ("message.user", true),
        ("message.system", true),
        ("message.start", true),
        ("message.delta", false),
        ("reasoning.delta", false),
        ("tool.start", true),
        ("tool.complete", true),
        ("todo.updated", true),
        ("message.complete", true),
        ("status.update", true),
        ("session.compacted", true),
        ("session.info", true),
        ("session.closed", true),
        ("error", true),
        ("session.reclaimed", false),
        ("session.deleted", false),
        ("gateway.ready", false),
        ("presence.joined", false),
        ("presence.left", false),
    ];
    assert_eq!(EventType::ALL.len(), table.len());
    for (name, durable) in table {
        let t = EventType::parse(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(t.as_str(), name);
        assert_eq!(t.is_durable(), durable, "{name}");
        assert_eq!(serde_json::to_value(t).unwrap(), json!(name));
        assert_eq!(serde_json::from_value::<EventType>(json!(name)).unwrap(), t);
    }
    assert_eq!(EventType::parse("message"), None);
    assert!(serde_json::from_value::<EventType>(json!("message.Delta")).is_err());
}

#[test]
fn the_transcript_types() {
    let mut transcript: Vec<&str> = EventType::ALL
        .iter()
        .filter(|t| t.is_transcript())
        .map(EventType::as_str)
        .collect();
    transcript.sort_unstable();
    assert_eq!(
        transcript,
        [
            "message.complete",
            "message.system",
            "message.user",
            "session.compacted",
            "tool.complete",
        ]
    );
    // Every transcript event is durable: a resume rebuilds messages from the store.
    assert!(EventType::ALL
        .iter()
        .filter(|t| t.is_transcript())
        .all(EventType::is_durable));
}

#[test]
fn payloads_round_trip() {
    round_trip(
        &SessionCreatedPayload {
            title: "t".into(),
            profile: "default".into(),
            parent_session_id: None,
        },
        json!({"title":"t","profile":"default","parent_session_id":null}),
    );
    round_trip(
        &SessionCreatedPayload {
            title: "".into(),
            profile: "p".into(),
            parent_session_id: Some("s_0".into()),
        },
        json!({"title":"","profile":"p","parent_session_id":"s_0"}),
    );
    round_trip(&TextPayload { text: "hi".into() }, json!({"text":"hi"}));
    round_trip(&EmptyPayload {}, json!({}));
    round_trip(
        &DeltaPayload {
            text: "é".into(),
            offset: 12,
        },
        json!({"text":"é","offset":12}),
    );
    round_trip(
        &ToolStartPayload {
            tool_id: "1".into(),
            name: "grep".into(),
            args: json!({"q":"x"}),
        },
        json!({"tool_id":"1","name":"grep","args":{"q":"x"}}),
    );
    round_trip(
        &ToolCompletePayload {
            tool_id: "1".into(),
            name: "grep".into(),
            result: json!([1, 2]),
            is_error: false,
        },
        json!({"tool_id":"1","name":"grep","result":[1,2],"is_error":false}),
    );
    round_trip(
        &crate::Todos {
            items: vec![crate::TodoItem {
                id: "a".into(),
                text: "A".into(),
                status: "pending".into(),
            }],
            revision: 4,
        },
        json!({"items":[{"id":"a","text":"A","status":"pending"}],"revision":4}),
    );
    round_trip(
        &StatusUpdatePayload {
            kind: "queued".into(),
            text: None,
        },
        json!({"kind":"queued"}),
    );
    round_trip(
        &StatusUpdatePayload {
            kind: "ready".into(),
            text: Some("ok".into()),
        },
        json!({"kind":"ready","text":"ok"}),
    );
    round_trip(
        &SessionCompactedPayload {
            history_version: 1,
            summary: "Summary of 4 messages.".into(),
            removed: 4,
        },
        json!({"history_version":1,"summary":"Summary of 4 messages.","removed":4}),
    );
    round_trip(
        &SessionClosedPayload {
            reason: "disconnect".into(),
        },
        json!({"reason":"disconnect"}),
    );
    round_trip(
        &ErrorPayload {
            message: "m".into(),
            code: None,
        },
        json!({"message":"m"}),
    );
    round_trip(
        &ErrorPayload {
            message: "m".into(),
            code: Some(5071),
        },
        json!({"message":"m","code":5071}),
    );
    round_trip(
        &ReclaimedPayload {
            reason: "ttl".into(),
        },
        json!({"reason":"ttl"}),
    );
}

#[test]
fn message_complete_payload() {
    round_trip(
        &MessageCompletePayload {
            text: "hi".into(),
            status: CompleteStatus::Complete,
            failure_reason: None,
            recoverable: None,
            usage: None,
        },
        json!({"text":"hi","status":"complete"}),
    );
    round_trip(
        &MessageCompletePayload {
            text: "".into(),
            status: CompleteStatus::Error,
            failure_reason: Some("host_crash".into()),
            recoverable: Some(true),
            usage: None,
        },
        json!({"text":"","status":"error","failure_reason":"host_crash","recoverable":true}),
    );
    round_trip(
        &MessageCompletePayload {
            text: "".into(),
            status: CompleteStatus::Interrupted,
            failure_reason: Some("dequeued".into()),
            recoverable: None,
            usage: None,
        },
        json!({"text":"","status":"interrupted","failure_reason":"dequeued"}),
    );
    round_trip(
        &MessageCompletePayload {
            text: "hi".into(),
            status: CompleteStatus::Complete,
            failure_reason: None,
            recoverable: None,
            usage: Some(json!({"total_tokens":7})),
        },
        json!({"text":"hi","status":"complete","usage":{"total_tokens":7}}),
    );
    assert_eq!(
        CompleteStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
        ["complete", "error", "interrupted"]
    );
}

#[test]
fn gateway_ready_payload_matches_contract_example() {
    let p = GatewayReadyPayload {
        server: "tether".into(),
        version: "0.1.0".into(),
        protocol: 1,
        epoch: "a1b2c3d4e5f60718".into(),
        peer_id: "p_01J".into(),
        profile: "default".into(),
        heartbeat_s: 15,
        limits: Limits {
            max_frame_bytes: 1_048_576,
        },
    };
    round_trip(
        &p,
        json!({"server":"tether","version":"0.1.0","protocol":1,
               "epoch":"a1b2c3d4e5f60718","peer_id":"p_01J","profile":"default",
               "heartbeat_s":15,"limits":{"max_frame_bytes":1048576}}),
    );
}

#[test]
fn event_params_field_order_and_omissions() {
    let sid = SessionId::from("s_01J");
    let tid = TurnId::from("t_01J");
    let trace = TraceId::from("3f9c2a1b7d4e");
    let payload = to_raw(&MessageCompletePayload {
        text: "done".into(),
        status: CompleteStatus::Complete,
        failure_reason: None,
        recoverable: None,
        usage: None,
    });
    let params = encode_event_params(&EventParams {
        kind: EventType::MessageComplete,
        session_id: Some(&sid),
        seq: Some(7),
        turn_id: Some(&tid),
        trace_id: Some(&trace),
        ts: "2026-11-30T03:00:00.123Z",
        payload: &payload,
    });
    assert_eq!(
        params.get(),
        r#"{"type":"message.complete","session_id":"s_01J","seq":7,"turn_id":"t_01J","trace_id":"3f9c2a1b7d4e","ts":"2026-11-30T03:00:00.123Z","payload":{"text":"done","status":"complete"}}"#
    );

    let ready = to_raw(&EmptyPayload {});
    let params = encode_event_params(&EventParams {
        kind: EventType::GatewayReady,
        session_id: None,
        seq: None,
        turn_id: None,
        trace_id: None,
        ts: "x",
        payload: &ready,
    });
    assert_eq!(
        params.get(),
        r#"{"type":"gateway.ready","ts":"x","payload":{}}"#
    );
}

#[test]
fn event_frame_shape() {
    let sid = SessionId::from("s_1");
    let payload = to_raw(&DeltaPayload {
        text: "a\"b".into(),
        offset: 3,
    });
    let params = encode_event_params(&EventParams {
        kind: EventType::MessageDelta,
        session_id: Some(&sid),
        seq: None,
        turn_id: None,
        trace_id: None,
        ts: "t",
        payload: &payload,
    });
    let frame = encode_event_frame(&params);
    assert_eq!(
        frame,
        r#"{"jsonrpc":"2.0","method":"event","params":{"type":"message.delta","session_id":"s_1","ts":"t","payload":{"text":"a\"b","offset":3}}}"#
    );
    // A client reads it back with the owned types.
    let v: crate::envelope::RequestFrame<EventFrameParams> = serde_json::from_str(&frame).unwrap();
    assert_eq!(v.method, "event");
    assert_eq!(v.id, None);
    assert_eq!(
        v.params,
        EventFrameParams {
            kind: "message.delta".into(),
            session_id: Some(sid),
            seq: None,
            turn_id: None,
            trace_id: None,
            ts: "t".into(),
            payload: json!({"text":"a\"b","offset":3}),
        }
    );
    assert_eq!(v.params.event_type(), Some(EventType::MessageDelta));
}

#[test]
fn event_frame_params_round_trip() {
    let p = EventFrameParams {
        kind: "message.user".into(),
        session_id: Some("s_1".into()),
        seq: Some(2),
        turn_id: Some("t_1".into()),
        trace_id: Some("3f9c2a1b7d4e".into()),
        ts: "x".into(),
        payload: json!({"text":"hi"}),
    };
    round_trip(
        &p,
        json!({"type":"message.user","session_id":"s_1","seq":2,"turn_id":"t_1",
               "trace_id":"3f9c2a1b7d4e","ts":"x","payload":{"text":"hi"}}),
    );
    let unknown: EventFrameParams =
        serde_json::from_value(json!({"type":"future.thing","ts":"x","payload":{}})).unwrap();
    assert_eq!(unknown.event_type(), None);
    assert_eq!(unknown.seq, None);
}

#[test]
fn to_raw_and_try_to_raw() {
    assert_eq!(to_raw(&json!({"a":1})).get(), r#"{"a":1}"#);
    let mut bad = std::collections::BTreeMap::new();
    bad.insert(vec![1u8], 1);
    assert!(try_to_raw(&bad).is_err());
    assert_eq!(empty_object().get(), "{}");
}
