//! `tether serve` settings: flags, `TETHER_*` environment variables and an
//! optional `tether.toml`, in that order of precedence.
//!
//! clap handles flags and env; the file fills in whatever clap took from a
//! default. Bad configuration is reported by the caller with exit status 64.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, ValueEnum};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    Normal,
    Full,
}

/// Flags of `tether serve`. Every one is also `TETHER_<NAME>` and a key of
/// the config file (snake_case).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (HTTP and WebSocket).
    #[arg(long, env = "TETHER_LISTEN", default_value = "127.0.0.1:7878")]
    pub listen: SocketAddr,
    /// Directory holding tether.db.
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    pub data_dir: PathBuf,
    /// Store URL; `sqlite://PATH` (default: DATA_DIR/tether.db).
    #[arg(long, env = "TETHER_DATABASE_URL")]
    pub database_url: Option<String>,
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
    /// SQLite durability: normal (WAL, fsync at checkpoints) or full.
    #[arg(long, env = "TETHER_SYNCHRONOUS", value_enum, default_value = "normal")]
    pub synchronous: SyncMode,
    /// Log format on stderr.
    #[arg(long, env = "TETHER_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// The config file: every key optional, named like the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    heartbeat_s: Option<u64>,
    ring_events: Option<usize>,
    outbox_frames: Option<usize>,
    max_frame_bytes: Option<usize>,
    max_replay_events: Option<u64>,
    max_resume_messages: Option<u64>,
    synchronous: Option<SyncMode>,
    log_format: Option<LogFormat>,
}

impl ServeArgs {
    /// Applies the config file (if any) under flags and env, then checks.
    pub fn resolve(mut self, matches: &ArgMatches) -> anyhow::Result<Self> {
        if let Some(path) = self.config.clone() {
            let file = read_file(&path)?;
            let from_default = |id: &str| {
                !matches!(
                    matches.value_source(id),
                    Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable)
                )
            };
            macro_rules! fill {
                ($($field:ident),*) => {$(
                    if let Some(v) = file.$field {
                        if from_default(stringify!($field)) {
                            self.$field = v;
                        }
                    }
                )*};
            }
            fill!(
                listen,
                data_dir,
                heartbeat_s,
                ring_events,
                outbox_frames,
                max_frame_bytes,
                max_replay_events,
                max_resume_messages,
                synchronous,
                log_format
            );
            if self.database_url.is_none() {
                self.database_url = file.database_url;
            }
        }
        self.check()?;
        Ok(self)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.max_frame_bytes < 1024 {
            bail!("--max-frame-bytes must be at least 1024");
        }
        if self.outbox_frames == 0 {
            bail!("--outbox-frames must be at least 1");
        }
        if self.heartbeat_s == 0 {
            bail!("--heartbeat-s must be at least 1");
        }
        if !self.listen.ip().is_loopback() && !self.stdio {
            // Tokens arrive with profiles; until then only loopback peers.
            bail!(
                "refusing to listen on non-loopback address {} without tokens",
                self.listen
            );
        }
        self.db_path().map(|_| ())
    }

    /// The SQLite file the store lives in.
    pub fn db_path(&self) -> anyhow::Result<PathBuf> {
        match &self.database_url {
            None => Ok(self.data_dir.join("tether.db")),
            Some(url) => match url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
            {
                Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
                _ if url.starts_with("postgres") => {
                    bail!("PostgreSQL is not supported by this build yet (use sqlite://PATH)")
                }
                _ => bail!("unsupported --database-url {url:?} (expected sqlite://PATH)"),
            },
        }
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}
