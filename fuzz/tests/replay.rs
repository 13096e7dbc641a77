//! Replays inputs through the fuzz targets' checks on a stable toolchain,
//! without libFuzzer: the committed seeds always, plus whatever a local run
//! left in `corpus/` and `artifacts/` (so a crash found by `cargo fuzz` can be
//! re-run under a debugger with plain `cargo test`).
//!
//! `cd fuzz && cargo test` runs it.

use std::fs;
use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["seeds", "corpus", "artifacts"] {
        let Ok(entries) = fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.path().is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn frame_inputs_pass() {
    let files = inputs("frame");
    assert!(!files.is_empty(), "no seeds for frame");
    for path in files {
        let data = fs::read(&path).unwrap();
        eprintln!("{}", path.display());
        tether_fuzz::frame::check(&String::from_utf8_lossy(&data));
    }
}

#[test]
fn host_frame_inputs_pass() {
    let files = inputs("host_frame");
    assert!(!files.is_empty(), "no seeds for host_frame");
    for path in files {
        let data = fs::read(&path).unwrap();
        let Ok(text) = std::str::from_utf8(&data) else {
            continue;
        };
        for line in text.split_inclusive('\n') {
            if !line.trim().is_empty() {
                tether_fuzz::host::check_line(line);
            }
        }
    }
}
