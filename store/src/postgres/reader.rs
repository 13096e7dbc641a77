//! The PostgreSQL store's reads: the shared [`Reader`] over a pool of connections, whose
//! planner needs no hints. The pool replaces connections that a server restart broke by
//! itself (each is checked before use); a read while the server is down fails after the
//! pool's acquire timeout with [`crate::StoreError::Unavailable`] (5072).

use sqlx::postgres::{PgPool, Postgres};

use crate::reader::Reader;
use crate::reads::IndexHints;

use super::errors::map_sqlx;

pub(crate) type PgReader = Reader<Postgres>;

pub(crate) fn new(pool: PgPool, epoch: String) -> PgReader {
    Reader::new(pool, epoch, &IndexHints::NONE, map_sqlx, ())
}
