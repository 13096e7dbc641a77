//! Where a session's events are: in memory, one small entry per session life plus the offsets
//! of its events in the active segment; on disk, a sealed segment's index file.
//!
//! A sealed segment's index (`NNNNNNNNNN.idx`, written once, when the segment is sealed) lists
//! the lives with events in the segment; a *full* one (the checkpoint) lists every life the
//! log knows. So opening reads the newest full index, the partial ones after it and the
//! active segment, never the sealed segments themselves. An index is full when the list of
//! every life is small beside a segment (at most a sixteenth of it), when half the lives or
//! more have events in the segment anyway, and otherwise every [`FULL_EVERY`] segments: a
//! checkpoint costs 64 bytes per life, which at 100,000 lives every 64 MiB segment would be a
//! tenth more bytes written.
//!
//! ```text
//! header (48):  magic "TLOGIDX1" | segment u32 | entries u32 | offsets u32 | full u32
//!               | segment_end u64 | next_commit u64 | crc u32 (of the 40 bytes before) | 0 u32
//! entries:      64 bytes each, sorted by (id, generation):
//!               id [16] | generation u32 | latest_seq u64 | first_seq u64 | count u32
//!               | offsets_from u32 | prev u32 | prev_entry u32 | head u32 | head_entry u32
//!               | crc u32 (of the 60 bytes before)
//! offsets:      u32 each: the file offset of every event of the segment, grouped by entry
//! trailer:      crc u32 of everything before it
//! ```
//!
//! `head` is the newest sealed segment up to this one holding events of the life (`NONE` if
//! none); `prev`, for a life with events here, the one before this; `head_entry` and
//! `prev_entry` are the life's entry numbers in those segments' indexes. So a read walks back
//! from the head kept in memory through `prev`, reading one entry per segment, with no
//! search (a search by id only if an entry number does not hold the life).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::codec::{crc32c, Life};
use crate::error::{Damage, LogError};
use crate::fs::{read_exact_at, ReadFile};

pub(crate) const NONE: u32 = u32::MAX;
const MAGIC: [u8; 8] = *b"TLOGIDX1";
const HEADER: usize = 48;
const ENTRY: usize = 64;
/// A full index at least every this many segments.
pub(crate) const FULL_EVERY: u32 = 16;

/// Whether the index of segment `segment`, whose events are of `here` of the `lives`, lists
/// every life: when that costs little more than listing its own (half of them or more), when
/// the list is small beside the segment, and every [`FULL_EVERY`] segments.
pub(crate) fn full_index(
    segment: u32,
    lives: &HashMap<Life, LifeState>,
    segment_bytes: u64,
) -> bool {
    let here = lives.values().filter(|s| !s.active.is_empty()).count();
    segment.is_multiple_of(FULL_EVERY)
        || here * 2 >= lives.len()
        || (lives.len() as u64) * (ENTRY as u64) <= segment_bytes / 16
}

/// What memory holds for one session life.
#[derive(Debug, Clone)]
pub(crate) struct LifeState {
    /// Its last event's seq.
    pub latest_seq: u64,
    /// The newest sealed segment holding its events, or [`NONE`].
    pub head: u32,
    /// Its entry number in `head`'s index.
    pub head_entry: u32,
    /// Seq of the first of `active`.
    pub active_first: u64,
    /// Offsets of its events in the active segment, seq `active_first + i`.
    pub active: Vec<u32>,
}

impl Default for LifeState {
    /// A life with no events yet, in no sealed segment.
    fn default() -> Self {
        LifeState {
            latest_seq: 0,
            head: NONE,
            head_entry: NONE,
            active_first: 0,
            active: Vec::new(),
        }
    }
}

impl LifeState {
    /// Records an event written at `offset` of the active segment.
    pub(crate) fn push(&mut self, seq: u64, offset: u64) {
        if self.active.is_empty() {
            self.active_first = seq;
        }
        self.active.push(offset as u32);
        self.latest_seq = seq;
    }
}

/// One life's entry in a sealed segment's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub life: Life,
    pub latest_seq: u64,
    pub first_seq: u64,
    pub count: u32,
    pub offsets_from: u32,
    pub prev: u32,
    pub prev_entry: u32,
    pub head: u32,
    pub head_entry: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn decode_entry(b: &[u8]) -> Option<Entry> {
    if crc32c(&[&b[..60]]) != u32_at(b, 60) {
        return None;
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&b[..16]);
    Some(Entry {
        life: Life {
            id,
            generation: u32_at(b, 16),
        },
        latest_seq: u64_at(b, 20),
        first_seq: u64_at(b, 28),
        count: u32_at(b, 36),
        offsets_from: u32_at(b, 40),
        prev: u32_at(b, 44),
        prev_entry: u32_at(b, 48),
        head: u32_at(b, 52),
        head_entry: u32_at(b, 56),
    })
}

/// The bytes of segment `segment`'s index, sealing the active runs of `lives`: every life
/// with events in the active segment gets `head = segment` and its entry number here, which
/// the caller applies to memory with [`apply_seal`] once the file is durable.
pub(crate) fn encode_index(
    segment: u32,
    segment_end: u64,
    next_commit: u64,
    lives: &HashMap<Life, LifeState>,
    full: bool,
) -> (Vec<u8>, Vec<(Life, u32)>) {
    let mut sorted: Vec<(&Life, &LifeState)> = lives
        .iter()
        .filter(|(_, s)| full || !s.active.is_empty())
        .collect();
    sorted.sort_unstable_by_key(|(life, _)| **life);
    let offsets: usize = sorted.iter().map(|(_, s)| s.active.len()).sum();
    let mut buf = Vec::with_capacity(HEADER + sorted.len() * ENTRY + offsets * 4 + 4);
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(&segment.to_le_bytes());
    buf.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    buf.extend_from_slice(&(offsets as u32).to_le_bytes());
    buf.extend_from_slice(&u32::from(full).to_le_bytes());
    buf.extend_from_slice(&segment_end.to_le_bytes());
    buf.extend_from_slice(&next_commit.to_le_bytes());
    let crc = crc32c(&[&buf[..40]]);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    let mut from = 0u32;
    let mut sealed = Vec::new();
    for (i, (life, state)) in sorted.iter().enumerate() {
        let here = !state.active.is_empty();
        let i = i as u32;
        if here {
            sealed.push((**life, i));
        }
        let start = buf.len();
        buf.extend_from_slice(&life.id);
        buf.extend_from_slice(&life.generation.to_le_bytes());
        buf.extend_from_slice(&state.latest_seq.to_le_bytes());
        buf.extend_from_slice(&(if here { state.active_first } else { 0 }).to_le_bytes());
        buf.extend_from_slice(&(state.active.len() as u32).to_le_bytes());
        buf.extend_from_slice(&from.to_le_bytes());
        buf.extend_from_slice(&state.head.to_le_bytes());
        buf.extend_from_slice(&state.head_entry.to_le_bytes());
        let (head, head_entry) = if here {
            (segment, i)
        } else {
            (state.head, state.head_entry)
        };
        buf.extend_from_slice(&head.to_le_bytes());
        buf.extend_from_slice(&head_entry.to_le_bytes());
        let crc = crc32c(&[&buf[start..]]);
        buf.extend_from_slice(&crc.to_le_bytes());
        from += state.active.len() as u32;
    }
    for (_, state) in &sorted {
        for off in &state.active {
            buf.extend_from_slice(&off.to_le_bytes());
        }
    }
    let crc = crc32c(&[&buf]);
    buf.extend_from_slice(&crc.to_le_bytes());
    (buf, sealed)
}

/// Memory after segment `segment`'s index is durable: the lives sealed in it have their head
/// there, and no active events.
pub(crate) fn apply_seal(
    segment: u32,
    sealed: &[(Life, u32)],
    lives: &mut HashMap<Life, LifeState>,
) {
    for (life, entry) in sealed {
        if let Some(s) = lives.get_mut(life) {
            s.head = segment;
            s.head_entry = *entry;
            s.active = Vec::new();
        }
    }
}

/// A sealed segment's index, opened for lookups (entries are read from the file on demand).
pub(crate) struct IndexFile {
    file: Arc<dyn ReadFile>,
    path: std::path::PathBuf,
    pub entries: u32,
    /// Whether it lists every life (a checkpoint).
    pub full: bool,
    pub segment_end: u64,
    pub next_commit: u64,
}

impl IndexFile {
    /// Opens an index, checking its header only.
    pub(crate) fn open(
        file: Arc<dyn ReadFile>,
        path: &Path,
        segment: u32,
    ) -> Result<Self, LogError> {
        let mut h = [0u8; HEADER];
        read_exact_at(&*file, &mut h, 0).map_err(|_| damaged(path, 0, HEADER, "index header"))?;
        if h[..8] != MAGIC || crc32c(&[&h[..40]]) != u32_at(&h, 40) || u32_at(&h, 8) != segment {
            return Err(damaged(path, 0, HEADER, "index header fails its checksum"));
        }
        Ok(IndexFile {
            file,
            path: path.to_owned(),
            entries: u32_at(&h, 12),
            full: u32_at(&h, 20) != 0,
            segment_end: u64_at(&h, 24),
            next_commit: u64_at(&h, 32),
        })
    }

    /// Reads the whole index and checks its trailer: the checkpoint read at open.
    pub(crate) fn load_all(&self) -> Result<Vec<Entry>, LogError> {
        let len = self.file.size().map_err(LogError::io("reading an index"))? as usize;
        let mut all = vec![0u8; len];
        read_exact_at(&*self.file, &mut all, 0).map_err(LogError::io("reading an index"))?;
        let expect = HEADER + self.entries as usize * ENTRY;
        if len < expect + 4 || crc32c(&[&all[..len - 4]]) != u32_at(&all, len - 4) {
            return Err(damaged(&self.path, 0, len, "index fails its checksum"));
        }
        (0..self.entries as usize)
            .map(|i| {
                let at = HEADER + i * ENTRY;
                decode_entry(&all[at..at + ENTRY])
                    .ok_or_else(|| damaged(&self.path, at, ENTRY, "index entry"))
            })
            .collect()
    }

    /// Entry number `i`.
    pub(crate) fn entry(&self, i: u32) -> Result<Entry, LogError> {
        let at = HEADER + i as usize * ENTRY;
        let mut b = [0u8; ENTRY];
        read_exact_at(&*self.file, &mut b, at as u64)
            .map_err(|_| damaged(&self.path, at, ENTRY, "index entry cut short"))?;
        decode_entry(&b)
            .ok_or_else(|| damaged(&self.path, at, ENTRY, "index entry fails its checksum"))
    }

    /// The entry of `life`: entry number `hint` if it holds the life, else by binary search
    /// over the sorted entries.
    pub(crate) fn lookup(&self, life: &Life, hint: u32) -> Result<Option<Entry>, LogError> {
        if hint < self.entries {
            let e = self.entry(hint)?;
            if e.life == *life {
                return Ok(Some(e));
            }
        }
        self.find(life)
    }

    /// The entry of `life`, by binary search over the sorted entries.
    pub(crate) fn find(&self, life: &Life) -> Result<Option<Entry>, LogError> {
        let (mut lo, mut hi) = (0u32, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.entry(mid)?;
            match e.life.cmp(life) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(e)),
            }
        }
        Ok(None)
    }

    /// `n` event offsets from position `from` of the offsets table.
    pub(crate) fn offsets(&self, from: u32, n: usize) -> Result<Vec<u32>, LogError> {
        let at = HEADER + self.entries as usize * ENTRY + from as usize * 4;
        let mut b = vec![0u8; n * 4];
        read_exact_at(&*self.file, &mut b, at as u64)
            .map_err(|_| damaged(&self.path, at, n * 4, "index offsets cut short"))?;
        Ok(b.chunks_exact(4).map(|c| u32_at(c, 0)).collect())
    }
}

fn damaged(path: &Path, at: usize, len: usize, what: &'static str) -> LogError {
    LogError::Damaged(Damage {
        file: path.to_owned(),
        start: at as u64,
        end: (at + len) as u64,
        what,
    })
}
