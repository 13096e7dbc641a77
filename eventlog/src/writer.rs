//! The writer thread: one group commit at a time, written and `fdatasync`ed once, and the
//! segment roll.
//!
//! A commit is durable, and its appends told so, only after its sync returned `Ok`. If the
//! write or the sync fails, every append of the commit is refused, and the writer rolls away
//! from the failed bytes before taking anything else: it truncates the segment back to the
//! last good commit (best effort: after a failed sync the kernel may still write those
//! pages), seals it there (its index records that end) and starts a new segment whose header
//! says the next commit reuses the refused commit's number. Opening trusts the index's end
//! and never scans a segment past the first commit of the next one, so the refused bytes are
//! never read, whether or not they reached the disk. If even that roll fails, the log stops
//! taking commits ([`LogError::Poisoned`]) until it is opened again.

use std::collections::HashMap;
use std::io;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use crate::codec::{
    begin_frame, encode_record, encode_segment_header, finish_frame, Life, Record, RecordKind,
    MAX_RECORD_BYTES, SEGMENT_HEADER,
};
use crate::error::LogError;
use crate::fs::LogFile;
use crate::index::{apply_seal, encode_index, full_index, LifeState};
use crate::log::{lock, Committed, Done, Position, Shared};
use crate::policy::{CommitPolicy, Gatherer};
use crate::segment::{index_path, segment_path};

/// One append waiting for the writer.
pub(crate) struct Request {
    pub records: Vec<Record>,
    pub bytes: usize,
    pub done: Done,
}

pub(crate) struct Writer {
    pub shared: Arc<Shared>,
    pub file: Box<dyn LogFile>,
    pub segment: u32,
    /// End of the last durable commit in the active segment.
    pub len: u64,
    pub next_commit: u64,
    pub segment_bytes: u64,
    pub poisoned: bool,
    pub buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn run(mut self, rx: Receiver<Request>, policy: CommitPolicy) {
        let mut gatherer = Gatherer::new(policy);
        while let Some(batch) = gatherer.next(&rx) {
            self.commit(batch);
        }
    }

    fn commit(&mut self, batch: Vec<Request>) {
        if self.poisoned {
            for r in batch {
                (r.done)(Err(LogError::Poisoned));
            }
            return;
        }
        let (accepted, refused) = self.validate(batch);
        for (r, e) in refused {
            (r.done)(Err(e));
        }
        if accepted.is_empty() {
            return;
        }
        self.buf.clear();
        let start = begin_frame(&mut self.buf);
        let mut events: Vec<(Life, u64, u64)> = Vec::new();
        let mut count = 0u32;
        for r in &accepted {
            for rec in &r.records {
                let offset = self.len + self.buf.len() as u64;
                encode_record(&mut self.buf, rec);
                count += 1;
                if rec.kind == RecordKind::Event {
                    events.push((rec.life, rec.seq, offset));
                }
            }
        }
        finish_frame(&mut self.buf, start, self.next_commit, count);
        let written = self
            .file
            .write_at(&self.buf, self.len)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            tracing::error!(error = %e, commit = self.next_commit, segment = self.segment,
                "event log commit failed; refusing it and rolling to a new segment");
            for r in accepted {
                (r.done)(Err(LogError::Io {
                    doing: "committing",
                    source: io::Error::new(e.kind(), e.to_string()),
                }));
            }
            self.roll_after_failure();
            return;
        }
        let committed = Committed {
            commit: self.next_commit,
            position: Position {
                segment: self.segment,
                offset: self.len,
            },
        };
        self.len += self.buf.len() as u64;
        self.next_commit += 1;
        {
            let mut st = lock(&self.shared.state);
            for (life, seq, offset) in events {
                st.lives.entry(life).or_default().push(seq, offset);
            }
            st.durable_end = self.len;
            st.next_commit = self.next_commit;
        }
        for r in accepted {
            (r.done)(Ok(committed));
        }
        if self.len >= self.segment_bytes {
            if let Err(e) = self.seal_and_roll() {
                tracing::error!(error = %e, segment = self.segment,
                    "event log could not roll to a new segment; stopping commits");
                self.poisoned = true;
            }
        }
    }

    /// Splits a batch into the appends that continue their lives' seqs and those refused.
    #[allow(clippy::type_complexity)]
    fn validate(&self, batch: Vec<Request>) -> (Vec<Request>, Vec<(Request, LogError)>) {
        let st = lock(&self.shared.state);
        let mut overlay: HashMap<Life, u64> = HashMap::new();
        let mut accepted = Vec::with_capacity(batch.len());
        let mut refused = Vec::new();
        for r in batch {
            match check(&r.records, &overlay, &st.lives) {
                Ok(latest) => {
                    overlay.extend(latest);
                    accepted.push(r);
                }
                Err(e) => refused.push((r, e)),
            }
        }
        (accepted, refused)
    }

    /// After a failed write or sync: cut the failed bytes off, seal, start a new segment.
    fn roll_after_failure(&mut self) {
        if let Err(e) = self
            .file
            .set_len(self.len)
            .and_then(|()| self.file.sync_data())
        {
            tracing::warn!(error = %e, "event log could not truncate a failed commit; the roll fences it");
        }
        if let Err(e) = self.seal_and_roll() {
            tracing::error!(error = %e, segment = self.segment,
                "event log could not roll after a failed commit; stopping commits");
            self.poisoned = true;
        }
    }

    /// Seals the active segment at `len` (its index, durable, then the directory entry) and
    /// starts the next one (its header, durable, then the directory entry).
    pub(crate) fn seal_and_roll(&mut self) -> Result<(), LogError> {
        let shared = self.shared.clone();
        let (fs, dir) = (&shared.fs, &shared.dir);
        let (bytes, sealed) = {
            let st = lock(&shared.state);
            let full = full_index(self.segment, &st.lives, self.segment_bytes);
            encode_index(self.segment, self.len, self.next_commit, &st.lives, full)
        };
        let idx = index_path(dir, self.segment);
        // An index file already there is a torn one from a crash while sealing this segment
        // (a sealed segment never becomes active again); opening removes those, but be sure.
        let _ = fs.remove(&idx);
        let mut f = fs.create(&idx).map_err(LogError::io("creating an index"))?;
        f.write_at(&bytes, 0)
            .and_then(|()| f.sync_data())
            .and_then(|()| fs.sync_dir(dir))
            .map_err(LogError::io("writing an index"))?;
        let next = self.segment + 1;
        let path = segment_path(dir, next);
        let mut nf = fs
            .create(&path)
            .map_err(LogError::io("creating a segment"))?;
        nf.write_at(&encode_segment_header(next, self.next_commit), 0)
            .and_then(|()| nf.sync_data())
            .and_then(|()| fs.sync_dir(dir))
            .map_err(LogError::io("creating a segment"))?;
        let reader = fs
            .open_read(&path)
            .map_err(LogError::io("opening a segment"))?;
        {
            let mut st = lock(&shared.state);
            apply_seal(self.segment, &sealed, &mut st.lives);
            st.active_segment = next;
            st.active_file = reader;
            st.durable_end = SEGMENT_HEADER as u64;
        }
        tracing::debug!(sealed = self.segment, next, "event log segment rolled");
        self.file = nf;
        self.segment = next;
        self.len = SEGMENT_HEADER as u64;
        Ok(())
    }
}

/// Checks one append against the lives' latest seqs (the batch's earlier appends first).
/// Returns the latest seqs it moves (a map: an append may hold thousands of lives).
fn check(
    records: &[Record],
    overlay: &HashMap<Life, u64>,
    lives: &HashMap<Life, LifeState>,
) -> Result<HashMap<Life, u64>, LogError> {
    let mut local: HashMap<Life, u64> = HashMap::new();
    for r in records {
        if r.body.len() > MAX_RECORD_BYTES {
            return Err(LogError::TooLarge(r.body.len()));
        }
        let current = local
            .get(&r.life)
            .copied()
            .or_else(|| overlay.get(&r.life).copied())
            .or_else(|| lives.get(&r.life).map(|s| s.latest_seq));
        match r.kind {
            RecordKind::Event => {
                let expected = current.map_or(1, |c| c + 1);
                // A life new to the log may start at any seq (a store converted from another
                // may have dropped its oldest events); after that, one by one.
                if r.seq == 0 || (current.is_some() && r.seq != expected) {
                    return Err(LogError::SeqConflict {
                        expected,
                        got: r.seq,
                    });
                }
                local.insert(r.life, r.seq);
            }
            RecordKind::Change => {
                let latest = current.unwrap_or(0);
                if r.seq > latest {
                    return Err(LogError::SeqConflict {
                        expected: latest,
                        got: r.seq,
                    });
                }
            }
        }
    }
    Ok(local)
}
