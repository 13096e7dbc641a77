//! Invariants of the compute-host line decoder (`parse_host_line`).

use serde::Serialize;
use tether_protocol::{
    encode_host_line, parse_host_line, FromHost, HostFrameError, HostLine, ToHost,
};

use crate::json_eq::same;

/// Types a gateway reads from a host.
pub const FROM_HOST_TYPES: &[&str] = &[
    "hello",
    "hb",
    "event",
    "turn.end",
    "turn.error",
    "control.ack",
    "control.error",
    "pong",
    "shutdown.ack",
    "error",
];

/// Types a host reads from the gateway.
pub const TO_HOST_TYPES: &[&str] = &[
    "turn.start",
    "interrupt",
    "control",
    "ping",
    "shutdown",
    "error",
];

/// One line as both sides' readers see it.
pub fn check_line(line: &str) {
    check_as::<FromHost>(line, FROM_HOST_TYPES);
    check_as::<ToHost>(line, TO_HOST_TYPES);
}

/// Decodes `line` as `T`: a decoded frame re-encodes as one line that
/// decodes to the same frame; an unknown type is really not one of
/// `known`; a rejection's `error` reply is itself a well-formed frame.
fn check_as<T>(line: &str, known: &[&str])
where
    T: Serialize + HostLine + std::fmt::Debug,
{
    match parse_host_line::<T>(line) {
        Ok(frame) => {
            let again = encode_host_line(&frame);
            assert!(again.ends_with('\n'), "{again:?}");
            assert_eq!(again.matches('\n').count(), 1, "not one line: {again:?}");
            let back: T = match parse_host_line(&again) {
                Ok(back) => back,
                Err(e) => panic!("re-encoded {frame:?} as {again:?}, which fails: {e}"),
            };
            let (a, b) = (to_value(&frame), to_value(&back));
            assert!(same(&a, &b), "{line:?} → {a} → {b}");
        }
        Err(e) => {
            if let HostFrameError::UnknownType(t) = &e {
                assert!(
                    !known.contains(&t.as_str()),
                    "known `{t}` unknown: {line:?}"
                );
            }
            // Either side answers a bad line with this frame.
            let message = e.to_string();
            let reply = encode_host_line(&ToHost::Error {
                message: message.clone(),
            });
            assert_eq!(
                parse_host_line::<FromHost>(&reply),
                Ok(FromHost::Error { message }),
                "the error reply to {line:?} is not a frame"
            );
        }
    }
}

fn to_value<T: Serialize>(frame: &T) -> serde_json::Value {
    match serde_json::to_value(frame) {
        Ok(v) => v,
        Err(e) => panic!("a decoded frame does not serialize: {e}"),
    }
}
