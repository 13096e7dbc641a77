//! Settings the actors need, resolved by the binary from flags, env and file.

use std::time::Duration;

use crate::supervisor::RestartPolicy;

/// Limits and sizes shared by every actor of one gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Events kept in memory per session for fast replays.
    pub ring_events: usize,
    /// Bytes kept in memory per session ring.
    pub ring_bytes: usize,
    /// Peer outbox bound, in frames.
    pub outbox_frames: usize,
    /// Peer outbox bound, in bytes.
    pub outbox_bytes: usize,
    /// Largest frame a client may send.
    pub max_frame_bytes: usize,
    /// More missed events than this in a resume answer `resync`.
    pub max_replay_events: u64,
    /// A resume whose segment holds more messages fails with 4130.
    pub max_resume_messages: u64,
    /// Advertised client heartbeat interval.
    pub heartbeat_s: u64,
    /// Most events the store writer commits in one transaction.
    pub commit_batch_events: usize,
    /// Restart policy of the core actors under the root.
    pub core_policy: RestartPolicy,
    /// How long a peer waits on an actor before answering -32603.
    pub call_timeout: Duration,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            ring_events: 512,
            ring_bytes: 4 << 20,
            outbox_frames: 1024,
            outbox_bytes: 4 << 20,
            max_frame_bytes: 1 << 20,
            max_replay_events: 10_000,
            max_resume_messages: 20_000,
            heartbeat_s: 15,
            commit_batch_events: 4096,
            core_policy: RestartPolicy::core(),
            call_timeout: Duration::from_secs(30),
        }
    }
}
