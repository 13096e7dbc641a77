//! Opening the store for a gateway: the one place that picks the backend.
//!
//! Everything outside this crate talks to the traits ([`StoreWrite`], [`StoreRead`],
//! [`HandoffStore`]); only this function knows which implementation sits behind them: that
//! is the SQLite file of [`StoreConfig::db_path`] or the PostgreSQL database of
//! `--database-url postgres://…` ([`Backend`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::postgres::{open_postgres, open_postgres_writer};
use crate::served::Served;
use crate::sqlite::{open_sqlite, open_sqlite_writer};
use crate::{
    mask_url, HandoffStore, LockError, OpenError, Opened, PageSize, PostgresConfig, StoreConfig,
    StoreErase, StoreError, StoreLock, StoreRead, StoreWrite, Synchronous,
};

/// Which store a gateway opens: the SQLite file (the default, in the data directory) or a
/// PostgreSQL database. Built from `--database-url` by [`Backend::from_url`]; the gateway never
/// looks inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file.
    Sqlite(StoreConfig),
    /// A PostgreSQL database.
    Postgres(PostgresConfig),
}

impl Backend {
    /// The SQLite file at `path`, with the defaults.
    pub fn sqlite(path: impl Into<PathBuf>) -> Backend {
        Backend::Sqlite(StoreConfig::new(path))
    }

    /// `sqlite://PATH` (or `sqlite:PATH`), or `postgres://…` / `postgresql://…`. Anything else
    /// is a usage error naming the URL (password masked).
    pub fn from_url(url: &str) -> Result<Backend, OpenError> {
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(OpenError::BadUrl {
                    url: url.to_string(),
                    reason: "no path after sqlite://".into(),
                });
            }
            return Ok(Backend::sqlite(path));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Backend::Postgres(PostgresConfig::new(url)));
        }
        Err(OpenError::BadUrl {
            url: mask_url(url),
            reason: "expected sqlite://PATH or postgres://USER@HOST/DB".into(),
        })
    }

    /// Sets SQLite's durability (a PostgreSQL commit is always durable when acknowledged).
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Backend {
        if let Backend::Sqlite(cfg) = &mut self {
            cfg.synchronous = synchronous;
        }
        self
    }

    /// Sets the page size a new SQLite file is made with (an existing file keeps its own; no
    /// effect on PostgreSQL).
    pub fn with_page_size(mut self, page_size: PageSize) -> Backend {
        if let Backend::Sqlite(cfg) = &mut self {
            cfg.page_size = page_size;
        }
        self
    }

    /// Sets how long a database server that cannot be reached is waited for (no effect on an
    /// embedded file).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Backend {
        if let Backend::Postgres(cfg) = &mut self {
            cfg.connect_timeout = timeout;
        }
        self
    }

    /// Records what the store held in `dir` (`DATA_DIR/tether.served`), so that a store found
    /// older than the one this data directory served gets a new epoch when it is opened
    /// (PROTOCOL.md Part 4, "History that went backwards").
    pub fn with_served_in(mut self, dir: &Path) -> Backend {
        let path = Some(dir.join(crate::served::SERVED_FILE));
        match &mut self {
            Backend::Sqlite(cfg) => cfg.served = path,
            Backend::Postgres(cfg) => cfg.served = path,
        }
        self
    }

    /// What to call the store in messages and logs: the file's path, or the URL with its
    /// password masked.
    pub fn describe(&self) -> String {
        match self {
            Backend::Sqlite(cfg) => cfg.db_path.display().to_string(),
            Backend::Postgres(cfg) => mask_url(&cfg.url),
        }
    }

    /// The directory on this machine where the store keeps its files, if it keeps any here
    /// (readiness checks its free space); `None` for a database server.
    pub fn local_dir(&self) -> Option<&Path> {
        match self {
            Backend::Sqlite(cfg) => cfg
                .db_path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty()),
            Backend::Postgres(_) => None,
        }
    }
}

impl From<StoreConfig> for Backend {
    fn from(cfg: StoreConfig) -> Self {
        Backend::Sqlite(cfg)
    }
}

impl From<&StoreConfig> for Backend {
    fn from(cfg: &StoreConfig) -> Self {
        Backend::Sqlite(cfg.clone())
    }
}

impl From<&Backend> for Backend {
    fn from(backend: &Backend) -> Self {
        backend.clone()
    }
}

/// Opens a writer on an already opened store: what the StoreWriter actor calls when it starts
/// and again each time it is restarted (its writer went down with it).
pub type WriterFactory = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Box<dyn StoreWrite>, StoreError>> + Send>>
        + Send
        + Sync,
>;

/// A store opened for a gateway.
pub struct Store {
    /// The read side, shared.
    pub reader: Arc<dyn StoreRead>,
    /// The handoff queue, shared.
    pub handoffs: Arc<dyn HandoffStore>,
    /// Deletion and retention, shared.
    pub eraser: Arc<dyn StoreErase>,
    /// The store's epoch (same as `reader.epoch()`).
    pub epoch: String,
    /// The writers, for the StoreWriter actor: the first call hands out the writer opened with
    /// the store, every later one opens a new connection on it (never creating the store: a
    /// store that vanished under a running gateway must not silently come back empty).
    pub writers: WriterFactory,
    /// The SQLite file's lock, held as long as the store is (a PostgreSQL store's lock lives
    /// on its writer's connection).
    _lock: Option<StoreLock>,
    /// What this data directory saw the store hold, kept up to date while it is open.
    _served: Option<Arc<Served>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// Opens (creating it if needed, and migrating it) the store `backend` names, and takes its
/// lock: one gateway per store. A second gateway gets [`OpenError::Held`].
pub async fn open(backend: impl Into<Backend>) -> Result<Store, OpenError> {
    match backend.into() {
        Backend::Sqlite(cfg) => {
            let lock = lock_sqlite(&cfg).await?;
            let opened = open_sqlite(&cfg).await?;
            let served = cfg.served.clone();
            let cfg = cfg.clone();
            Ok(store(opened, served, Some(lock), move || {
                let cfg = cfg.clone();
                Box::pin(async move { open_sqlite_writer(&cfg).await })
            }))
        }
        Backend::Postgres(cfg) => {
            let opened = open_postgres(&cfg).await?;
            let served = cfg.served.clone();
            Ok(store(opened, served, None, move || {
                let cfg = cfg.clone();
                Box::pin(async move { open_postgres_writer(&cfg).await })
            }))
        }
    }
}

/// The store of `opened`, whose writers (`opened.writer` first, then `open`'s) are counted
/// into `served` when there is one.
fn store(
    opened: Opened,
    served: Option<PathBuf>,
    lock: Option<StoreLock>,
    open: impl Fn() -> WriterFuture + Send + Sync + 'static,
) -> Store {
    let Opened {
        writer,
        reader,
        handoffs,
        eraser,
        epoch,
        held,
    } = opened;
    let served = served.map(|path| Arc::new(Served::start(path, epoch.clone(), held)));
    Store {
        reader,
        handoffs,
        eraser,
        epoch,
        writers: factory(writer, served.clone(), open),
        _lock: lock,
        _served: served,
    }
}

type WriterFuture = Pin<Box<dyn Future<Output = Result<Box<dyn StoreWrite>, StoreError>> + Send>>;

/// The first call hands out `first`; every later one calls `open`. Each is counted into
/// `served` when there is one.
pub(crate) fn factory(
    first: Box<dyn StoreWrite>,
    served: Option<Arc<Served>>,
    open: impl Fn() -> WriterFuture + Send + Sync + 'static,
) -> WriterFactory {
    let first = Mutex::new(Some(first));
    let open = Arc::new(open);
    Arc::new(move || {
        // A poisoned lock only means a panic elsewhere; a new connection is as good.
        let first = first.lock().ok().and_then(|mut first| first.take());
        let served = served.clone();
        let open = open.clone();
        Box::pin(async move {
            let writer = match first {
                Some(writer) => writer,
                None => open().await?,
            };
            Ok(match &served {
                Some(served) => served.counted(writer),
                None => writer,
            })
        })
    })
}

/// Locks the SQLite file itself: a gateway started with another `--data-dir` but this database
/// (`--database-url sqlite://…`) must be refused too. The file's directory is created first.
async fn lock_sqlite(cfg: &StoreConfig) -> Result<StoreLock, OpenError> {
    if let Some(dir) = cfg.db_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await.map_err(|e| {
            OpenError::Store(StoreError::Unavailable(format!(
                "create {}: {e}",
                dir.display()
            )))
        })?;
    }
    StoreLock::file(&cfg.db_path).map_err(|e| match e {
        LockError::Held { path, pid } => OpenError::Held {
            url: path.display().to_string(),
            holder: pid.map_or_else(|| "pid unknown".into(), |pid| format!("pid {pid}")),
        },
        LockError::Io { .. } => OpenError::Store(StoreError::Unavailable(e.to_string())),
    })
}
