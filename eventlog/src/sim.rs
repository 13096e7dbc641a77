//! A file system in memory that crashes the way a disk does, for the crash tests (and for any
//! test of a component built on the log).
//!
//! It keeps two views: what the running program sees, and what a power cut would leave. A
//! file's bytes reach the second view only through [`LogFile::sync_data`], a directory entry
//! (a file created or removed) only through [`FileSystem::sync_dir`]. [`SimFs::crash_at`]
//! makes the n-th mutating call from now on fail, and every one after it (the program dies
//! there; the failing write may have landed in part); [`SimFs::crash_image`] is the disk
//! after the power cut: the synced bytes of the synced entries, plus, for each 4 KiB page
//! written since its file's last sync, nothing, the whole page, or a torn prefix of it in
//! 512-byte sectors, chosen at random. [`SimFs::fail_syncs`] makes the next syncs fail (the
//! data then reaches the disk, or does not, at random), the program going on.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::fs::{FileSystem, LogFile, ReadFile};
use crate::log::lock;

const PAGE: usize = 4096;
const SECTOR: usize = 512;

/// A small deterministic random source (SplitMix64), so that a failing seed replays.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Default)]
struct SimFile {
    data: Vec<u8>,
    synced: Vec<u8>,
}

struct Sim {
    files: HashMap<PathBuf, Arc<Mutex<SimFile>>>,
    durable: HashMap<PathBuf, Arc<Mutex<SimFile>>>,
    ops: u64,
    crash_at: Option<u64>,
    crashed: bool,
    fail_syncs: u32,
    rng: Rng,
}

impl Sim {
    /// Counts a mutating call; `Err` once the crash point is reached.
    fn step(&mut self) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::other("simulated crash"));
        }
        self.ops += 1;
        if self.crash_at.is_some_and(|at| self.ops >= at) {
            self.crashed = true;
            return Err(io::Error::other("simulated crash"));
        }
        Ok(())
    }
}

/// The simulated file system (cheap to clone: clones share the disk).
#[derive(Clone)]
pub struct SimFs(Arc<Mutex<Sim>>);

impl SimFs {
    /// An empty disk; `seed` drives every random choice it makes.
    pub fn new(seed: u64) -> Self {
        SimFs(Arc::new(Mutex::new(Sim {
            files: HashMap::new(),
            durable: HashMap::new(),
            ops: 0,
            crash_at: None,
            crashed: false,
            fail_syncs: 0,
            rng: Rng::new(seed),
        })))
    }

    /// The `n`-th mutating call from now (1: the next) fails, and every later one.
    pub fn crash_at(&self, n: u64) {
        let mut sim = lock(&self.0);
        sim.crash_at = Some(sim.ops + n.max(1));
    }

    /// Whether the crash point was reached.
    pub fn crashed(&self) -> bool {
        lock(&self.0).crashed
    }

    /// Mutating calls made so far.
    pub fn ops(&self) -> u64 {
        lock(&self.0).ops
    }

    /// The next `n` `sync_data` calls fail.
    pub fn fail_syncs(&self, n: u32) {
        lock(&self.0).fail_syncs = n;
    }

    /// The disk after a power cut now: a new file system holding only what was durable, plus
    /// torn pages at random (`seed`).
    pub fn crash_image(&self, seed: u64) -> SimFs {
        let sim = lock(&self.0);
        let mut rng = Rng::new(seed);
        let mut files = HashMap::new();
        for (path, file) in &sim.durable {
            let f = lock(file);
            let image = torn(&f.synced, &f.data, &mut rng);
            files.insert(
                path.clone(),
                Arc::new(Mutex::new(SimFile {
                    data: image.clone(),
                    synced: image,
                })),
            );
        }
        let durable = files.clone();
        SimFs(Arc::new(Mutex::new(Sim {
            files,
            durable,
            ops: 0,
            crash_at: None,
            crashed: false,
            fail_syncs: 0,
            rng: Rng::new(seed ^ 0x5eed),
        })))
    }

    /// A file's bytes as the program sees them (tests cut and flip them).
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let sim = lock(&self.0);
        sim.files.get(path).map(|f| lock(f).data.clone())
    }

    /// Replaces a file's bytes, durably (tests cut and flip them).
    pub fn write_file(&self, path: &Path, bytes: Vec<u8>) {
        let mut sim = lock(&self.0);
        let file = Arc::new(Mutex::new(SimFile {
            data: bytes.clone(),
            synced: bytes,
        }));
        sim.files.insert(path.to_owned(), file.clone());
        sim.durable.insert(path.to_owned(), file);
    }

    /// The names of the files the program sees, sorted.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = lock(&self.0).files.keys().cloned().collect();
        v.sort();
        v
    }
}

/// What a power cut leaves of a file whose last synced bytes are `synced` and whose bytes in
/// the page cache are `data`.
fn torn(synced: &[u8], data: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = synced.to_vec();
    let pages = data.len().max(synced.len()).div_ceil(PAGE);
    for page in 0..pages {
        let from = page * PAGE;
        let to = ((page + 1) * PAGE).min(data.len());
        let old_to = ((page + 1) * PAGE).min(synced.len());
        let changed = data.get(from..to) != synced.get(from..old_to);
        if !changed || from >= data.len() {
            continue;
        }
        let keep = match rng.below(3) {
            0 => continue,
            1 => to - from,
            _ => (rng.below(PAGE as u64 / SECTOR as u64) as usize * SECTOR).min(to - from),
        };
        if out.len() < from + keep {
            out.resize(from + keep, 0);
        }
        out[from..from + keep].copy_from_slice(&data[from..from + keep]);
    }
    // A truncation not yet synced may or may not have reached the disk.
    if data.len() < out.len() && rng.below(2) == 0 {
        out.truncate(data.len());
    }
    out
}

struct SimHandle {
    sim: Arc<Mutex<Sim>>,
    file: Arc<Mutex<SimFile>>,
}

impl ReadFile for SimHandle {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let f = lock(&self.file);
        let Ok(offset) = usize::try_from(offset) else {
            return Ok(0);
        };
        if offset >= f.data.len() {
            return Ok(0);
        }
        let n = buf.len().min(f.data.len() - offset);
        buf[..n].copy_from_slice(&f.data[offset..offset + n]);
        Ok(n)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(lock(&self.file).data.len() as u64)
    }
}

impl LogFile for SimHandle {
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut sim = lock(&self.sim);
        let step = sim.step();
        // The write the crash interrupts lands in part.
        let n = if step.is_err() {
            sim.rng.below(buf.len() as u64 + 1) as usize
        } else {
            buf.len()
        };
        let mut f = lock(&self.file);
        let offset = offset as usize;
        if f.data.len() < offset + n {
            f.data.resize(offset + n, 0);
        }
        f.data[offset..offset + n].copy_from_slice(&buf[..n]);
        step
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut sim = lock(&self.sim);
        sim.step()?;
        let mut f = lock(&self.file);
        if sim.fail_syncs > 0 {
            sim.fail_syncs -= 1;
            if sim.rng.below(2) == 0 {
                f.synced = f.data.clone();
            }
            return Err(io::Error::other("simulated fdatasync failure"));
        }
        f.synced = f.data.clone();
        Ok(())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        lock(&self.sim).step()?;
        lock(&self.file).data.resize(len as usize, 0);
        Ok(())
    }
}

impl FileSystem for SimFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let mut sim = lock(&self.0);
        sim.step()?;
        if sim.files.contains_key(path) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let file = Arc::new(Mutex::new(SimFile::default()));
        sim.files.insert(path.to_owned(), file.clone());
        Ok(Box::new(SimHandle {
            sim: self.0.clone(),
            file,
        }))
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let sim = lock(&self.0);
        let file = sim.files.get(path).ok_or(io::ErrorKind::NotFound)?.clone();
        Ok(Box::new(SimHandle {
            sim: self.0.clone(),
            file,
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        let sim = lock(&self.0);
        let file = sim.files.get(path).ok_or(io::ErrorKind::NotFound)?.clone();
        Ok(Arc::new(SimHandle {
            sim: self.0.clone(),
            file,
        }))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let sim = lock(&self.0);
        Ok(sim
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut sim = lock(&self.0);
        sim.step()?;
        sim.files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut sim = lock(&self.0);
        sim.step()?;
        sim.durable.retain(|p, _| p.parent() != Some(dir));
        let entries: Vec<_> = sim
            .files
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, f)| (p.clone(), f.clone()))
            .collect();
        sim.durable.extend(entries);
        Ok(())
    }
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}
