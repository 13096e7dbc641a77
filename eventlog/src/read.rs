//! Reads: a session life's events from any seq, with memory bounded by what is returned; a
//! catch-up scan of whole commits from a commit number; a full verification.

use crate::codec::{decode_record, decode_record_header, Life, Record, RECORD_HEADER};
use crate::error::{Damage, LogError};
use crate::fs::{read_exact_at, ReadFile};
use crate::index::{Entry, NONE};
use crate::log::{lock, Log, Position};
use crate::segment::{index_path, read_segment_header, scan_frames, segment_path};

/// Bytes read at once for a record whose length is not known yet (most records fit).
const RECORD_GUESS: usize = 1024;

impl Log {
    /// Up to `max` events of `life` from seq `from` on, in seq order and without gaps. Fewer
    /// than `max` only at the end of the stream. A seq before the oldest one kept starts at
    /// the oldest. Memory: the records returned, and the offsets of at most `max` of them.
    pub fn read(&self, life: &Life, from: u64, max: usize) -> Result<Vec<Record>, LogError> {
        let shared = &self.shared;
        let (head, head_entry, latest, active_first, active, active_file, active_segment) = {
            let st = lock(&shared.state);
            let Some(s) = st.lives.get(life) else {
                return Ok(Vec::new());
            };
            let skip = from.saturating_sub(s.active_first) as usize;
            let take: Vec<u32> = if s.active.is_empty() {
                Vec::new()
            } else {
                s.active.iter().skip(skip).take(max).copied().collect()
            };
            (
                s.head,
                s.head_entry,
                s.latest_seq,
                s.active_first,
                take,
                st.active_file.clone(),
                st.active_segment,
            )
        };
        let mut out = Vec::new();
        if max == 0 || from > latest {
            return Ok(out);
        }
        let mut seq = from;
        if active.is_empty() || from < active_first {
            // Walk back from the newest sealed segment holding the life to the one holding
            // `from`, remembering the way so the read can continue forward.
            let mut path: Vec<(u32, Entry)> = Vec::new();
            let (mut segment, mut entry) = (head, head_entry);
            while segment != NONE {
                let idx = shared.index_file(segment)?;
                let e = match idx.lookup(life, entry)? {
                    Some(e) if e.count > 0 => e,
                    _ => {
                        return Err(LogError::Damaged(Damage {
                            file: index_path(&shared.dir, segment),
                            start: 0,
                            end: 0,
                            what: "index lacks the events memory says it holds",
                        }))
                    }
                };
                path.push((segment, e));
                if e.first_seq <= seq {
                    break;
                }
                (segment, entry) = (e.prev, e.prev_entry);
            }
            seq = match path.last() {
                Some((_, oldest)) => seq.max(oldest.first_seq),
                None => seq.max(active_first),
            };
            while let Some((segment, e)) = path.pop() {
                if out.len() >= max {
                    return Ok(out);
                }
                let end = e.first_seq + u64::from(e.count);
                if seq >= end {
                    continue;
                }
                let idx = shared.index_file(segment)?;
                let skip = (seq - e.first_seq) as u32;
                let n = ((end - seq) as usize).min(max - out.len());
                let offsets = idx.offsets(e.offsets_from + skip, n)?;
                let file = shared.segment_file(segment)?;
                let path = segment_path(&shared.dir, segment);
                for off in offsets {
                    out.push(read_record(&*file, &path, u64::from(off), life, seq)?);
                    seq += 1;
                }
            }
            if out.len() >= max || active.is_empty() {
                return Ok(out);
            }
            // Continue into the active segment from where the sealed ones ended.
            let skip = seq.saturating_sub(active_first) as usize;
            let path = segment_path(&shared.dir, active_segment);
            for off in active.into_iter().skip(skip).take(max - out.len()) {
                out.push(read_record(
                    &*active_file,
                    &path,
                    u64::from(off),
                    life,
                    seq,
                )?);
                seq += 1;
            }
            return Ok(out);
        }
        let path = segment_path(&shared.dir, active_segment);
        for off in active {
            out.push(read_record(
                &*active_file,
                &path,
                u64::from(off),
                life,
                seq,
            )?);
            seq += 1;
        }
        Ok(out)
    }

    /// Every commit from commit number `from` on, in order, each with its position and
    /// records (events and changes), until `each` returns `false` or the durable end: the
    /// catch-up of whatever is kept from the log. Memory: one commit at a time.
    pub fn scan(
        &self,
        from: u64,
        mut each: impl FnMut(u64, Position, Vec<Record>) -> bool,
    ) -> Result<(), LogError> {
        let shared = &self.shared;
        let (first, active, durable_end) = {
            let st = lock(&shared.state);
            (st.first_segment, st.active_segment, st.durable_end)
        };
        // The segment holding `from`: the last whose first commit is at most `from`.
        let mut starts = Vec::new();
        for segment in first..=active {
            let path = segment_path(&shared.dir, segment);
            let f = shared.segment_file(segment)?;
            starts.push((segment, read_segment_header(&*f, &path)?.1));
        }
        let mut going = true;
        for (i, &(segment, first_commit)) in starts.iter().enumerate() {
            let next_first = starts.get(i + 1).map(|s| s.1);
            if next_first.is_some_and(|n| n <= from) || !going {
                continue;
            }
            let limit = if segment == active {
                Some(durable_end)
            } else {
                Some(shared.index_file(segment)?.segment_end)
            };
            let f = shared.segment_file(segment)?;
            let end = scan_frames(
                &*f,
                crate::codec::SEGMENT_HEADER as u64,
                first_commit,
                next_first,
                limit,
                |offset, commit, records| {
                    if going && commit >= from {
                        let records = records.into_iter().map(|(_, r)| r).collect();
                        going = each(commit, Position { segment, offset }, records);
                    }
                    Ok(())
                },
            )?;
            if end.bad {
                return Err(LogError::Damaged(Damage {
                    file: segment_path(&shared.dir, segment),
                    start: end.end,
                    end: limit.unwrap_or(end.file_len),
                    what: "a commit fails its checksum",
                }));
            }
        }
        Ok(())
    }

    /// Reads every segment and index the log holds and returns each range that fails its
    /// checksum (empty: the log is whole).
    pub fn verify(&self) -> Vec<Damage> {
        let shared = &self.shared;
        let (first, active) = {
            let st = lock(&shared.state);
            (st.first_segment, st.active_segment)
        };
        let mut damage = Vec::new();
        for segment in first..active {
            if let Err(e) = shared
                .index_file(segment)
                .and_then(|i| i.load_all().map(|_| ()))
            {
                push_damage(&mut damage, e);
            }
        }
        if let Err(e) = self.scan(0, |_, _, _| true) {
            push_damage(&mut damage, e);
        }
        damage
    }
}

fn push_damage(damage: &mut Vec<Damage>, e: LogError) {
    match e {
        LogError::Damaged(d) => damage.push(d),
        other => damage.push(Damage {
            file: std::path::PathBuf::new(),
            start: 0,
            end: 0,
            what: if matches!(other, LogError::Io { .. }) {
                "unreadable"
            } else {
                "not an event log file"
            },
        }),
    }
}

/// Reads the record at `offset` and checks it is `life`'s event `seq`.
fn read_record(
    file: &dyn ReadFile,
    path: &std::path::Path,
    offset: u64,
    life: &Life,
    seq: u64,
) -> Result<Record, LogError> {
    let damaged = |end: u64, what| {
        LogError::Damaged(Damage {
            file: path.to_owned(),
            start: offset,
            end,
            what,
        })
    };
    let mut buf = vec![0u8; RECORD_GUESS];
    let n = file
        .read_at(&mut buf, offset)
        .map_err(LogError::io("reading a record"))?;
    buf.truncate(n);
    let h = decode_record_header(&buf)
        .ok_or_else(|| damaged(offset + RECORD_HEADER as u64, "record header"))?;
    let total = RECORD_HEADER + h.len;
    if buf.len() < total {
        let have = buf.len();
        buf.resize(total, 0);
        read_exact_at(file, &mut buf[have..], offset + have as u64)
            .map_err(|_| damaged(offset + total as u64, "record cut short"))?;
    }
    buf.truncate(total);
    let r = decode_record(&buf)
        .ok_or_else(|| damaged(offset + total as u64, "record fails its checksum"))?;
    if r.life != *life || r.seq != seq {
        return Err(damaged(
            offset + total as u64,
            "index points at another record",
        ));
    }
    Ok(r)
}
