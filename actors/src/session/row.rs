//! The session's row in the store, as far as a live session changes it.
//!
//! Each append carries a patch of the row, committed with its events. The
//! patch is derived from what changed since the last one was sent: every
//! field the session holds is compared (an exhaustive destructuring, so a
//! new field cannot be left out), and the store's `SessionPatch` is built
//! without `..Default`, so a new row field in the store cannot be
//! forgotten here either. When a sent patch may not have reached the disk
//! (its append failed, was not taken, or was at a writer that died), what
//! was written is forgotten and the next patch carries every field.

use serde_json::Value;
use tether_protocol::SessionStatus;
use tether_store::SessionPatch;

use super::SessionState;

/// The row's fields as the session holds them now.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowNow<'a> {
    pub status: SessionStatus,
    pub title: &'a str,
    pub message_count: u64,
    pub history_version: u64,
    pub updated_at_ms: i64,
}

/// The row's fields as the last patch sent left them; `None` when that is
/// not known, and at start (the first patch writes every field).
#[derive(Debug, Default)]
pub(super) struct Written(Option<Fields>);

#[derive(Debug, PartialEq)]
struct Fields {
    status: SessionStatus,
    title: String,
    message_count: u64,
    history_version: u64,
    updated_at_ms: i64,
}

impl Written {
    /// The patch that brings the row from what was written to `now`, with
    /// `turn_marker` (`Some` when it changed); `now` counts as written.
    pub fn patch(&mut self, now: RowNow<'_>, turn_marker: Option<Option<Value>>) -> SessionPatch {
        let RowNow {
            status,
            title,
            message_count,
            history_version,
            updated_at_ms,
        } = now;
        let was = self.0.as_ref();
        let patch = SessionPatch {
            status: changed(was.map(|w| w.status), status),
            title: (was.map(|w| w.title.as_str()) != Some(title)).then(|| title.to_owned()),
            message_count: changed(was.map(|w| w.message_count), message_count),
            history_version: changed(was.map(|w| w.history_version), history_version),
            turn_marker,
            updated_at_ms: changed(was.map(|w| w.updated_at_ms), updated_at_ms),
        };
        let title = match (self.0.take(), &patch.title) {
            (Some(w), None) => w.title,
            _ => title.to_owned(),
        };
        self.0 = Some(Fields {
            status,
            title,
            message_count,
            history_version,
            updated_at_ms,
        });
        patch
    }

    /// The last patch sent may not be on disk: the next one writes all.
    pub fn forget(&mut self) {
        self.0 = None;
    }
}

fn changed<V: PartialEq>(was: Option<V>, now: V) -> Option<V> {
    (was.as_ref() != Some(&now)).then_some(now)
}

impl SessionState {
    /// The patch that goes with the next append (`turn_marker`: `Some`
    /// when the marker changed).
    pub(super) fn row_patch(&mut self, turn_marker: Option<Option<Value>>) -> SessionPatch {
        let now = RowNow {
            status: self.status,
            title: &self.title,
            message_count: self.commit.message_count(),
            history_version: self.history_version,
            updated_at_ms: self.updated_at_ms,
        };
        self.row_written.patch(now, turn_marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(title: &str, message_count: u64, updated_at_ms: i64) -> RowNow<'_> {
        RowNow {
            status: SessionStatus::Idle,
            title,
            message_count,
            history_version: 1,
            updated_at_ms,
        }
    }

    #[test]
    fn the_first_patch_writes_every_field() {
        let mut w = Written::default();
        let patch = w.patch(now("t", 2, 10), None);
        assert_eq!(
            patch,
            SessionPatch {
                status: Some(SessionStatus::Idle),
                title: Some("t".into()),
                message_count: Some(2),
                history_version: Some(1),
                turn_marker: None,
                updated_at_ms: Some(10),
            }
        );
    }

    #[test]
    fn a_patch_carries_what_changed_since_the_last_one() {
        let mut w = Written::default();
        let _ = w.patch(now("t", 2, 10), None);
        let patch = w.patch(now("t", 3, 11), Some(None));
        assert_eq!(
            patch,
            SessionPatch {
                message_count: Some(3),
                updated_at_ms: Some(11),
                turn_marker: Some(None),
                ..SessionPatch::default()
            }
        );
        let patch = w.patch(now("renamed", 3, 11), None);
        assert_eq!(patch.title.as_deref(), Some("renamed"), "title included");
        assert!(w.patch(now("renamed", 3, 11), None).is_empty());
    }

    #[test]
    fn after_forget_the_next_patch_writes_every_field_again() {
        let mut w = Written::default();
        let first = w.patch(now("t", 2, 10), None);
        w.forget();
        assert_eq!(w.patch(now("t", 2, 10), None), first);
    }
}
