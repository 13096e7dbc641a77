//! `tether serve` settings: flags, `TETHER_*` environment variables and an
//! optional `tether.toml`, in that order of precedence.
//!
//! clap handles flags and env; the file fills in whatever clap took from a
//! default (`config/file.rs`). Bad configuration is reported by the caller
//! with exit status 64.

mod auth;
mod file;
mod limits;
mod retention;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};

/// `--log-format`: the host worker's, since `tether host` takes the same
/// flag and this crate imports that one.
pub use tether_host::LogFormat;
/// `--synchronous`: the store's own type (its `cli` feature).
use tether_store::{PageSize, Synchronous};

/// `--listen`: a socket address, or `:PORT` for loopback. Listening on
/// every interface must be asked for by name (`0.0.0.0:PORT`), and then
/// needs tokens.
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let full = match s.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None => s.to_string(),
    };
    full.parse()
        .map_err(|_| format!("{s:?} is not an address (HOST:PORT, or :PORT for 127.0.0.1)"))
}

pub use auth::JwtArgs;
pub use file::read_profile_engines;
pub use retention::RetentionArgs;

/// `--max-connections` when not configured.
pub const DEFAULT_MAX_CONNECTIONS: usize = 65_536;

/// Flags of `tether serve`. Every one is also `TETHER_<NAME>` and a key of
/// the config file (snake_case).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (HTTP and WebSocket).
    /// `:PORT` is `127.0.0.1:PORT` (never every interface); `:0` picks a free port.
    #[arg(long, env = "TETHER_LISTEN", default_value = "127.0.0.1:7878", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Directory holding tether.db.
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    pub data_dir: PathBuf,
    /// Store URL: `sqlite://PATH` (default: DATA_DIR/tether.db) or
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB` (README, "Configuration").
    #[arg(long, env = "TETHER_DATABASE_URL")]
    pub database_url: Option<String>,
    /// How long a PostgreSQL server that cannot be reached is retried at start
    /// (then exit 69), in seconds.
    #[arg(long, env = "TETHER_DATABASE_CONNECT_TIMEOUT_S", default_value_t = 30)]
    pub database_connect_timeout_s: u64,
    /// Run as a node of a cluster: several gateways on one PostgreSQL
    /// (docs/CLUSTER.md). Needs a `postgres://` --database-url. Without it a
    /// PostgreSQL gateway is the database's only one (a second exits 64).
    #[arg(long, env = "TETHER_CLUSTER")]
    pub cluster: bool,
    /// A node whose heartbeat is older than this is dead and its sessions
    /// are taken over, in seconds (--cluster).
    #[arg(long, env = "TETHER_NODE_LEASE_S", default_value_t = 3.0)]
    pub node_lease_s: f64,
    /// How long a request forwarded to another node may wait for its
    /// owner to run it, in seconds (--cluster).
    #[arg(long, env = "TETHER_FORWARD_TIMEOUT_S", default_value_t = 10)]
    pub forward_timeout_s: u64,
    /// Config file (TOML).
    #[arg(long, env = "TETHER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Serve one peer over stdin/stdout instead of listening.
    #[arg(long, env = "TETHER_STDIO")]
    pub stdio: bool,
    /// Client heartbeat interval advertised in gateway.ready, in seconds.
    #[arg(long, env = "TETHER_HEARTBEAT_S", default_value_t = 15)]
    pub heartbeat_s: u64,
    /// Events kept in memory per session for fast replays.
    #[arg(long, env = "TETHER_RING_EVENTS", default_value_t = 512)]
    pub ring_events: usize,
    /// Peer outbox bound in frames.
    #[arg(long, env = "TETHER_OUTBOX_FRAMES", default_value_t = 1024)]
    pub outbox_frames: usize,
    /// Largest frame a client may send, in bytes.
    #[arg(long, env = "TETHER_MAX_FRAME_BYTES", default_value_t = 1 << 20)]
    pub max_frame_bytes: usize,
    /// More missed events than this in a resume answer `resync`.
    #[arg(long, env = "TETHER_MAX_REPLAY_EVENTS", default_value_t = 10_000)]
    pub max_replay_events: u64,
    /// A resume of a segment with more messages fails with 4130.
    #[arg(long, env = "TETHER_MAX_RESUME_MESSAGES", default_value_t = 20_000)]
    pub max_resume_messages: u64,
    /// Longest session title, in bytes (UTF-8); a longer one is -32602.
    #[arg(long, env = "TETHER_MAX_TITLE_BYTES", default_value_t = 1024)]
    pub max_title_bytes: usize,
    /// A `session.list` page ends early (with a `next_cursor`) rather than
    /// pass this many bytes; it always holds at least one session.
    #[arg(long, env = "TETHER_MAX_LIST_BYTES", default_value_t = 1 << 20)]
    pub max_list_bytes: usize,
    /// SQLite durability: full (fsync of the WAL at every commit: what a
    /// client saw survives a power cut) or normal (fsync at checkpoints
    /// only: survives a crash of the process, not of the machine).
    #[arg(long, env = "TETHER_SYNCHRONOUS", value_enum, default_value = "full")]
    pub synchronous: Synchronous,
    /// Page size, in bytes, of a new SQLite store (an existing one keeps
    /// its own): 2048 writes a fifth to a third fewer bytes per event,
    /// 4096 makes a store of longer events (0.5 to 1 KB) smaller
    /// (docs/benchmarks/2026-12.md, "Bytes written per event").
    #[arg(long, env = "TETHER_SQLITE_PAGE_SIZE", default_value_t = PageSize::DEFAULT)]
    pub sqlite_page_size: PageSize,
    /// Group commit: a commit starts at least this many microseconds after
    /// the one before it, gathering what arrives meanwhile (0: at once).
    /// Only a gateway committing more often than that waits at all.
    #[arg(long, env = "TETHER_COMMIT_WINDOW_US", default_value_t = 1000)]
    pub commit_window_us: u64,
    /// Log format on stderr.
    #[arg(long, env = "TETHER_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Compute-host worker processes.
    #[arg(long, env = "TETHER_HOSTS", default_value_t = 2)]
    pub hosts: usize,
    /// Command that starts a compute host (run with `sh -c`); default: this
    /// binary's `host --engine echo`. A first word `tether` is this binary,
    /// whether or not `tether` is on PATH.
    #[arg(long, env = "TETHER_HOST_COMMAND")]
    pub host_command: Option<String>,
    /// Heartbeat interval asked of compute hosts, in seconds; three missed
    /// heartbeats make a host dead.
    #[arg(long, env = "TETHER_HOST_HEARTBEAT_S", default_value_t = 5)]
    pub host_heartbeat_s: u64,
    /// Restarts allowed per host slot within the restart period (a rate:
    /// past it the slot rests until the period has passed, then is retried).
    #[arg(long, env = "TETHER_HOST_RESTARTS", default_value_t = 3)]
    pub host_restarts: u32,
    /// The window of --host-restarts, in seconds.
    #[arg(long, env = "TETHER_HOST_RESTART_PERIOD_S", default_value_t = 300)]
    pub host_restart_period_s: u64,
    /// Exit (status 69) when no compute host has said hello this many
    /// seconds after the start, or sooner when every host slot is past its
    /// restart intensity before any did; 0 never exits for that.
    #[arg(long, env = "TETHER_HOST_START_DEADLINE_S", default_value_t = 30)]
    pub host_start_deadline_s: u64,
    /// Longest line a compute host may write, in bytes; a longer one is
    /// refused and ends the turn it belongs to (client frames have their
    /// own cap, --max-frame-bytes).
    #[arg(long, env = "TETHER_MAX_HOST_LINE_BYTES", default_value_t = tether_actors::config::DEFAULT_MAX_HOST_LINE_BYTES)]
    pub max_host_line_bytes: usize,
    /// Turns one compute host runs at once (0: no cap). Past it turns wait
    /// for room, and slots that free up go round-robin across profiles.
    #[arg(long, env = "TETHER_HOST_MAX_TURNS", default_value_t = 0)]
    pub host_max_turns: usize,
    /// Prompts that may wait behind a running turn.
    #[arg(long, env = "TETHER_MAX_QUEUED", default_value_t = 16)]
    pub max_queued: usize,
    /// A turn running longer ends with host_timeout, in seconds.
    #[arg(long, env = "TETHER_TURN_DEADLINE_S", default_value_t = 3600)]
    pub turn_deadline_s: u64,
    /// Default wait of a control request before it answers pending, in seconds.
    #[arg(long, env = "TETHER_CONTROL_WAIT_S", default_value_t = 30)]
    pub control_wait_s: u64,
    /// Expected ceiling of a compression, in seconds (sets its wait).
    #[arg(long, env = "TETHER_COMPRESS_CEILING_S", default_value_t = 90)]
    pub compress_ceiling_s: u64,
    /// How long a late control answer is still applied, in seconds.
    #[arg(long, env = "TETHER_LATE_ACK_TTL_S", default_value_t = 1800)]
    pub late_ack_ttl_s: u64,
    /// Most late control handlers kept at once.
    #[arg(long, env = "TETHER_LATE_ACK_CAP", default_value_t = 64)]
    pub late_ack_cap: usize,
    /// Requests per second a peer may send (burst twice that); 0 = no limit.
    #[arg(long, env = "TETHER_RATE_LIMIT_RPS", default_value_t = 200)]
    pub rate_limit_rps: u32,
    /// How long a session without peers stays live before it is parked,
    /// in seconds (0 parks an idle orphan at once).
    #[arg(long, env = "TETHER_ORPHAN_GRACE_S", default_value_t = 20)]
    pub orphan_grace_s: u64,
    /// An orphaned session's running turn silent this long is interrupted
    /// and the session parked, in seconds.
    #[arg(long, env = "TETHER_ACTIVITY_STALE_S", default_value_t = 600)]
    pub activity_stale_s: u64,
    /// A session without peers idle this long is parked, in seconds.
    #[arg(long, env = "TETHER_SESSION_TTL_S", default_value_t = 21_600)]
    pub session_ttl_s: u64,
    /// Above this many live sessions the least recently active idle ones
    /// without peers are parked.
    #[arg(long, env = "TETHER_MAX_LIVE_SESSIONS", default_value_t = 10_000)]
    pub max_live_sessions: usize,
    /// Most peers attached to one session at once (4009 beyond).
    #[arg(long, env = "TETHER_MAX_PEERS_PER_SESSION", default_value_t = 64)]
    pub max_peers_per_session: usize,
    /// Most open client connections (WebSocket, SSE, HTTP); more get 503.
    #[arg(long, env = "TETHER_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// A connection must send its request head (the WebSocket upgrade
    /// included) within this many seconds.
    #[arg(long, env = "TETHER_HANDSHAKE_TIMEOUT_S", default_value_t = 10)]
    pub handshake_timeout_s: u64,
    /// A WebSocket silent this long (no frame, no pong to the gateway's
    /// pings) is closed, in seconds.
    #[arg(long, env = "TETHER_IDLE_TIMEOUT_S", default_value_t = 45)]
    pub idle_timeout_s: u64,
    /// A client token, `PROFILE:TOKEN` (or `PROFILE:sha256:HEX` with the
    /// token's SHA-256); repeatable; comma-separated in TETHER_TOKEN. With
    /// tokens every client must present one and sees only its profile.
    #[arg(long = "token", env = "TETHER_TOKEN", value_delimiter = ',')]
    pub token: Vec<String>,
    /// A browser origin allowed besides the gateway's own (repeatable;
    /// comma-separated in TETHER_ALLOW_ORIGIN).
    #[arg(
        long = "allow-origin",
        env = "TETHER_ALLOW_ORIGIN",
        value_delimiter = ','
    )]
    pub allow_origin: Vec<String>,
    /// What a profile may hold, `PROFILE:NAME=N,...` (`*`: every profile;
    /// names: live_sessions, running_turns, queued_turns, requests_per_s,
    /// connections); repeatable; `;`-separated in TETHER_PROFILE_LIMIT.
    #[arg(
        long = "profile-limit",
        env = "TETHER_PROFILE_LIMIT",
        value_delimiter = ';'
    )]
    pub profile_limit: Vec<String>,
    /// The resolved limits: the file's `[limits.PROFILE]` tables with the
    /// flags over them.
    #[arg(skip)]
    pub profile_limits: tether_actors::profile_limits::LimitTable,
    /// Signed tokens (JWT): keys and checks (docs/AUTHENTICATION.md).
    #[command(flatten)]
    pub jwt: JwtArgs,
    /// The token settings given by flag or environment, which the config
    /// file (at start or at a SIGHUP reload) does not change.
    #[arg(skip)]
    pub auth_pinned: auth::Pinned,
    /// Set when --control-wait-s came from a flag, env or file (not the
    /// default): only then may it shorten the compress wait.
    #[arg(skip)]
    pub control_wait_explicit: bool,
    /// `[profiles.NAME.engine]` tables of the config file.
    #[arg(skip)]
    pub profile_engines: ProfileEngineMap,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// Profile name → its engine config.
pub type ProfileEngineMap =
    std::collections::HashMap<String, serde_json::Map<String, serde_json::Value>>;

impl ServeArgs {
    /// Applies the config file (if any) under flags and env, then checks.
    pub fn resolve(mut self, matches: &ArgMatches) -> anyhow::Result<Self> {
        self.control_wait_explicit = matches!(
            matches.value_source("control_wait_s"),
            Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable)
        );
        let mut file_limits = Default::default();
        self.auth_pinned = auth::Pinned::of(matches);
        if let Some(path) = self.config.clone() {
            let mut file = file::read_file(&path)?;
            file_limits = file.limits.take().unwrap_or_default();
            self.apply_file(file, matches)?;
        }
        self.profile_limits = limits::table(&self.profile_limit, file_limits)?;
        self.check()?;
        Ok(self)
    }

    fn check(&self) -> anyhow::Result<()> {
        self.retention.config()?;
        if self.max_frame_bytes < 1024 {
            bail!("--max-frame-bytes must be at least 1024");
        }
        if self.max_title_bytes == 0 || self.max_list_bytes == 0 {
            bail!("--max-title-bytes and --max-list-bytes must be at least 1");
        }
        if self.max_host_line_bytes < 1024 {
            bail!("--max-host-line-bytes must be at least 1024");
        }
        if self.outbox_frames == 0 {
            bail!("--outbox-frames must be at least 1");
        }
        if self.heartbeat_s == 0 || self.host_heartbeat_s == 0 {
            bail!("--heartbeat-s and --host-heartbeat-s must be at least 1");
        }
        if self.turn_deadline_s == 0 {
            bail!("--turn-deadline-s must be at least 1");
        }
        if self.activity_stale_s == 0 || self.session_ttl_s == 0 {
            bail!("--activity-stale-s and --session-ttl-s must be at least 1");
        }
        if self.max_live_sessions == 0
            || self.max_peers_per_session == 0
            || self.max_connections == 0
        {
            bail!("--max-live-sessions, --max-peers-per-session and --max-connections must be at least 1");
        }
        if self.handshake_timeout_s == 0 || self.idle_timeout_s == 0 {
            bail!("--handshake-timeout-s and --idle-timeout-s must be at least 1");
        }
        // Read (and so checked) whether or not the address needs tokens.
        let has_tokens = self.has_tokens()?;
        if !self.listen.ip().is_loopback() && !self.stdio && !has_tokens {
            bail!(
                "refusing to listen on non-loopback address {} without tokens (add --token PROFILE:TOKEN or a --jwt-* key)",
                self.listen
            );
        }
        let backend = self.backend()?;
        if self.cluster {
            if !matches!(backend, tether_store::Backend::Postgres(_)) {
                bail!(
                    "--cluster needs a postgres:// --database-url (SQLite is always one gateway)"
                );
            }
            self.cluster_config()?;
            if self.forward_timeout_s == 0 {
                bail!("--forward-timeout-s must be at least 1");
            }
        }
        Ok(())
    }

    /// The node's lease (`--node-lease-s`), heartbeating every quarter of
    /// it (at most every second).
    pub fn cluster_config(&self) -> anyhow::Result<tether_store::cluster::ClusterConfig> {
        if !self.node_lease_s.is_finite() || self.node_lease_s < 0.2 {
            bail!(
                "--node-lease-s must be at least 0.2 (got {})",
                self.node_lease_s
            );
        }
        Ok(tether_store::cluster::ClusterConfig::with_lease(
            Duration::from_secs_f64(self.node_lease_s),
        ))
    }

    /// The store: `--database-url`, else `DATA_DIR/tether.db`, with its
    /// durability and connect timeout, recording in DATA_DIR what it
    /// served (a store found older later gets a new epoch). A URL that
    /// names no store tether knows is a usage error (its password masked).
    pub fn backend(&self) -> anyhow::Result<tether_store::Backend> {
        let backend = match &self.database_url {
            None => tether_store::Backend::sqlite(self.data_dir.join("tether.db")),
            Some(url) => tether_store::Backend::from_url(url)?,
        };
        Ok(backend
            .with_synchronous(self.synchronous)
            .with_page_size(self.sqlite_page_size)
            .with_connect_timeout(Duration::from_secs(self.database_connect_timeout_s))
            .with_served_in(&self.data_dir))
    }
}

impl ServeArgs {
    /// docs/ARCHITECTURE.md "Compress wait": `min(max(ceiling + 30, 120), 630)` s,
    /// shortened by an explicitly configured, lower --control-wait-s.
    pub fn compress_wait(&self) -> Duration {
        let wait = (self.compress_ceiling_s + 30).clamp(120, 630);
        let wait = if self.control_wait_explicit {
            wait.min(self.control_wait_s)
        } else {
            wait
        };
        Duration::from_secs(wait)
    }

    /// argv of a compute host.
    pub fn host_argv(&self) -> anyhow::Result<Vec<String>> {
        let exe = std::env::current_exe().context("cannot find the tether executable")?;
        let exe = exe.to_string_lossy().into_owned();
        Ok(match &self.host_command {
            Some(cmd) => vec![
                "sh".into(),
                "-c".into(),
                format!("exec {}", this_tether(cmd, &exe)),
            ],
            None => vec![exe, "host".into(), "--engine".into(), "echo".into()],
        })
    }
}

/// `cmd` with a first word `tether` replaced by `exe` (shell-quoted): the
/// README and docs/ENGINES.md write host commands as `tether host …`, and
/// they must run this gateway's own tether even when `tether` is not on
/// PATH (`./target/release/tether serve`), or is another version. Only the
/// first word: anywhere else `tether` is whatever PATH finds, as the shell
/// would have it.
fn this_tether(cmd: &str, exe: &str) -> String {
    let trimmed = cmd.trim_start();
    match trimmed.strip_prefix("tether") {
        Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
            format!("{}{rest}", shell_quote(exe))
        }
        _ => cmd.to_string(),
    }
}

/// `s` as one word for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// `tether serve ARGS` as the binary resolves them.
    pub(super) fn parse(args: &[&str]) -> ServeArgs {
        let matches =
            Cli::command().get_matches_from(std::iter::once("tether").chain(args.iter().copied()));
        let cli = Cli::from_arg_matches(&matches).expect("valid flags");
        cli.serve.resolve(&matches).expect("valid config")
    }

    #[test]
    fn the_host_line_cap_is_its_own_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tether.toml");
        std::fs::write(&file, "max_host_line_bytes = 65536\n").expect("write");
        let file = file.to_string_lossy().into_owned();
        assert_eq!(parse(&[]).max_host_line_bytes, 16 << 20);
        assert_eq!(parse(&["--config", &file]).max_host_line_bytes, 65536);
        let flag = parse(&["--config", &file, "--max-host-line-bytes", "2048"]);
        assert_eq!(flag.max_host_line_bytes, 2048);
        // The client frame cap does not move it.
        assert_eq!(
            parse(&["--max-frame-bytes", "4096"]).max_host_line_bytes,
            16 << 20
        );
    }

    #[test]
    fn the_database_url_comes_from_the_flag_or_the_file_with_its_password_masked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tether.toml");
        std::fs::write(
            &file,
            "database_url = \"postgres://t:pw@db/tether\"\ndatabase_connect_timeout_s = 5\n",
        )
        .expect("write");
        let file = file.to_string_lossy().into_owned();
        let from_file = parse(&["--config", &file]);
        assert_eq!(
            from_file.backend().expect("backend").describe(),
            "postgres://t:***@db/tether"
        );
        assert_eq!(from_file.database_connect_timeout_s, 5);
        let flag = parse(&["--config", &file, "--database-url", "sqlite:///tmp/x.db"]);
        assert_eq!(flag.backend().expect("backend").describe(), "/tmp/x.db");
        assert_eq!(parse(&[]).database_connect_timeout_s, 30);
        // An unknown scheme is bad configuration, named without its password.
        let mut bad = parse(&[]);
        bad.database_url = Some("mysql://t:pw@db/x".into());
        let e = bad.backend().expect_err("refused").to_string();
        assert!(e.contains("mysql://t:***@db/x"), "{e}");
    }

    #[test]
    fn the_cluster_settings_come_from_flags_or_the_file_and_need_postgres() {
        let defaults = parse(&[]);
        assert!(!defaults.cluster);
        assert_eq!(defaults.node_lease_s, 3.0);
        assert_eq!(defaults.forward_timeout_s, 10);
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tether.toml");
        std::fs::write(
            &file,
            "database_url = \"postgres://t:pw@db/tether\"\ncluster = true\nnode_lease_s = 1.5\nforward_timeout_s = 4\n",
        )
        .expect("write");
        let file = file.to_string_lossy().into_owned();
        let node = parse(&["--config", &file]);
        assert!(node.cluster);
        assert_eq!(node.forward_timeout_s, 4);
        let config = node.cluster_config().expect("a lease");
        assert_eq!(config.lease, Duration::from_millis(1500));
        assert!(config.heartbeat_every * 2 <= config.lease);
        assert_eq!(
            parse(&["--config", &file, "--node-lease-s", "6"])
                .cluster_config()
                .expect("a lease")
                .lease,
            Duration::from_secs(6)
        );
        // SQLite is always one gateway; a lease below 200 ms cannot be kept.
        let mut sqlite = parse(&[]);
        sqlite.cluster = true;
        let e = sqlite.check().expect_err("refused").to_string();
        assert!(e.contains("--cluster needs a postgres://"), "{e}");
        let mut short = parse(&["--config", &file]);
        short.node_lease_s = 0.1;
        assert!(short.check().is_err());
    }

    #[test]
    fn a_host_command_starting_with_tether_runs_this_tether() {
        let exe = "/opt/my tether/bin/tether";
        assert_eq!(
            this_tether("tether host --engine echo", exe),
            "'/opt/my tether/bin/tether' host --engine echo"
        );
        assert_eq!(this_tether("  tether", exe), "'/opt/my tether/bin/tether'");
        assert_eq!(
            this_tether("tether\thost", exe),
            "'/opt/my tether/bin/tether'\thost"
        );
        for other in [
            "tethered host",
            "python3 agent.py tether",
            "env X=1 tether host",
            "./tether host",
        ] {
            assert_eq!(this_tether(other, exe), other);
        }
        assert_eq!(
            this_tether("tether host", "/tmp/it's/tether"),
            "'/tmp/it'\\''s/tether' host"
        );
        let args = parse(&[
            "--host-command",
            "tether host --engine command --command 'python3 a.py'",
        ]);
        let argv = args.host_argv().expect("argv");
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(
            argv[2],
            format!(
                "exec '{}' host --engine command --command 'python3 a.py'",
                exe.display()
            )
        );
        assert_eq!(parse(&[]).host_start_deadline_s, 30);
    }

    #[test]
    fn compress_wait_follows_the_design_formula() {
        assert_eq!(parse(&[]).compress_wait(), Duration::from_secs(120));
        assert_eq!(
            parse(&["--compress-ceiling-s", "200"]).compress_wait(),
            Duration::from_secs(230)
        );
        assert_eq!(
            parse(&["--compress-ceiling-s", "900"]).compress_wait(),
            Duration::from_secs(630)
        );
        // The default control wait (30 s) does not shorten it; an explicit one does.
        assert_eq!(
            parse(&["--control-wait-s", "30"]).compress_wait(),
            Duration::from_secs(30)
        );
        assert_eq!(
            parse(&["--control-wait-s", "500"]).compress_wait(),
            Duration::from_secs(120)
        );
    }
}
