use super::*;
use serde_json::json;

#[test]
fn field_name_from_path_and_message() {
    assert_eq!(field_name(".", "missing field `text`"), "text");
    assert_eq!(field_name("", "missing field `text`"), "text");
    assert_eq!(
        field_name("messages[0]", "missing field `text`"),
        "messages[0].text"
    );
    assert_eq!(
        field_name("messages[1].role", "unknown variant `bot`"),
        "messages[1].role"
    );
    assert_eq!(field_name(".", "invalid type: sequence"), "params");
}

#[test]
fn position_is_stripped_from_messages() {
    let e = serde_json::from_str::<u64>("-1").unwrap_err();
    assert!(e.to_string().contains(" at line 1 column"));
    let m = without_position(&e);
    assert!(!m.contains(" at line"), "{m}");
    let e = serde_json::from_value::<u64>(json!("x")).unwrap_err();
    assert_eq!(without_position(&e), e.to_string());
}

#[test]
fn params_are_what_a_client_sends() {
    let r = Request::from_parts("prompt.submit", json!({"session_id":"s_1","text":"x"})).unwrap();
    assert_eq!(r.method(), "prompt.submit");
    assert_eq!(
        r.params().unwrap(),
        Some(json!({"session_id":"s_1","text":"x"}))
    );
    // Methods without params send none, whatever object came in.
    let r = Request::from_parts("gateway.ping", json!({"x": 1})).unwrap();
    assert_eq!(r, Request::Ping);
    assert_eq!(r.params().unwrap(), None);
    assert_eq!(Request::EventsStats.method(), "session.events.stats");
    assert_eq!(Request::EventsStats.params().unwrap(), None);
}

#[test]
fn known_methods() {
    assert!(is_known_method("gateway.ping"));
    assert!(is_known_method("handoff.state"));
    assert!(!is_known_method("Gateway.Ping"));
    assert!(!is_known_method("event"));
    assert!(!is_known_method(""));
}

#[test]
fn null_optional_fields_mean_absent() {
    let r = Request::from_parts(
        "session.resume",
        json!({"session_id":"s","profile":null,"last_seen":null,"omit_messages":null,"attach":null}),
    )
    .unwrap();
    assert_eq!(
        r,
        Request::SessionResume(ResumeParams {
            session_id: "s".into(),
            profile: None,
            last_seen: None,
            omit_messages: false,
            attach: true,
            delivery: None,
        })
    );
    let r = Request::from_parts(
        "session.events.since",
        json!({"session_id":"s","last_seen":3,"limit":null}),
    )
    .unwrap();
    assert!(matches!(r, Request::EventsSince(p) if p.limit == 1000));
}
