//! Opening the store for a gateway: the one place that picks the backend.
//!
//! Everything outside this crate talks to the traits ([`StoreWrite`], [`StoreRead`],
//! [`HandoffStore`]); only this function knows which implementation sits behind them. Today that
//! is always the SQLite file of [`StoreConfig::db_path`]; PostgreSQL (`--database-url`) plugs in
//! here.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::sqlite::{open_sqlite, open_sqlite_writer};
use crate::{HandoffStore, StoreConfig, StoreError, StoreRead, StoreWrite};

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
    /// The store's epoch (same as `reader.epoch()`).
    pub epoch: String,
    /// The writers, for the StoreWriter actor: the first call hands out the writer opened with
    /// the store, every later one opens a new connection on it (never creating the store: a
    /// store that vanished under a running gateway must not silently come back empty).
    pub writers: WriterFactory,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// Opens (creating it if needed, and migrating it) the store `cfg` names.
pub async fn open(cfg: &StoreConfig) -> Result<Store, StoreError> {
    let opened = open_sqlite(cfg).await?;
    let first = Mutex::new(Some(opened.writer));
    let cfg = cfg.clone();
    let writers: WriterFactory = Arc::new(move || {
        // A poisoned lock only means a panic elsewhere; a new connection is as good.
        let reuse = first.lock().ok().and_then(|mut first| first.take());
        let cfg = cfg.clone();
        Box::pin(async move {
            match reuse {
                Some(writer) => Ok(writer),
                None => open_sqlite_writer(&cfg).await,
            }
        })
    });
    Ok(Store {
        reader: opened.reader,
        handoffs: opened.handoffs,
        epoch: opened.epoch,
        writers,
    })
}
