//! The fences a node holds, shared by its claims and its writer.
//!
//! Why a shared table rather than a fence on every `WriteOp`: the actors already send
//! `WriteOp`s without knowing about clusters, and a session's fence changes only when it is
//! claimed. So a successful claim records its fence here, and the writer, when it plans a batch,
//! takes each session's fence from here, writes it into the events and checks it against the
//! ownership row under that row's lock. A session with no fence here is refused at once
//! (`NotOwner`, fence 0) without a round trip. The database decides; this table only says which
//! fence this node *believes* it holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tether_protocol::SessionId;

/// Session → the fence this node claimed it under. Cheap to clone (one `Arc`).
#[derive(Debug, Clone, Default)]
pub struct Fences(Arc<Mutex<HashMap<SessionId, u64>>>);

impl Fences {
    fn map(&self) -> MutexGuard<'_, HashMap<SessionId, u64>> {
        // A panic while holding this lock leaves a plain map behind: still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fence held for `session_id`, if any.
    pub fn get(&self, session_id: &SessionId) -> Option<u64> {
        self.map().get(session_id).copied()
    }

    /// Records a claim. A fence only grows: an older claim's answer arriving late is ignored.
    pub(crate) fn hold(&self, session_id: &SessionId, fence: u64) {
        let mut map = self.map();
        let slot = map.entry(session_id.clone()).or_insert(fence);
        *slot = (*slot).max(fence);
    }

    /// Forgets `session_id` if it is still held under `fence` (a newer claim stays).
    pub(crate) fn forget(&self, session_id: &SessionId, fence: u64) {
        let mut map = self.map();
        if map.get(session_id) == Some(&fence) {
            map.remove(session_id);
        }
    }

    /// The fences of `ids` that are held, in one lock.
    pub(crate) fn of<'a>(
        &self,
        ids: impl Iterator<Item = &'a SessionId>,
    ) -> HashMap<SessionId, u64> {
        let map = self.map();
        ids.filter_map(|id| map.get(id).map(|f| (id.clone(), *f)))
            .collect()
    }

    /// Every session held, with its fence.
    pub fn all(&self) -> Vec<(SessionId, u64)> {
        self.map().iter().map(|(s, f)| (s.clone(), *f)).collect()
    }

    /// How many sessions this node holds.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_only_grow_and_a_newer_claim_survives_forgetting_an_older_one() {
        let f = Fences::default();
        let s = SessionId::from("s_1");
        f.hold(&s, 3);
        f.hold(&s, 2);
        assert_eq!(f.get(&s), Some(3));
        f.forget(&s, 2);
        assert_eq!(f.get(&s), Some(3));
        f.forget(&s, 3);
        assert_eq!(f.get(&s), None);
    }
}
