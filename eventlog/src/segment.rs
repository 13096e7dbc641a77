//! Segment files: their names, and reading their commit frames in order (recovery, catch-up
//! scans and verification).

use std::path::{Path, PathBuf};

use crate::codec::{
    decode_frame_header, decode_segment_header, frame_checks, split_frame, Record, FRAME_HEADER,
    FRAME_MAGIC, SEGMENT_HEADER,
};
use crate::error::{Damage, LogError};
use crate::fs::{read_exact_at, ReadFile};

/// How much of a segment a scan reads at a time.
const SCAN_CHUNK: usize = 1 << 20;

pub(crate) fn segment_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:010}.log"))
}

pub(crate) fn index_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:010}.idx"))
}

/// What a file name in the log's directory is.
pub(crate) enum FileName {
    Segment(u32),
    Index(u32),
}

pub(crate) fn parse_name(name: &str) -> Option<FileName> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = stem.parse().ok()?;
    match ext {
        "log" => Some(FileName::Segment(n)),
        "idx" => Some(FileName::Index(n)),
        _ => None,
    }
}

/// A segment's header: its number and the commit it starts with.
pub(crate) fn read_segment_header(
    file: &dyn ReadFile,
    path: &Path,
) -> Result<(u32, u64), LogError> {
    let mut h = [0u8; SEGMENT_HEADER];
    match read_exact_at(file, &mut h, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(LogError::Damaged(Damage {
                file: path.to_owned(),
                start: 0,
                end: file.size().unwrap_or(0),
                what: "segment shorter than its header",
            }))
        }
        Err(e) => return Err(LogError::io("reading a segment header")(e)),
    }
    decode_segment_header(&h).map_err(|_| {
        LogError::Damaged(Damage {
            file: path.to_owned(),
            start: 0,
            end: SEGMENT_HEADER as u64,
            what: "segment header fails its checksum",
        })
    })
}

/// How a scan of a segment's frames ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanEnd {
    /// End of the last whole frame read (the segment's valid length).
    pub end: u64,
    /// The commit after the last one read.
    pub next_commit: u64,
    /// A frame at `end` that did not check (torn or damaged), if the scan stopped at one.
    pub bad: bool,
    /// The file's length.
    pub file_len: u64,
}

/// Reads the frames of a segment from `start` (after the header) in commit order, calling
/// `each(frame offset, commit, records with their offsets in the file)` for every whole frame
/// that checks. Stops at `limit` bytes, at the first commit `>= stop_commit`, or at the first
/// frame that does not check or does not carry the expected commit (`bad`). Memory: one chunk
/// plus the largest frame.
pub(crate) fn scan_frames(
    file: &dyn ReadFile,
    start: u64,
    first_commit: u64,
    stop_commit: Option<u64>,
    limit: Option<u64>,
    mut each: impl FnMut(u64, u64, Vec<(u64, Record)>) -> Result<(), LogError>,
) -> Result<ScanEnd, LogError> {
    let file_len = file.size().map_err(LogError::io("scanning a segment"))?;
    let limit = limit.unwrap_or(file_len).min(file_len);
    let mut pos = start;
    let mut commit = first_commit;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_at = pos;
    let mut bad = false;
    while pos < limit && stop_commit.is_none_or(|s| commit < s) {
        // Make sure the frame header is in the buffer.
        if !in_buf(&buf, buf_at, pos, FRAME_HEADER as u64) {
            fill(file, &mut buf, &mut buf_at, pos, SCAN_CHUNK, limit)?;
        }
        let Some(h) = slice(&buf, buf_at, pos, FRAME_HEADER).and_then(decode_frame_header) else {
            bad = true;
            break;
        };
        let total = (FRAME_HEADER + h.body_len) as u64;
        if h.commit != commit || pos + total > limit {
            bad = true;
            break;
        }
        if !in_buf(&buf, buf_at, pos, total) {
            fill(
                file,
                &mut buf,
                &mut buf_at,
                pos,
                SCAN_CHUNK.max(total as usize),
                limit,
            )?;
        }
        let Some(frame) = slice(&buf, buf_at, pos, total as usize) else {
            bad = true;
            break;
        };
        let body = &frame[FRAME_HEADER..];
        let records = frame_checks(frame, &h, body)
            .then(|| split_frame(body, h.records))
            .flatten();
        let Some(records) = records else {
            bad = true;
            break;
        };
        let body_at = pos + FRAME_HEADER as u64;
        let records = records
            .into_iter()
            .map(|(off, r)| (body_at + off as u64, r))
            .collect();
        each(pos, commit, records)?;
        pos += total;
        commit += 1;
    }
    Ok(ScanEnd {
        end: pos,
        next_commit: commit,
        bad: bad || (pos < limit && stop_commit.is_none_or(|s| commit < s)),
        file_len,
    })
}

fn in_buf(buf: &[u8], buf_at: u64, pos: u64, n: u64) -> bool {
    pos >= buf_at && pos + n <= buf_at + buf.len() as u64
}

fn slice(buf: &[u8], buf_at: u64, pos: u64, n: usize) -> Option<&[u8]> {
    let from = usize::try_from(pos.checked_sub(buf_at)?).ok()?;
    buf.get(from..from.checked_add(n)?)
}

fn fill(
    file: &dyn ReadFile,
    buf: &mut Vec<u8>,
    buf_at: &mut u64,
    pos: u64,
    want: usize,
    limit: u64,
) -> Result<(), LogError> {
    let n = want.min((limit - pos) as usize);
    buf.resize(n, 0);
    let mut done = 0;
    while done < n {
        let got = file
            .read_at(&mut buf[done..], pos + done as u64)
            .map_err(LogError::io("scanning a segment"))?;
        if got == 0 {
            break;
        }
        done += got;
    }
    buf.truncate(done);
    *buf_at = pos;
    Ok(())
}

/// The offset of the first whole frame after `from` that checks and carries a commit
/// `>= min_commit`, if any: what tells damage in the middle of a segment (something valid
/// follows it) from a torn tail (nothing does). Reads the rest of the file in chunks.
pub(crate) fn find_valid_frame_after(
    file: &dyn ReadFile,
    from: u64,
    min_commit: u64,
) -> Result<Option<u64>, LogError> {
    let len = file.size().map_err(LogError::io("scanning a segment"))?;
    let magic = FRAME_MAGIC.to_le_bytes();
    let mut at = from + 1;
    while at + FRAME_HEADER as u64 <= len {
        let n = (SCAN_CHUNK as u64).min(len - at) as usize;
        let mut chunk = vec![0u8; n];
        read_exact_at(file, &mut chunk, at).map_err(LogError::io("scanning a segment"))?;
        for i in 0..n.saturating_sub(3) {
            if chunk[i..i + 4] != magic {
                continue;
            }
            let pos = at + i as u64;
            let mut header = [0u8; FRAME_HEADER];
            if read_exact_at(file, &mut header, pos).is_err() {
                continue;
            }
            let Some(h) = decode_frame_header(&header) else {
                continue;
            };
            if h.commit < min_commit || pos + (FRAME_HEADER + h.body_len) as u64 > len {
                continue;
            }
            let mut body = vec![0u8; h.body_len];
            if read_exact_at(file, &mut body, pos + FRAME_HEADER as u64).is_ok()
                && frame_checks(&header, &h, &body)
            {
                return Ok(Some(pos));
            }
        }
        // Overlap by 3 bytes so a magic split across chunks is seen.
        at += (n as u64).saturating_sub(3).max(1);
    }
    Ok(None)
}
