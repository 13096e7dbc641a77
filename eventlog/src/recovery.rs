//! Opening a log: the newest sealed index is the checkpoint; the active segment's frames are
//! read after it; a torn tail is cut off, damage in the middle is refused.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};

use crate::codec::{encode_segment_header, Life, RecordKind, SEGMENT_HEADER};
use crate::error::{Damage, LogError};
use crate::fs::FileSystem;
use crate::index::{apply_seal, encode_index, IndexFile, LifeState};
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

    // The checkpoint: the newest index that checks. Any newer one that does not is a torn
    // seal (of the last segment) or damage (rebuilt below from its segment).
    let mut lives: HashMap<Life, LifeState> = HashMap::new();
    let mut checkpoint: Option<u32> = None;
    let mut next_commit = None;
    for &k in indexes.iter().rev().filter(|k| (first..=last).contains(*k)) {
        let path = index_path(dir, k);
        let loaded = fs
            .open_read(&path)
            .map_err(LogError::io("opening an index"))
            .and_then(|f| IndexFile::open(f, &path, k))
            .and_then(|idx| Ok((idx.load_all()?, idx.next_commit)));
        match loaded {
            Ok((entries, next)) => {
                for e in entries {
                    let s = LifeState {
                        latest_seq: e.latest_seq,
                        head: e.head,
                        head_entry: e.head_entry,
                        ..LifeState::default()
                    };
                    lives.insert(e.life, s);
                }
                checkpoint = Some(k);
                next_commit = Some(next);
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, segment = k, "event log index does not check; rebuilding it");
                fs.remove(&path)
                    .map_err(LogError::io("removing a torn index"))?;
                fs.sync_dir(dir)
                    .map_err(LogError::io("removing a torn index"))?;
            }
        }
    }
    let mut next_commit = match next_commit {
        Some(n) => n,
        None => {
            let f = fs
                .open_read(&segment_path(dir, first))
                .map_err(LogError::io("opening a segment"))?;
            read_segment_header(&*f, &segment_path(dir, first))?.1
        }
    };

    // Sealed segments after the checkpoint whose index is gone: read them, write it again.
    let from = checkpoint.map_or(first, |k| k + 1);
    for j in from..last {
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
        seal(&*fs, dir, j, scan.end, next_first, &mut lives)?;
        report.rebuilt_indexes.push(j);
        next_commit = next_first;
    }

    // The active segment: the last one, unless it was sealed just before a crash.
    let active = if checkpoint == Some(last) {
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
    lives: &mut HashMap<Life, LifeState>,
) -> Result<(), LogError> {
    let (bytes, sealed) = encode_index(segment, end, next_commit, lives);
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
