//! The credentials in a host's error texts, masked at the edge: whatever
//! host wrote them, they become `error` events and `message.complete`s
//! clients read, compression answers and log lines.

use tether_protocol::{mask_urls, FromHost};

/// `frame` with the credentials of any URL in its error texts masked: a
/// host's errors become `error` events, compression answers and log lines.
pub(super) fn masked(frame: FromHost) -> FromHost {
    match frame {
        FromHost::TurnError {
            turn_id,
            reason,
            message,
        } => FromHost::TurnError {
            turn_id,
            reason: mask_urls(&reason),
            message: mask_urls(&message),
        },
        FromHost::ControlError {
            request_id,
            message,
        } => FromHost::ControlError {
            request_id,
            message: mask_urls(&message),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_lose_their_credentials_and_other_frames_pass() {
        let e = masked(FromHost::TurnError {
            turn_id: "t".into(),
            reason: "engine_error".into(),
            message: "cannot reach https://u:pw@h/v1?key=k".into(),
        });
        assert_eq!(
            e,
            FromHost::TurnError {
                turn_id: "t".into(),
                reason: "engine_error".into(),
                message: "cannot reach https://u:***@h/v1?key=***".into(),
            }
        );
        let e = masked(FromHost::ControlError {
            request_id: "r".into(),
            message: "http://t0ken@h".into(),
        });
        assert_eq!(
            e,
            FromHost::ControlError {
                request_id: "r".into(),
                message: "http://***@h".into(),
            }
        );
        let end = FromHost::TurnEnd {
            turn_id: "t".into(),
            status: tether_protocol::TurnEndStatus::Complete,
            text: "see http://u:pw@h".into(),
            usage: None,
        };
        assert_eq!(masked(end.clone()), end);
    }
}
