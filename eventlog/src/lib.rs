//! tether's event log: one append-only log for every session's records, each group commit
//! written and `fdatasync`ed once.
//!
//! # Invariants
//!
//! 1. **Durable only when synced.** A commit's appends are told it succeeded only after the
//!    `fdatasync` covering all of its bytes returned `Ok`. One commit, one frame, one write,
//!    one sync.
//! 2. **All or nothing.** A commit is one frame with one checksum over all its records;
//!    recovery keeps a frame whole or drops it whole. Commits are numbered 1, 2, 3, ... in
//!    log order; a frame that does not carry the next number is not part of the log.
//! 3. **A failed sync is never made durable later.** If the write or the sync of a commit
//!    fails, every append in it is refused; the segment is truncated back (best effort) and
//!    sealed at the end of the last good commit, and the next commit, reusing the refused
//!    number, starts a new segment. Nothing reads a segment past its sealed end or past the
//!    first commit of the next segment.
//! 4. **Gap-free per life.** An event record continues its session life's seqs by one (a
//!    life new to the log may start anywhere); an append that does not is refused alone.
//! 5. **Segments.** A commit never straddles two segments. A segment is sealed once it holds
//!    `segment_bytes`: its index file is written, synced and its directory entry synced before
//!    the next segment is created (header synced, then the directory). So a segment that has a
//!    successor always has its index, unless that file was damaged since.
//! 6. **Torn tail or damage.** At open, a frame of the active segment that fails its checksum
//!    with no valid later frame after it is a torn tail (a commit cut by a crash, so never
//!    acknowledged, or the last commit damaged on disk: the two cannot be told apart) and is
//!    cut off and reported; one followed by a valid later frame is damage: opening fails
//!    with the range. In sealed segments every record read is checked against its own
//!    checksum and against the life and seq the index expects; a failure is reported with
//!    its range, never served and never skipped.
//! 7. **Bounded memory.** Memory holds one small entry per session life (its latest seq and
//!    the newest sealed segment holding its events) and the offsets of the active segment's
//!    events (at most a segment's worth), never the sealed segments' positions: a sealed
//!    segment's index is on disk and read on demand. Now and then a sealed segment's index
//!    lists every life (a checkpoint), so opening reads the newest checkpoint, the indexes
//!    after it and the active segment, not the log.
//!
//! # Why our own segments
//!
//! The crates looked at either write every byte more than once (fjall and RocksDB: an LSM
//! tree's own WAL, then the flush and the compactions; redb rewrites B-tree pages as SQLite
//! does), keep memory per stored entry (raft-engine: about 48 bytes per entry in its memory
//! index), or say they are not ready for production (sled, okaywal). What the store needs is
//! small: append a frame, sync it, index it per session: about 2,700 lines with comments and
//! the simulated disk the crash tests run on. See docs/ARCHITECTURE.md, "The event log".
//!
//! # When a commit is made
//!
//! [`CommitPolicy`]: by default an append that finds the writer idle is committed at once,
//! and under load a commit gathers up to 4 ms or 256 KiB; or a commit at most every interval.
//!
//! # Files
//!
//! `NNNNNNNNNN.log` (segments: a header, then commit frames) and `NNNNNNNNNN.idx` (a sealed
//! segment's index and the checkpoint), both in one directory. Formats: `codec.rs` and
//! `index.rs`.

mod codec;
mod error;
pub mod fs;
mod index;
mod log;
mod policy;
mod read;
mod recovery;
mod segment;
pub mod sim;
mod writer;

pub use codec::{Life, Record, RecordKind, MAX_RECORD_BYTES};
pub use error::{Damage, LogError};
pub use log::{Committed, Done, Log, LogOptions, OpenReport, Pending, Position};
pub use policy::CommitPolicy;
pub use recovery::open;
