//! `SessionInfo` for a session that is not (or not yet) live, from its row.

use tether_protocol::{format_ts, SessionInfo};
use tether_store::SessionRow;

/// The protocol's view of a stored session; `peers` comes from the live
/// session when there is one.
pub fn info_from_row(row: &SessionRow, peers: u32) -> SessionInfo {
    SessionInfo {
        session_id: row.id.clone(),
        profile: row.profile.clone(),
        title: row.title.clone(),
        status: row.status,
        created_at: format_ts(row.created_at_ms),
        updated_at: format_ts(row.updated_at_ms),
        parent_session_id: row.parent_session_id.clone(),
        history_version: row.history_version,
        message_count: row.message_count,
        latest_seq: row.latest_seq,
        peers,
        close_on_disconnect: row.close_on_disconnect,
    }
}
