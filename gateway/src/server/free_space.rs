//! Free space on the store's filesystem, for `/readyz`.
//!
//! A gateway whose disk is about to fill still answers, but every durable
//! write will soon fail with 5070: a load balancer should send new clients
//! elsewhere before that happens, not after the first failed commit. The
//! store is "writable" for readiness only while its filesystem has at least
//! [`threshold`] bytes available to the gateway's user.

use std::path::Path;

/// Never less than this is enough on a large filesystem ...
pub const MIN_FREE_BYTES: u64 = 64 << 20;
/// ... but on a small one (under 6.4 GiB) 1 % of it is.
pub const MIN_FREE_PERCENT: u64 = 1;

/// Space on one filesystem, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Available to an unprivileged user (`f_bavail`).
    pub available: u64,
    pub total: u64,
}

impl Space {
    /// Below the readiness threshold.
    pub fn low(self) -> bool {
        self.available < threshold(self.total)
    }
}

/// The least free space a store needs to count as writable:
/// `min(64 MiB, 1 % of the filesystem)`, so a small filesystem is not
/// unready merely for being small.
pub fn threshold(total: u64) -> u64 {
    MIN_FREE_BYTES.min(total / 100 * MIN_FREE_PERCENT)
}

/// Space on the filesystem that holds `dir` (the store's directory).
pub fn of(dir: &Path) -> std::io::Result<Space> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let fragment = st.fragment_size() as u64;
    Ok(Space {
        available: (st.blocks_available() as u64).saturating_mul(fragment),
        total: (st.blocks() as u64).saturating_mul(fragment),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_threshold_is_64_mib_or_1_percent_on_small_filesystems() {
        assert_eq!(threshold(1024 * GIB), 64 << 20);
        assert_eq!(threshold(100 * GIB), 64 << 20);
        assert_eq!(threshold(GIB), GIB / 100);
        assert_eq!(threshold(0), 0);
        let big = Space {
            available: (64 << 20) - 1,
            total: 500 * GIB,
        };
        assert!(big.low());
        assert!(!Space {
            available: 64 << 20,
            ..big
        }
        .low());
        // 20 MiB free of 1 GiB is plenty for a filesystem that small.
        assert!(!Space {
            available: 20 << 20,
            total: GIB
        }
        .low());
        assert!(Space {
            available: 5 << 20,
            total: GIB
        }
        .low());
    }

    #[test]
    fn the_space_of_a_real_directory_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let space = of(dir.path()).expect("statvfs");
        assert!(space.total > 0);
        assert!(space.available <= space.total);
        assert!(
            of(Path::new("")).is_ok(),
            "an empty path is the current directory"
        );
        assert!(of(&dir.path().join("missing")).is_err());
    }
}
