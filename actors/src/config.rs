//! Settings the actors need, resolved by the binary from flags, env and file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::supervisor::{AfterIntensity, Backoff, RestartPolicy, Strategy};

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
    /// Longest session title in bytes (`--max-title-bytes`): a longer one
    /// is refused wherever a title is set (-32602 `title`).
    pub max_title_bytes: usize,
    /// A `session.list` page ends early rather than pass this many bytes
    /// of `result` (`--max-list-bytes`), with at least one session.
    pub max_list_bytes: usize,
    /// How long an HTTP request's body may take to arrive, like its head
    /// (`--handshake-timeout-s`): a body dripped slower is answered 408.
    pub request_read_timeout: Duration,
    /// Advertised client heartbeat interval.
    pub heartbeat_s: u64,
    /// Most events the store writer commits in one transaction.
    pub commit_batch_events: usize,
    /// Least time from one commit's start to the next (`--commit-window-us`).
    pub commit_window: Duration,
    /// Restart policy of the core actors under the root.
    pub core_policy: RestartPolicy,
    /// How long a peer waits on an actor before answering -32603.
    pub call_timeout: Duration,
    /// Prompts that may wait behind a running turn (`--max-queued`).
    pub max_queued: usize,
    /// A turn running longer ends with `host_timeout` (`--turn-deadline-s`).
    pub turn_deadline: Duration,
    /// How long `session.compress` waits before answering `pending`.
    pub compress_wait: Duration,
    /// On a cluster: how long a request forwarded to a session's owner may
    /// wait for it (`--forward-timeout-s`).
    pub forward_timeout: Duration,
    /// Requests per second a peer may send (burst: twice that); 0 = no limit.
    pub rate_limit_rps: u32,
    /// How long a session without peers stays live before it is parked
    /// (`--orphan-grace-s`; zero parks an idle orphan at once).
    pub orphan_grace: Duration,
    /// An orphan's running turn silent this long is interrupted and the
    /// session parked (`--activity-stale-s`).
    pub activity_stale: Duration,
    /// An orphan idle this long is parked even within its grace
    /// (`--session-ttl-s`).
    pub session_ttl: Duration,
    /// Above this many live sessions, the least recently active idle
    /// orphans are parked (`--max-live-sessions`).
    pub max_live_sessions: usize,
    /// Most peers attached to one session (`--max-peers-per-session`).
    pub max_peers_per_session: usize,
    /// A WebSocket silent this long is closed (`--idle-timeout-s`); the
    /// gateway pings a quiet one every `heartbeat_s`.
    pub idle_timeout: Duration,
    /// Each profile's engine config (`[profiles.NAME.engine]`), read at
    /// every turn of a session that follows its profile.
    pub profile_engines: ProfileEngines,
    /// What each profile may hold (`--profile-limit`, `[limits.PROFILE]`).
    pub profile_limits: crate::profile_limits::LimitTable,
    /// What the store keeps, and for how long (`retention.rs`).
    pub retention: crate::RetentionConfig,
}

/// The profiles' engine configs, replaced as a whole when the config file
/// is reloaded (SIGHUP); sessions read them at each turn, so a change takes
/// effect at the next turn without recreating any session.
#[derive(Debug, Clone, Default)]
pub struct ProfileEngines(Arc<RwLock<HashMap<String, Map<String, Value>>>>);

impl ProfileEngines {
    pub fn get(&self, profile: &str) -> Option<Map<String, Value>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(profile)
            .cloned()
    }

    pub fn replace(&self, engines: HashMap<String, Map<String, Value>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = engines;
    }
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
            max_title_bytes: 1024,
            max_list_bytes: 1 << 20,
            request_read_timeout: Duration::from_secs(10),
            heartbeat_s: 15,
            commit_batch_events: 4096,
            commit_window: Duration::from_millis(1),
            core_policy: RestartPolicy::core(),
            call_timeout: Duration::from_secs(30),
            max_queued: 16,
            turn_deadline: Duration::from_secs(3600),
            compress_wait: Duration::from_secs(120),
            forward_timeout: Duration::from_secs(10),
            rate_limit_rps: 200,
            orphan_grace: Duration::from_secs(20),
            activity_stale: Duration::from_secs(600),
            session_ttl: Duration::from_secs(6 * 3600),
            max_live_sessions: 10_000,
            max_peers_per_session: 64,
            idle_timeout: Duration::from_secs(45),
            profile_engines: ProfileEngines::default(),
            profile_limits: Default::default(),
            retention: crate::RetentionConfig::default(),
        }
    }
}

/// The default host line cap: 16 MiB.
pub const DEFAULT_MAX_HOST_LINE_BYTES: usize = 16 << 20;

/// Compute hosts: how many, how to start them, how to watch them.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Worker process slots (`--hosts`).
    pub slots: usize,
    /// argv of a worker (`--host-command`, run through `sh -c "exec CMD"`;
    /// default: this executable with `host --engine echo`).
    pub command: Vec<String>,
    /// Heartbeat interval given to hosts as `TETHER_HEARTBEAT_S`; three
    /// missed heartbeats make a host dead.
    pub heartbeat: Duration,
    /// A host that has not said `hello` by then is dead.
    pub hello_timeout: Duration,
    /// Restart policy per slot (`--host-restarts` per `--host-restart-period-s`).
    pub restart: RestartPolicy,
    /// Default wait of a control request (`--control-wait-s`).
    pub control_wait: Duration,
    /// How long a late handler waits for its answer (`--late-ack-ttl-s`).
    pub late_ack_ttl: Duration,
    /// Most late handlers kept; the oldest is evicted (`--late-ack-cap`).
    pub late_ack_cap: usize,
    /// Where the host pid registry (`hosts.json`) lives; `None` keeps none.
    pub data_dir: Option<PathBuf>,
    /// How long hosts get to answer `shutdown` before they are killed.
    pub shutdown_grace: Duration,
    /// Longest line read from a host (`--max-host-line-bytes`); a longer one
    /// is refused at the host edge and never reaches a session.
    pub max_line_bytes: usize,
    /// Turns one host runs at once (`--host-max-turns`; 0: no cap). Past
    /// it turns wait for room, slots shared fairly across profiles.
    pub max_turns_per_host: usize,
}

impl HostConfig {
    /// The slot restart policy of PROTOCOL Part 2: 3 per 300 s, backoff
    /// `min(5 s, 250 ms · 2^(n−1))`; past that the slot rests until its
    /// period has passed and is then retried (a rate, not a lifetime budget).
    pub const fn default_restart() -> RestartPolicy {
        RestartPolicy {
            strategy: Strategy::OneForOne,
            intensity: 3,
            period: Duration::from_secs(300),
            backoff: Backoff::Exponential {
                base: Duration::from_millis(250),
                max: Duration::from_secs(5),
            },
            after_intensity: AfterIntensity::Rest,
        }
    }

    /// Defaults with the given worker command.
    pub fn new(command: Vec<String>) -> Self {
        Self {
            slots: 2,
            command,
            heartbeat: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(10),
            restart: Self::default_restart(),
            control_wait: Duration::from_secs(30),
            late_ack_ttl: Duration::from_secs(1800),
            late_ack_cap: 64,
            data_dir: None,
            shutdown_grace: Duration::from_secs(3),
            max_line_bytes: DEFAULT_MAX_HOST_LINE_BYTES,
            max_turns_per_host: 0,
        }
    }
}
