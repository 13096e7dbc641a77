//! The file layer: everything the log does to the disk goes through these traits, so that the
//! crash tests can put a file system behind them that forgets what was not synced
//! ([`crate::sim::SimFs`]). [`OsFs`] is the real one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// A file read at offsets, shared by readers.
pub trait ReadFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The file's length.
    fn size(&self) -> io::Result<u64>;
}

/// A file the writer appends to.
pub trait LogFile: ReadFile {
    /// Writes all of `buf` at `offset`.
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`: the data and the length are durable when this returns `Ok`.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Truncates (or extends) the file.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// A directory of files.
pub trait FileSystem: Send + Sync + 'static {
    /// Creates a file that must not exist yet, for reading and writing. Its name is durable
    /// only after [`FileSystem::sync_dir`].
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Opens an existing file for reading.
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Removes a file; durable only after [`FileSystem::sync_dir`].
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of the directory: the files created and removed in it are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates the directory (and its parents) if it does not exist.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
}

/// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof`.
pub fn read_exact_at(file: &dyn ReadFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
    }
    Ok(())
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

struct OsFile(File);

impl ReadFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        loop {
            match self.0.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl LogFile for OsFile {
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        // `File::sync_data` is fdatasync(2) on Linux.
        self.0.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl FileSystem for OsFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(OsFile(file)))
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(OsFile(file)))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn ReadFile>> {
        Ok(Arc::new(OsFile(File::open(path)?)))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
}
