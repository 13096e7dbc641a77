//! Connections to the server: what the URL says, what every connection is set to, and the
//! writer's lock.
//!
//! The writer's lock, and who holds it, is `connect/lock.rs`.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

use crate::{mask_url, OpenError, PostgresConfig, StoreError};

mod lock;

pub(crate) use lock::node_lock_key;
use lock::{process, take_lock, WriterTag, LOCK_KEY};

/// Longest a single connection attempt may take (an unreachable host may drop SYNs).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything needed to open connections, parsed once from a [`PostgresConfig`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The URL with its password masked, for messages and logs.
    pub url: String,
    options: PgConnectOptions,
    pub connect_timeout: Duration,
    pub statement_timeout: Duration,
    pub in_doubt_wait: Duration,
    pub write_wait: Duration,
    pub read_connections: u32,
    /// How the writer holds the database: as its one gateway, or as a node of a cluster.
    pub lock: WriterLock,
}

/// How a writer connection holds the database (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriterLock {
    /// The database's one gateway: the gateway key, exclusively.
    Gateway,
    /// A node of a cluster: the gateway key shared, and `key` (the node's own) exclusively,
    /// on a connection whose `lock_timeout` and `idle_in_transaction_session_timeout` are these.
    Node {
        key: i64,
        lock_timeout: Duration,
        idle_in_transaction_timeout: Duration,
    },
}

/// Why a connection could not be made.
#[derive(Debug, Clone)]
pub(crate) enum ConnectError {
    /// Worth retrying: refused, timed out, the server starting or shutting down.
    Unreachable(String),
    /// The server said no (credentials, database, permissions): retrying will not help.
    Refused(String),
    /// Another gateway's writer holds the lock.
    Held(String),
    /// A newer writer of this process holds the lock: this one was replaced and must stop.
    Superseded,
    /// Anything else.
    Store(StoreError),
}

impl ConnectError {
    /// As the error an operation gets while the writer cannot connect.
    pub(crate) fn to_store_error(&self, url: &str) -> StoreError {
        match self {
            ConnectError::Unreachable(cause) | ConnectError::Refused(cause) => {
                StoreError::Unavailable(format!("{url}: {cause}"))
            }
            ConnectError::Held(holder) => StoreError::Unavailable(format!(
                "{url} is held by another tether gateway ({holder}); not writing"
            )),
            ConnectError::Superseded => {
                StoreError::Unavailable("this store writer was replaced by a newer one".into())
            }
            ConnectError::Store(e) => e.clone(),
        }
    }

    pub(crate) fn into_open_error(self, url: &str, waited: Duration) -> OpenError {
        let url = url.to_string();
        match self {
            ConnectError::Unreachable(cause) => OpenError::Unreachable { url, waited, cause },
            ConnectError::Refused(cause) => OpenError::Refused { url, cause },
            ConnectError::Held(holder) => OpenError::Held { url, holder },
            ConnectError::Superseded => {
                OpenError::Store(ConnectError::Superseded.to_store_error(&url))
            }
            ConnectError::Store(e) => OpenError::Store(e),
        }
    }
}

impl Settings {
    pub(crate) fn new(cfg: &PostgresConfig) -> Result<Settings, OpenError> {
        let url = mask_url(&cfg.url);
        let bad = |reason: String| OpenError::BadUrl {
            url: url.clone(),
            reason,
        };
        if !(cfg.url.starts_with("postgres://") || cfg.url.starts_with("postgresql://")) {
            return Err(bad("expected postgres://USER@HOST/DB".into()));
        }
        let options = PgConnectOptions::from_str(&cfg.url).map_err(|e| bad(e.to_string()))?;
        Ok(Settings {
            url,
            options,
            connect_timeout: cfg.connect_timeout,
            statement_timeout: cfg.statement_timeout,
            in_doubt_wait: cfg.in_doubt_wait,
            write_wait: cfg.write_wait,
            read_connections: cfg.read_connections.max(1),
            lock: WriterLock::Gateway,
        })
    }

    /// The options every connection of a cluster node adds (module doc): waits on locks and
    /// idle transactions bounded below the lease.
    pub(crate) fn node_options(&self, role: &str) -> Option<PgConnectOptions> {
        let WriterLock::Node {
            lock_timeout,
            idle_in_transaction_timeout,
            ..
        } = self.lock
        else {
            return None;
        };
        Some(
            self.options
                .clone()
                .application_name(&format!("tether {role} {}", process().describe()))
                .options([
                    ("statement_timeout", millis(self.statement_timeout)),
                    ("lock_timeout", millis(lock_timeout)),
                    (
                        "idle_in_transaction_session_timeout",
                        millis(idle_in_transaction_timeout),
                    ),
                ]),
        )
    }

    /// Options of a pooled (reader, handoff) connection.
    pub(crate) fn pool_options(&self, role: &str) -> PgConnectOptions {
        self.options
            .clone()
            .application_name(&format!("tether {role} {}", process().describe()))
            .options([
                ("statement_timeout", millis(self.statement_timeout)),
                ("lock_timeout", millis(self.statement_timeout)),
            ])
    }

    /// One connection attempt, bounded in time.
    pub(crate) async fn connect(
        &self,
        options: &PgConnectOptions,
    ) -> Result<PgConnection, ConnectError> {
        let attempt = ATTEMPT_TIMEOUT.min(self.connect_timeout.max(Duration::from_millis(100)));
        match tokio::time::timeout(attempt, options.connect()).await {
            Err(_) => Err(ConnectError::Unreachable(format!(
                "no answer within {} ms",
                attempt.as_millis()
            ))),
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(classify_connect(e)),
        }
    }

    /// Opens a writer connection and takes the lock on it. `writer` and `conn` number this
    /// process's writers and each writer's connections, so an old connection can be told from
    /// a newer one (see the module doc).
    pub(crate) async fn connect_writer(
        &self,
        writer: u64,
        conn: u64,
    ) -> Result<PgConnection, ConnectError> {
        let me = WriterTag {
            node: matches!(self.lock, WriterLock::Node { .. }),
            nonce: process().nonce,
            writer,
            conn,
        };
        // Keepalives: the server drops a backend whose client vanished (a network cut) within
        // about 25 s, which frees the lock for the gateway that comes back.
        let mut options = self
            .options
            .clone()
            .application_name(&me.application_name())
            .options([
                ("tcp_keepalives_idle", "10".to_string()),
                ("tcp_keepalives_interval", "5".to_string()),
                ("tcp_keepalives_count", "3".to_string()),
                ("statement_timeout", millis(self.statement_timeout)),
            ]);
        options = match self.lock {
            WriterLock::Gateway => {
                options.options([("lock_timeout", millis(self.statement_timeout))])
            }
            WriterLock::Node {
                lock_timeout,
                idle_in_transaction_timeout,
                ..
            } => options.options([
                ("lock_timeout", millis(lock_timeout)),
                (
                    "idle_in_transaction_session_timeout",
                    millis(idle_in_transaction_timeout),
                ),
            ]),
        };
        let mut c = self.connect(&options).await?;
        ensure_durable(&mut c).await.map_err(ConnectError::Store)?;
        match self.lock {
            WriterLock::Gateway => take_lock(&mut c, me, LOCK_KEY, false).await?,
            WriterLock::Node { key, .. } => {
                take_lock(&mut c, me, LOCK_KEY, true).await?;
                take_lock(&mut c, me, key, false).await?;
            }
        }
        Ok(c)
    }
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// Commits must be durable when acknowledged (docs/RELIABILITY.md): a server (or role, or
/// database) configured with `synchronous_commit = off` is overridden for this connection. Any
/// other value (`local`, `on`, `remote_write`, `remote_apply`) already waits for a local flush.
async fn ensure_durable(c: &mut PgConnection) -> Result<(), StoreError> {
    let mode: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(&mut *c)
        .await
        .map_err(super::errors::map_sqlx)?;
    if mode == "off" {
        tracing::warn!(
            "the database has synchronous_commit = off; the writer sets it on for itself"
        );
        sqlx::query("SET synchronous_commit = on")
            .execute(&mut *c)
            .await
            .map_err(super::errors::map_sqlx)?;
    }
    Ok(())
}

/// Classifies an error met while connecting (or on a fresh connection).
pub(crate) fn classify_connect(e: sqlx::Error) -> ConnectError {
    let text = e.to_string();
    match &e {
        sqlx::Error::Database(db) => {
            let state = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match state.as_str() {
                // The server is starting, stopping or full: wait for it.
                "57P01" | "57P02" | "57P03" | "53300" => ConnectError::Unreachable(text),
                // invalid_authorization_specification, invalid_password, invalid_catalog_name
                // (no such database), insufficient_privilege, invalid role.
                s if s.starts_with("28") || s == "3D000" || s == "42501" || s == "42704" => {
                    ConnectError::Refused(text)
                }
                s if s.starts_with("08") => ConnectError::Unreachable(text),
                _ => ConnectError::Store(super::errors::map_sqlx(e)),
            }
        }
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut => {
            ConnectError::Unreachable(text)
        }
        sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => ConnectError::Refused(text),
        _ => ConnectError::Store(super::errors::map_sqlx(e)),
    }
}

/// Closes a connection politely (the server frees its backend, and the lock, at once); a
/// connection that is already broken is simply dropped.
pub(crate) async fn close(c: PgConnection) {
    let _ = tokio::time::timeout(Duration::from_secs(1), c.close()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_any_connection() {
        let bad = Settings::new(&PostgresConfig::new("mysql://u:pw@h/d")).unwrap_err();
        assert!(bad.is_usage());
        assert!(!bad.to_string().contains("pw"), "{bad}");
        let bad = Settings::new(&PostgresConfig::new("postgres://u:pw@h:notaport/d")).unwrap_err();
        assert!(matches!(bad, OpenError::BadUrl { .. }), "{bad:?}");
        assert!(!bad.to_string().contains(":pw"), "{bad}");
        assert!(Settings::new(&PostgresConfig::new("postgres://u:pw@h/d")).is_ok());
    }
}
