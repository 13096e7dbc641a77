//! A session's turns under its profile's limits: a prompt that would run
//! while the profile already runs as many turns as it may, or queue while
//! it has as many queued, is refused (4290) before anything is written.
//!
//! The check counts the turn at once (so two sessions of one profile
//! cannot both take its last place); after each message the session
//! settles the count to the turns it holds then, so a prompt refused later
//! for another reason, a turn that ended or a queue that was dropped gives
//! its place back, and a session that stops gives back all of them.

use tether_protocol::RpcError;
use tracing::info;

use super::SessionState;

impl SessionState {
    /// Counts the turn a prompt accepted now would be: running when none
    /// runs, else queued.
    pub(super) fn reserve_turn(&mut self) -> Result<(), RpcError> {
        let running = self.turns.running.is_none();
        self.turn_count.reserve(running).map_err(|limit| {
            info!(session_id = %self.id, profile = %self.profile, limit = limit.limit.name(),
                  max = limit.max, "prompt refused: profile limit reached");
            limit.to_rpc()
        })
    }

    /// Settles the profile's count to the turns this session holds now.
    pub(super) fn count_turns(&mut self) {
        let running = u32::from(self.turns.running.is_some());
        let queued = u32::try_from(self.turns.queue.len()).unwrap_or(u32::MAX);
        self.turn_count.sync(running, queued);
    }
}
