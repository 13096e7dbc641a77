//! `SessionInfo` for a session that is not (or not yet) live, from its row.

use tether_protocol::{format_ts, SessionInfo, SessionStatus};
use tether_store::SessionRow;

/// The protocol's view of a stored session; `live` is the peer count of
/// its live actor, `None` when it is not live.
///
/// Whether a session is parked is a fact of the registry, not of the row:
/// a session that is not live is parked (whatever its row says after a
/// crash), and a live one that was parked a moment ago is idle even before
/// its row says so.
pub fn info_from_row(row: &SessionRow, live: Option<u32>) -> SessionInfo {
    let status = match (row.status, live) {
        (SessionStatus::Closed, _) => SessionStatus::Closed,
        (_, None) => SessionStatus::Parked,
        (SessionStatus::Parked, Some(_)) => SessionStatus::Idle,
        (status, Some(_)) => status,
    };
    SessionInfo {
        session_id: row.id.clone(),
        profile: row.profile.clone(),
        title: row.title.clone(),
        status,
        created_at: format_ts(row.created_at_ms),
        updated_at: format_ts(row.updated_at_ms),
        parent_session_id: row.parent_session_id.clone(),
        history_version: row.history_version,
        message_count: row.message_count,
        latest_seq: row.latest_seq,
        peers: live.unwrap_or(0),
        close_on_disconnect: row.close_on_disconnect,
        // The registry knows how many peers a live session has, not who:
        // that only the session answers (`SessionState::info`).
        attached: None,
        // Only a cluster knows, and only after a read (`session.list`).
        owner_node: None,
    }
}
