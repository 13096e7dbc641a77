use super::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// Serializes, compares with the contract's JSON, and reads it back.
fn round_trip<T>(v: &T, expected: Value)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(v).unwrap();
    let as_value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(as_value, expected);
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, v);
}

fn info() -> SessionInfo {
    SessionInfo {
        session_id: "s_1".into(),
        profile: "default".into(),
        title: "t".into(),
        status: SessionStatus::Idle,
        created_at: "2026-11-30T03:00:00.000Z".into(),
        updated_at: "2026-11-30T03:00:01.000Z".into(),
        parent_session_id: None,
        history_version: 0,
        message_count: 2,
        latest_seq: 5,
        peers: 1,
        close_on_disconnect: false,
        attached: None,
        owner_node: None,
    }
}

fn info_json() -> Value {
    json!({"session_id":"s_1","profile":"default","title":"t","status":"idle",
           "created_at":"2026-11-30T03:00:00.000Z","updated_at":"2026-11-30T03:00:01.000Z",
           "parent_session_id":null,"history_version":0,"message_count":2,"latest_seq":5,
           "peers":1,"close_on_disconnect":false})
}

fn raw(s: &str) -> std::sync::Arc<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap().into()
}

#[test]
fn status_and_role_strings() {
    assert_eq!(SessionStatus::ALL.len(), 4);
    for s in SessionStatus::ALL {
        assert_eq!(SessionStatus::parse(s.as_str()), Some(*s));
        assert_eq!(s.as_str().parse::<SessionStatus>(), Ok(*s));
        assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
    }
    assert_eq!(SessionStatus::Parked.as_str(), "parked");
    assert_eq!(SessionStatus::parse("Idle"), None);
    let e = "open".parse::<SessionStatus>().unwrap_err();
    assert_eq!(e.to_string(), "unknown SessionStatus `open`");
    for r in MessageRole::ALL {
        assert_eq!(MessageRole::parse(r.as_str()), Some(*r));
    }
    assert_eq!(
        MessageRole::ALL
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>(),
        ["user", "assistant", "tool", "system"]
    );
}

#[test]
fn session_info_round_trip() {
    round_trip(&info(), info_json());
    let mut branched = info();
    branched.parent_session_id = Some("s_0".into());
    branched.status = SessionStatus::Closed;
    let mut j = info_json();
    j["parent_session_id"] = json!("s_0");
    j["status"] = json!("closed");
    round_trip(&branched, j);
    // Who is attached, where the session answers for itself.
    let mut live = info();
    live.attached = Some(vec![AttachedPeer {
        peer_id: "p_1".into(),
        transport: PeerTransport::Sse,
    }]);
    let mut j = info_json();
    j["attached"] = json!([{"peer_id":"p_1","transport":"sse"}]);
    round_trip(&live, j);
}

#[test]
fn message_round_trip() {
    round_trip(
        &Message {
            seq: 2,
            role: MessageRole::User,
            text: "hi".into(),
            turn_id: Some("t_1".into()),
            ts: "2026-11-30T03:00:00.123Z".into(),
            status: None,
            failure_reason: None,
            error: None,
        },
        json!({"seq":2,"role":"user","text":"hi","turn_id":"t_1","ts":"2026-11-30T03:00:00.123Z"}),
    );
    // turn_id is omitted, not null, when absent.
    round_trip(
        &Message {
            seq: 3,
            role: MessageRole::System,
            text: "sum".into(),
            turn_id: None,
            ts: "x".into(),
            status: None,
            failure_reason: None,
            error: None,
        },
        json!({"seq":3,"role":"system","text":"sum","ts":"x"}),
    );
    // An assistant message whose turn did not complete says how it ended.
    round_trip(
        &Message {
            seq: 5,
            role: MessageRole::Assistant,
            text: "cut".into(),
            turn_id: Some("t_2".into()),
            ts: "x".into(),
            status: Some(CompleteStatus::Error),
            failure_reason: Some("engine_error".into()),
            error: Some("boom".into()),
        },
        json!({"seq":5,"role":"assistant","text":"cut","turn_id":"t_2","ts":"x",
               "status":"error","failure_reason":"engine_error","error":"boom"}),
    );
}

#[test]
fn create_branch_result_round_trip() {
    round_trip(
        &CreateResult {
            session: info(),
            epoch: "a1b2c3d4e5f60718".into(),
        },
        json!({"session": info_json(), "epoch": "a1b2c3d4e5f60718"}),
    );
    round_trip(
        &BranchResult { session: info() },
        json!({ "session": info_json() }),
    );
}

#[test]
fn resume_result_full() {
    let r = ResumeResult {
        session: info(),
        epoch: "e".into(),
        latest_seq: 41,
        messages: Some(vec![Message {
            seq: 2,
            role: MessageRole::Tool,
            text: "{}".into(),
            turn_id: Some("t_1".into()),
            ts: "x".into(),
            status: None,
            failure_reason: None,
            error: None,
        }]),
        active_turn: Some(ActiveTurn {
            turn_id: "t_2".into(),
            trace_id: "3f9c2a1b7d4e".into(),
            text: "so far".into(),
            started_at: "y".into(),
            user_seq: Some(3),
        }),
        todos: Some(Todos {
            items: vec![TodoItem {
                id: "1".into(),
                text: "a".into(),
                status: "pending".into(),
            }],
            revision: 3,
        }),
        events: Some(vec![
            raw(r#"{"type":"message.user","seq":40}"#),
            raw(r#"{"type":"message.start","seq":41}"#),
        ]),
        truncated: Some(false),
        resync: Some(false),
    };
    round_trip(
        &r,
        json!({"session": info_json(), "epoch":"e", "latest_seq":41,
               "messages":[{"seq":2,"role":"tool","text":"{}","turn_id":"t_1","ts":"x"}],
               "active_turn":{"turn_id":"t_2","trace_id":"3f9c2a1b7d4e","text":"so far","started_at":"y","user_seq":3},
               "todos":{"items":[{"id":"1","text":"a","status":"pending"}],"revision":3},
               "events":[{"type":"message.user","seq":40},{"type":"message.start","seq":41}],
               "truncated":false,"resync":false}),
    );
    // Events are spliced verbatim, not re-serialized.
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.contains(r#""events":[{"type":"message.user","seq":40},"#));
    // Equality sees event differences.
    let mut other = r.clone();
    other.events = Some(vec![raw(r#"{"type":"message.user","seq":40}"#)]);
    assert_ne!(other, r);
}

#[test]
fn resume_result_minimal_omits_fields() {
    let r = ResumeResult {
        session: info(),
        epoch: "e".into(),
        latest_seq: 5,
        messages: None,
        active_turn: None,
        todos: None,
        events: None,
        truncated: None,
        resync: None,
    };
    round_trip(
        &r,
        json!({"session": info_json(), "epoch":"e", "latest_seq":5,
               "active_turn":null, "todos":null}),
    );
    let resync = ResumeResult {
        events: Some(vec![]),
        truncated: Some(false),
        resync: Some(true),
        messages: Some(vec![]),
        ..r
    };
    round_trip(
        &resync,
        json!({"session": info_json(), "epoch":"e", "latest_seq":5, "messages":[],
               "active_turn":null, "todos":null, "events":[], "truncated":false, "resync":true}),
    );
}

#[test]
fn small_results_round_trip() {
    round_trip(
        &DetachResult { detached: false },
        json!({"detached": false}),
    );
    round_trip(&CloseResult { closed: true }, json!({"closed": true}));
    round_trip(
        &ListResult {
            sessions: vec![info()],
            next_cursor: None,
        },
        json!({"sessions":[info_json()],"next_cursor":null}),
    );
    round_trip(
        &ListResult {
            sessions: vec![],
            next_cursor: Some("c2".into()),
        },
        json!({"sessions":[],"next_cursor":"c2"}),
    );
    round_trip(
        &SubmitResult {
            status: SubmitStatus::Started,
            turn_id: "t_1".into(),
            trace_id: "3f9c2a1b7d4e".into(),
            duplicate: false,
        },
        json!({"status":"started","turn_id":"t_1","trace_id":"3f9c2a1b7d4e"}),
    );
    round_trip(
        &SubmitResult {
            status: SubmitStatus::Queued,
            turn_id: "t_2".into(),
            trace_id: "000000000000".into(),
            duplicate: false,
        },
        json!({"status":"queued","turn_id":"t_2","trace_id":"000000000000"}),
    );
    round_trip(
        &SubmitResult {
            status: SubmitStatus::Queued,
            turn_id: "t_2".into(),
            trace_id: "000000000000".into(),
            duplicate: true,
        },
        json!({"status":"queued","turn_id":"t_2","trace_id":"000000000000","duplicate":true}),
    );
    round_trip(
        &InterruptResult {
            status: InterruptStatus::Interrupted,
        },
        json!({"status":"interrupted"}),
    );
    round_trip(
        &InterruptResult {
            status: InterruptStatus::Idle,
        },
        json!({"status":"idle"}),
    );
    round_trip(
        &Todos {
            items: vec![],
            revision: 0,
        },
        json!({"items":[],"revision":0}),
    );
}

#[test]
fn compress_result_is_tagged_by_status() {
    round_trip(
        &CompressResult::Compressed {
            history_version: 2,
            removed: 10,
        },
        json!({"status":"compressed","history_version":2,"removed":10}),
    );
    round_trip(
        &CompressResult::Pending {
            request_id: "r1".into(),
        },
        json!({"status":"pending","request_id":"r1"}),
    );
    assert!(serde_json::from_value::<CompressResult>(json!({"status":"done"})).is_err());
}

#[test]
fn since_result_round_trip() {
    let r = SinceResult {
        events: vec![raw(
            r#"{"type":"message.user","session_id":"s_1","seq":3,"ts":"x","payload":{"text":"hi"}}"#,
        )],
        latest_seq: 3,
        truncated: false,
        has_more: true,
        epoch: "e".into(),
    };
    round_trip(
        &r,
        json!({"events":[{"type":"message.user","session_id":"s_1","seq":3,"ts":"x","payload":{"text":"hi"}}],
               "latest_seq":3,"truncated":false,"has_more":true,"epoch":"e"}),
    );
    let mut other = r.clone();
    other.has_more = false;
    assert_ne!(other, r);
}
