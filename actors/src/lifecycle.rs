//! Where the gateway is in its life: recovering what the last stop cut
//! short, serving, or draining for a stop.
//!
//! Both flags gate what clients may observe. Until recovery is done, a read
//! of a session whose turn was running at the last stop would show that turn
//! still running (its `gateway_restart` ending is not written yet), so the
//! binary answers nothing before it. Once a drain begins, nothing new may
//! start on a host: a queued prompt started now would only fail
//! `host_unavailable` when the hosts stop a moment later.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// Shared by every actor through `Ctx`.
#[derive(Debug)]
pub struct Lifecycle {
    recovered: watch::Sender<bool>,
    draining: AtomicBool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            recovered: watch::Sender::new(false),
            draining: AtomicBool::new(false),
        }
    }
}

impl Lifecycle {
    /// Every session that had turns running or queued at the last stop has
    /// their endings on disk (or recovery gave up on it; see the log).
    pub fn recovered(&self) -> bool {
        *self.recovered.borrow()
    }

    /// Resolves once [`recovered`](Self::recovered) is true.
    pub async fn wait_recovered(&self) {
        let mut rx = self.recovered.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|done| *done).await;
    }

    pub(crate) fn set_recovered(&self, done: bool) {
        self.recovered.send_replace(done);
    }

    /// A drain began: refuse new turns, start no queued one.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }
}
