//! The seq rules every write obeys, whatever the dialect: a session's durable events are
//! numbered 1, 2, 3, ... with no gap and no reuse. Checked here, in plain Rust, so the fast and
//! slow write paths (and a later PostgreSQL writer) give the same answer with the same error.

use tether_protocol::SessionId;

use crate::{EventRow, StoreError};

/// Seqs within one op must be consecutive (n, n+1, ...).
pub(crate) fn check_contiguous(events: &[EventRow]) -> Result<(), StoreError> {
    for pair in events.windows(2) {
        if pair[0].seq.checked_add(1) != Some(pair[1].seq) {
            return Err(StoreError::Invalid(format!(
                "seqs not contiguous: {} then {}",
                pair[0].seq, pair[1].seq
            )));
        }
    }
    Ok(())
}

/// A new session's events are 1, 2, 3, ...
pub(crate) fn check_create(events: &[EventRow]) -> Result<(), StoreError> {
    check_contiguous(events)?;
    match events.first() {
        Some(first) if first.seq != 1 => Err(StoreError::Invalid(format!(
            "a new session's events start at seq 1, not {}",
            first.seq
        ))),
        _ => Ok(()),
    }
}

/// Whether `events` (non-empty) may be appended to a session whose latest seq is `latest`
/// (`None`: no such session). Reusing a seq is a `Conflict`, anything else wrong is `Invalid`.
pub(crate) fn check_append(
    session_id: &SessionId,
    latest: Option<u64>,
    events: &[EventRow],
) -> Result<(), StoreError> {
    let id = session_id.as_str();
    let Some(latest) = latest else {
        return Err(StoreError::Invalid(format!("no session {id}")));
    };
    check_contiguous(events)?;
    let Some(first) = events.first().map(|e| e.seq) else {
        return Ok(());
    };
    if first == 0 {
        Err(StoreError::Invalid("seqs start at 1".into()))
    } else if first <= latest {
        Err(StoreError::Conflict(format!(
            "seq {first} already used in session {id} (latest_seq {latest})"
        )))
    } else if first - 1 != latest {
        Err(StoreError::Invalid(format!(
            "seq {first} does not follow latest_seq {latest} of session {id}"
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64) -> EventRow {
        EventRow {
            seq,
            kind: "message.user".into(),
            payload: "{}".into(),
            turn_id: None,
            trace_id: None,
            ts_ms: 0,
        }
    }

    #[test]
    fn append_rules() {
        let id = SessionId::from("s_1".to_owned());
        let evs = |a: u64, b: u64| (a..=b).map(ev).collect::<Vec<_>>();
        assert_eq!(check_append(&id, Some(3), &evs(4, 6)), Ok(()));
        assert_eq!(check_append(&id, Some(0), &evs(1, 1)), Ok(()));
        assert_eq!(check_append(&id, Some(3), &[]), Ok(()));
        assert!(matches!(
            check_append(&id, None, &evs(1, 1)),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            check_append(&id, Some(3), &evs(3, 4)),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            check_append(&id, Some(3), &evs(1, 9)),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            check_append(&id, Some(3), &evs(5, 6)),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            check_append(&id, Some(0), &evs(0, 1)),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            check_append(&id, Some(3), &[ev(4), ev(6)]),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            check_append(&id, Some(3), &[ev(u64::MAX), ev(0)]),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn create_rules() {
        assert_eq!(check_create(&[]), Ok(()));
        assert_eq!(check_create(&[ev(1), ev(2)]), Ok(()));
        assert!(check_create(&[ev(2)]).is_err());
        assert!(check_create(&[ev(1), ev(3)]).is_err());
    }
}
