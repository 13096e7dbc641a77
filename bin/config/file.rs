//! The config file (`--config tether.toml`): every key optional and named
//! like its flag, filling in only what flags and env left at a default;
//! and its `[profiles.NAME.engine]` tables, which SIGHUP re-reads.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::ArgMatches;
use serde::Deserialize;
use tether_store::{PageSize, Synchronous};

use super::{parse_listen, LogFormat, ProfileEngineMap, ServeArgs};

/// `listen = ":0"` in the file means what `--listen :0` means.
fn listen_in_file<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen(&s).map(Some).map_err(serde::de::Error::custom)
}

/// One `[profiles.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProfile {
    engine: Option<toml::Table>,
    retention: Option<super::retention::FileRetention>,
}

/// The config file: every key optional, named like the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    #[serde(default, deserialize_with = "listen_in_file")]
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    database_connect_timeout_s: Option<u64>,
    cluster: Option<bool>,
    node_lease_s: Option<f64>,
    forward_timeout_s: Option<u64>,
    heartbeat_s: Option<u64>,
    ring_events: Option<usize>,
    outbox_frames: Option<usize>,
    max_frame_bytes: Option<usize>,
    max_replay_events: Option<u64>,
    max_resume_messages: Option<u64>,
    max_title_bytes: Option<usize>,
    max_list_bytes: Option<usize>,
    synchronous: Option<Synchronous>,
    sqlite_page_size: Option<PageSize>,
    commit_window_us: Option<u64>,
    log_format: Option<LogFormat>,
    hosts: Option<usize>,
    host_command: Option<String>,
    host_heartbeat_s: Option<u64>,
    host_restarts: Option<u32>,
    host_restart_period_s: Option<u64>,
    host_start_deadline_s: Option<u64>,
    max_host_line_bytes: Option<usize>,
    host_max_turns: Option<usize>,
    max_queued: Option<usize>,
    turn_deadline_s: Option<u64>,
    control_wait_s: Option<u64>,
    compress_ceiling_s: Option<u64>,
    late_ack_ttl_s: Option<u64>,
    late_ack_cap: Option<usize>,
    rate_limit_rps: Option<u32>,
    orphan_grace_s: Option<u64>,
    activity_stale_s: Option<u64>,
    session_ttl_s: Option<u64>,
    max_live_sessions: Option<usize>,
    max_peers_per_session: Option<usize>,
    max_connections: Option<usize>,
    handshake_timeout_s: Option<u64>,
    idle_timeout_s: Option<u64>,
    allow_origin: Option<Vec<String>>,
    token: Option<Vec<String>>,
    jwt_secret_file: Option<PathBuf>,
    jwt_public_key_file: Option<PathBuf>,
    jwt_jwks_url: Option<String>,
    jwt_jwks_refetch_s: Option<u64>,
    jwt_algorithms: Option<Vec<String>>,
    jwt_leeway_s: Option<u64>,
    jwt_issuer: Option<String>,
    jwt_audience: Option<String>,
    jwt_profile_claim: Option<String>,
    token_expiring_s: Option<u64>,
    profiles: Option<std::collections::HashMap<String, FileProfile>>,
    /// `[limits.PROFILE]` (`[limits."*"]`: every profile), `config/limits.rs`.
    pub(super) limits:
        Option<std::collections::HashMap<String, tether_actors::profile_limits::ProfileLimits>>,
    retention: Option<super::retention::FileRetention>,
}

impl ServeArgs {
    /// Takes each key of `file` whose flag came from its default (not
    /// from the command line or the environment).
    pub(super) fn apply_file(
        &mut self,
        file: FileConfig,
        matches: &ArgMatches,
    ) -> anyhow::Result<()> {
        let auth = file.auth();
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
            database_connect_timeout_s,
            cluster,
            node_lease_s,
            forward_timeout_s,
            heartbeat_s,
            ring_events,
            outbox_frames,
            max_frame_bytes,
            max_replay_events,
            max_resume_messages,
            max_title_bytes,
            max_list_bytes,
            synchronous,
            sqlite_page_size,
            commit_window_us,
            log_format,
            hosts,
            host_heartbeat_s,
            host_restarts,
            host_restart_period_s,
            host_start_deadline_s,
            max_host_line_bytes,
            host_max_turns,
            max_queued,
            turn_deadline_s,
            compress_ceiling_s,
            late_ack_ttl_s,
            late_ack_cap,
            rate_limit_rps,
            orphan_grace_s,
            activity_stale_s,
            session_ttl_s,
            max_live_sessions,
            max_peers_per_session,
            max_connections,
            handshake_timeout_s,
            idle_timeout_s
        );
        if let Some(v) = file.control_wait_s {
            if from_default("control_wait_s") {
                self.control_wait_s = v;
                self.control_wait_explicit = true;
            }
        }
        if self.database_url.is_none() {
            self.database_url = file.database_url;
        }
        if self.host_command.is_none() {
            self.host_command = file.host_command;
        }
        if self.allow_origin.is_empty() {
            self.allow_origin = file.allow_origin.unwrap_or_default();
        }
        self.apply_file_auth(auth);
        let retention = file
            .profiles
            .iter()
            .flatten()
            .filter_map(|(name, p)| Some((name.clone(), p.retention.clone()?)))
            .collect();
        self.retention
            .apply_file(file.retention, retention, matches);
        self.profile_engines = engines_of(file.profiles)?;
        Ok(())
    }
}

impl FileConfig {
    /// The token settings (`super::auth`).
    pub(super) fn auth(&self) -> super::auth::FileAuth {
        super::auth::FileAuth {
            token: self.token.clone(),
            jwt_secret_file: self.jwt_secret_file.clone(),
            jwt_public_key_file: self.jwt_public_key_file.clone(),
            jwt_jwks_url: self.jwt_jwks_url.clone(),
            jwt_jwks_refetch_s: self.jwt_jwks_refetch_s,
            jwt_algorithms: self.jwt_algorithms.clone(),
            jwt_leeway_s: self.jwt_leeway_s,
            jwt_issuer: self.jwt_issuer.clone(),
            jwt_audience: self.jwt_audience.clone(),
            jwt_profile_claim: self.jwt_profile_claim.clone(),
            token_expiring_s: self.token_expiring_s,
        }
    }
}

impl ServeArgs {
    /// The token configuration as the config file now says (SIGHUP):
    /// flags and the environment still win over it.
    pub fn reload_auth(&self) -> anyhow::Result<tether_gateway::AuthConfig> {
        let mut fresh = self.clone();
        if let Some(path) = &self.config {
            fresh.apply_file_auth(read_file(path)?.auth());
        }
        fresh.auth_config()
    }

    /// The profile limits as the config file now says (SIGHUP): the
    /// `--profile-limit` flags still win over it.
    pub fn reload_limits(&self) -> anyhow::Result<tether_actors::profile_limits::LimitTable> {
        let file = match &self.config {
            Some(path) => read_file(path)?.limits.unwrap_or_default(),
            None => Default::default(),
        };
        super::limits::table(&self.profile_limit, file)
    }
}

/// Re-reads only the profiles' engine configs (the SIGHUP reload).
pub fn read_profile_engines(path: &Path) -> anyhow::Result<ProfileEngineMap> {
    engines_of(read_file(path)?.profiles)
}

fn engines_of(
    profiles: Option<std::collections::HashMap<String, FileProfile>>,
) -> anyhow::Result<ProfileEngineMap> {
    let mut out = ProfileEngineMap::new();
    for (name, profile) in profiles.unwrap_or_default() {
        if let Some(engine) = profile.engine {
            match serde_json::to_value(engine)? {
                serde_json::Value::Object(map) => {
                    out.insert(name, map);
                }
                _ => bail!("[profiles.{name}.engine] must be a table"),
            }
        }
    }
    Ok(out)
}

pub(super) fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}
