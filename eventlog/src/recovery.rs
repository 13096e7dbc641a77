//! Opening a log: the newest sealed index is the checkpoint; the active segment's frames are
//! read after it; a torn tail is cut off, damage in the middle is refused.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};

use crate::codec::{encode_segment_header, Life, RecordKind, SEGMENT_HEADER};
use crate::error::{Damage, LogError};
use crate::fs::FileSystem;
use crate::index::{apply_seal, encode_index, full_index, Entry, IndexFile, LifeState};
use crate::log::{FileCache, Log, LogOptions, OpenReport, Shared, State};
use crate::segment::{
    find_valid_frame_after, index_path, parse_name, read_segment_header, scan_frames, segment_path,
    FileName, ScanEnd,
};
use crate::writer::Writer;

/// Opens (or creates) the log in `dir`.
pub fn open(
    dir: &Path,
    fs: Arc<dyn FileSystem>,
    options: LogOptions,
) -> Result<(Log, OpenReport), LogError> {
    let segment_bytes = options.segment_bytes.clamp(4096, 2 << 30);
    fs.create_dir_all(dir)
        .map_err(LogError::io("creating the log directory"))?;
    let (mut segments, indexes) = list(&*fs, dir)?;
    let mut report = OpenReport::default();
    // A newest segment holding no more than an unfinished header was being created when the
    // writer stopped (its name can reach the disk with another file's sync before its header
    // does): no commit was ever written to it.
    if let Some(&last) = segments.last() {
        let path = segment_path(dir, last);
        let f = fs
            .open_read(&path)
            .map_err(LogError::io("opening a segment"))?;
        let len = f.size().map_err(LogError::io("opening a segment"))?;
        if len <= SEGMENT_HEADER as u64 && read_segment_header(&*f, &path).is_err() {
            tracing::warn!(
                segment = last,
                "event log: removing a segment whose creation did not finish"
            );
            fs.remove(&path)
                .and_then(|()| fs.sync_dir(dir))
                .map_err(LogError::io("removing an unfinished segment"))?;
            segments.remove(&last);
            report.unfinished_segment = Some(last);
        }
    }
    if segments.is_empty() {
        create_segment(&*fs, dir, 0, 1)?;
        segments.insert(0);
    }
    let (first, last) = match (segments.first(), segments.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => return Err(LogError::Format("no segment".into())),
    };
    if let Some(missing) = (first..=last).find(|s| !segments.contains(s)) {
        return Err(LogError::Format(format!("segment {missing} is missing")));
    }

    // The checkpoint: the newest full index that checks; then, in order, each later
    // segment's own index, or, where that does not check (a torn seal of the last segment,
    // or damage), the segment read again and its index written again.
    let mut lives: HashMap<Life, LifeState> = HashMap::new();
    let mut loaded: HashMap<u32, (Vec<Entry>, u64)> = HashMap::new();
    let mut checkpoint: Option<u32> = None;
    for &k in indexes.iter().rev().filter(|k| (first..=last).contains(*k)) {
        match load_index(&*fs, dir, k) {
            Ok((entries, next, full)) => {
                loaded.insert(k, (entries, next));
                if full {
                    checkpoint = Some(k);
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, segment = k, "event log index does not check; rebuilding it");
                let path = index_path(dir, k);
                fs.remove(&path)
                    .and_then(|()| fs.sync_dir(dir))
                    .map_err(LogError::io("removing a torn index"))?;
                if k != last {
                    report.rebuilt_indexes.push(k);
                }
            }
        }
    }
    let mut next_commit = header(&*fs, dir, first)?.1;
    let mut sealed_last = false;
    for j in checkpoint.unwrap_or(first)..=last {
        if let Some((entries, next)) = loaded.remove(&j) {
            for e in entries {
                let s = lives.entry(e.life).or_default();
                s.latest_seq = e.latest_seq;
                s.head = e.head;
                s.head_entry = e.head_entry;
            }
            next_commit = next;
            sealed_last = j == last;
            continue;
        }
        if j == last {
            break;
        }
        // A sealed segment whose index is gone: read it, write the index again.
        let next_first = header(&*fs, dir, j + 1)?.1;
        let scan = scan_segment(&*fs, dir, j, next_commit, Some(next_first), &mut lives)?;
        if scan.next_commit != next_first {
            return Err(LogError::Damaged(Damage {
                file: segment_path(dir, j),
                start: scan.end,
                end: scan.file_len,
                what: "commits missing before the next segment",
            }));
        }
        seal(
            &*fs,
            dir,
            j,
            scan.end,
            next_first,
            segment_bytes,
            &mut lives,
        )?;
        if !report.rebuilt_indexes.contains(&j) {
            report.rebuilt_indexes.push(j);
        }
        next_commit = next_first;
    }

    // The active segment: the last one, unless it was sealed just before a crash.
    let active = if sealed_last {
        create_segment(&*fs, dir, last + 1, next_commit)?;
        last + 1
    } else {
        last
    };
    let path = segment_path(dir, active);
    let mut len = SEGMENT_HEADER as u64;
    if active == last {
        let scan = scan_segment(&*fs, dir, active, next_commit, None, &mut lives)?;
        if scan.bad {
            let file = fs
                .open_read(&path)
                .map_err(LogError::io("opening a segment"))?;
            if let Some(at) = find_valid_frame_after(&*file, scan.end, scan.next_commit)? {
                return Err(LogError::Damaged(Damage {
                    file: path,
                    start: scan.end,
                    end: at,
                    what: "a commit fails its checksum and later commits follow it",
                }));
            }
            tracing::warn!(
                segment = active,
                from = scan.end,
                to = scan.file_len,
                "event log: torn tail of the active segment cut off"
            );
            let mut f = fs.open(&path).map_err(LogError::io("opening a segment"))?;
            f.set_len(scan.end)
                .and_then(|()| f.sync_data())
                .map_err(LogError::io("truncating a torn tail"))?;
            report.torn_tail = Some((path.clone(), scan.end, scan.file_len));
        }
        len = scan.end;
        next_commit = scan.next_commit;
    }

    let file = fs.open(&path).map_err(LogError::io("opening a segment"))?;
    let reader = fs
        .open_read(&path)
        .map_err(LogError::io("opening a segment"))?;
    report.next_commit = next_commit;
    report.lives = lives.len();
    let shared = Arc::new(Shared {
        dir: dir.to_owned(),
        fs: fs.clone(),
        state: Mutex::new(State {
            lives,
            active_segment: active,
            active_file: reader,
            durable_end: len,
            next_commit,
            first_segment: first,
        }),
        files: Mutex::new(FileCache::default()),
    });
    let writer = Writer {
        shared: shared.clone(),
        file,
        segment: active,
        len,
        next_commit,
        segment_bytes,
        poisoned: false,
        buf: Vec::new(),
    };
    let (tx, rx) = mpsc::channel();
    let policy = options.policy;
    let handle = std::thread::Builder::new()
        .name("tether-eventlog".into())
        .spawn(move || writer.run(rx, policy))
        .map_err(LogError::io("starting the writer thread"))?;
    Ok((Log::new(shared, tx, handle), report))
}

/// A sealed index read whole and checked: its entries, the commit after its segment, and
/// whether it is full.
fn load_index(
    fs: &dyn FileSystem,
    dir: &Path,
    k: u32,
) -> Result<(Vec<Entry>, u64, bool), LogError> {
    let path = index_path(dir, k);
    let file = fs
        .open_read(&path)
        .map_err(LogError::io("opening an index"))?;
    let idx = IndexFile::open(file, &path, k)?;
    Ok((idx.load_all()?, idx.next_commit, idx.full))
}

fn list(fs: &dyn FileSystem, dir: &Path) -> Result<(BTreeSet<u32>, BTreeSet<u32>), LogError> {
    let mut segments = BTreeSet::new();
    let mut indexes = BTreeSet::new();
    for name in fs.list(dir).map_err(LogError::io("listing the log"))? {
        match parse_name(&name) {
            Some(FileName::Segment(n)) => {
                segments.insert(n);
            }
            Some(FileName::Index(n)) => {
                indexes.insert(n);
            }
            None => {}
        }
    }
    Ok((segments, indexes))
}

fn header(fs: &dyn FileSystem, dir: &Path, segment: u32) -> Result<(u32, u64), LogError> {
    let path = segment_path(dir, segment);
    let f = fs
        .open_read(&path)
        .map_err(LogError::io("opening a segment"))?;
    let (n, first_commit) = read_segment_header(&*f, &path)?;
    if n != segment {
        return Err(LogError::Format(format!(
            "{} holds segment {n}",
            path.display()
        )));
    }
    Ok((n, first_commit))
}

/// Reads a segment's frames into `lives` as active runs.
fn scan_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    segment: u32,
    expect_first: u64,
    stop: Option<u64>,
    lives: &mut HashMap<Life, LifeState>,
) -> Result<ScanEnd, LogError> {
    let (_, first_commit) = header(fs, dir, segment)?;
    let path = segment_path(dir, segment);
    if first_commit != expect_first {
        return Err(LogError::Damaged(Damage {
            file: path,
            start: 0,
            end: SEGMENT_HEADER as u64,
            what: "segment does not start with the commit after the previous one",
        }));
    }
    let file = fs
        .open_read(&path)
        .map_err(LogError::io("opening a segment"))?;
    scan_frames(
        &*file,
        SEGMENT_HEADER as u64,
        first_commit,
        stop,
        None,
        |_, _, records| {
            for (offset, r) in records {
                if r.kind == RecordKind::Event {
                    lives.entry(r.life).or_default().push(r.seq, offset);
                }
            }
            Ok(())
        },
    )
}

/// Writes a segment's index at open (the same bytes the writer's seal writes).
fn seal(
    fs: &dyn FileSystem,
    dir: &Path,
    segment: u32,
    end: u64,
    next_commit: u64,
    segment_bytes: u64,
    lives: &mut HashMap<Life, LifeState>,
) -> Result<(), LogError> {
    let full = full_index(segment, lives, segment_bytes);
    let (bytes, sealed) = encode_index(segment, end, next_commit, lives, full);
    let mut f = fs
        .create(&index_path(dir, segment))
        .map_err(LogError::io("creating an index"))?;
    f.write_at(&bytes, 0)
        .and_then(|()| f.sync_data())
        .and_then(|()| fs.sync_dir(dir))
        .map_err(LogError::io("writing an index"))?;
    apply_seal(segment, &sealed, lives);
    Ok(())
}

fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    segment: u32,
    first_commit: u64,
) -> Result<(), LogError> {
    let mut f = fs
        .create(&segment_path(dir, segment))
        .map_err(LogError::io("creating a segment"))?;
    f.write_at(&encode_segment_header(segment, first_commit), 0)
        .and_then(|()| f.sync_data())
        .and_then(|()| fs.sync_dir(dir))
        .map_err(LogError::io("creating a segment"))
}
