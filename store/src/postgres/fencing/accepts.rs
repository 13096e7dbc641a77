//! The forwarded requests an owner runs, by the write that accepts each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tether_protocol::SessionId;

use super::ForwardId;

/// Forwards to accept with a given write: (session, seq of the request's first event) → the
/// forward. Shared by the owner's session logic, which registers, and its writer, which
/// accepts in the transaction that writes that seq.
#[derive(Debug, Clone, Default)]
pub(crate) struct Accepts(Arc<Mutex<HashMap<(SessionId, u64), ForwardId>>>);

impl Accepts {
    fn map(&self) -> MutexGuard<'_, HashMap<(SessionId, u64), ForwardId>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn register(&self, session_id: &SessionId, seq: u64, id: &ForwardId) {
        self.map().insert((session_id.clone(), seq), id.clone());
    }

    /// The forwards registered for any of `events` (session, seq).
    pub(crate) fn for_events<'a>(
        &self,
        events: impl Iterator<Item = (&'a str, u64)>,
    ) -> Vec<(SessionId, u64, ForwardId)> {
        let map = self.map();
        if map.is_empty() {
            return Vec::new();
        }
        events
            .filter_map(|(id, seq)| {
                let key = (SessionId::from(id), seq);
                map.get(&key).map(|f| (key.0, seq, f.clone()))
            })
            .collect()
    }

    /// Done with these, accepted or refused.
    pub(crate) fn remove(&self, done: &[(SessionId, u64, ForwardId)]) {
        let mut map = self.map();
        for (session_id, seq, _) in done {
            map.remove(&(session_id.clone(), *seq));
        }
    }
}
