//! Whether the compute hosts got started: until the first `hello`, a
//! gateway whose hosts cannot start (a host command that is not found, a
//! host that dies or hangs before its hello) cannot run a single turn, and
//! `tether serve` must say so and exit rather than listen in silence
//! (`--host-start-deadline-s`). The supervisor tells [`HostStart`] what
//! happens; the binary waits on it.

use std::sync::Mutex;

use tokio::sync::watch;

/// How the hosts' start went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartState {
    /// No host has said `hello` yet, and a slot is starting or will be
    /// restarted.
    Waiting,
    /// A host said `hello`: the gateway can run turns (what happens to the
    /// hosts later is the supervisor's, and `/readyz`'s, business).
    Started,
    /// No host ever said `hello`, and none can come: every slot rests past
    /// its restart intensity (or is down). `last` is why the latest host
    /// died (`exited with status 127`, `no hello within 10s`, ...).
    Failed { last: String },
}

/// Shared by the host supervisor (which reports) and `tether serve` (which
/// waits): one per gateway, kept across restarts of the supervisor.
#[derive(Debug)]
pub struct HostStart {
    state: watch::Sender<StartState>,
    /// Why the latest host died before any said hello.
    last_death: Mutex<Option<String>>,
}

impl Default for HostStart {
    fn default() -> Self {
        Self {
            state: watch::Sender::new(StartState::Waiting),
            last_death: Mutex::new(None),
        }
    }
}

impl HostStart {
    /// Resolves once the start is decided: `Started` or `Failed`.
    pub async fn decided(&self) -> StartState {
        let mut rx = self.state.subscribe();
        // The sender lives as long as `self`, so this cannot fail; if it
        // did, waiting on is the safe answer.
        let decided = match rx.wait_for(|s| *s != StartState::Waiting).await {
            Ok(s) => Some(s.clone()),
            Err(_) => None,
        };
        match decided {
            Some(s) => s,
            None => std::future::pending().await,
        }
    }

    /// The state now.
    pub fn now(&self) -> StartState {
        self.state.borrow().clone()
    }

    /// Why the latest host died before any said hello, if one did.
    pub fn last_death(&self) -> Option<String> {
        self.last_death
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A host said hello: started, for good.
    pub(crate) fn hello(&self) {
        self.state.send_if_modified(|s| {
            let changed = *s != StartState::Started;
            *s = StartState::Started;
            changed
        });
    }

    /// A host died; remembered only while none has said hello yet.
    pub(crate) fn died(&self, reason: &str) {
        if *self.state.borrow() == StartState::Started {
            return;
        }
        *self.last_death.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
    }

    /// No slot is up, starting or backing off. Before any hello that means
    /// the hosts cannot start; after one, it is not a start failure.
    pub(crate) fn none_left(&self) {
        let last = self
            .last_death()
            .unwrap_or_else(|| "no host was started".to_string());
        self.state.send_if_modified(|s| {
            if *s == StartState::Waiting {
                *s = StartState::Failed { last };
                true
            } else {
                false
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_fails_only_when_no_host_said_hello_and_none_can_come() {
        let start = HostStart::default();
        assert_eq!(start.now(), StartState::Waiting);
        start.died("exited with status 127");
        start.none_left();
        assert_eq!(
            start.now(),
            StartState::Failed {
                last: "exited with status 127".into()
            }
        );
        // A slot retried after its rest may still come up.
        start.hello();
        assert_eq!(start.now(), StartState::Started);
        // Later deaths are the supervisor's business, not the start's.
        start.died("killed");
        start.none_left();
        assert_eq!(start.now(), StartState::Started);
        assert_eq!(
            start.last_death().as_deref(),
            Some("exited with status 127")
        );
    }
}
