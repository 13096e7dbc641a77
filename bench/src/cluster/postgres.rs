//! The PostgreSQL side of a run: a database of the run's own, and the
//! server's processes, whose CPU time is part of the cost.
//!
//! `--database-url` names a server whose user may create databases; each
//! run creates a fresh database there (so the nodes start from an empty
//! schema, and a run never sees another run's nodes) and drops it after.
//!
//! The server's processes are found from the inside: `pg_backend_pid()`
//! is a backend, its parent is the postmaster, and the postmaster's
//! descendants are every backend (the nodes' pools and listeners, other
//! clients' too) and the background processes (WAL writer, checkpointer,
//! …). That works only when the server runs on this machine; otherwise
//! its cost is reported as unknown.

use anyhow::Context;
use sqlx::{Connection, PgConnection};
use tether_store::testing::TestDatabase;

use crate::load::proc;

/// The run's database (dropped with this) and the server's postmaster.
pub struct RunDatabase {
    db: TestDatabase,
    /// `None` when the server is not a local process.
    pub postmaster: Option<u32>,
}

impl RunDatabase {
    pub async fn create(server_url: &str) -> anyhow::Result<RunDatabase> {
        let server = server_url.to_owned();
        // `TestDatabase` blocks and panics on a refusal; a thread of its own
        // turns both into an error here.
        let db = tokio::task::spawn_blocking(move || TestDatabase::create_blocking(&server))
            .await
            .context("could not create the run's database (is --database-url right?)")?;
        let mut conn = PgConnection::connect(&db.url)
            .await
            .context("connect to the run's database")?;
        let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut conn)
            .await?;
        let postmaster = u32::try_from(backend).ok().and_then(parent_of);
        let _ = conn.close().await;
        Ok(RunDatabase { db, postmaster })
    }

    pub fn url(&self) -> &str {
        &self.db.url
    }

    /// CPU seconds of every process of the server so far (postmaster and
    /// live descendants), or `None` when it is not local.
    pub fn cpu_s(&self) -> Option<f64> {
        let s = proc::sample(Some(self.postmaster?));
        Some(s.server_cpu_s + s.children_cpu_s)
    }
}

/// The parent pid of a local process whose command is `postgres`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    if !head.contains("(postgres") {
        return None;
    }
    rest.split_whitespace().nth(1)?.parse().ok()
}
