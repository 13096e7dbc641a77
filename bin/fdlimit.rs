//! The open-file limit, raised at start.
//!
//! Every client connection is a descriptor, and a login shell or a service
//! manager commonly hands a process a soft `RLIMIT_NOFILE` of 1024 while
//! `--max-connections` defaults to 65536: the gateway would run out of
//! descriptors (and `accept` fail) long before its own cap. The soft limit
//! is the process's to raise up to the hard one, so it is raised to that.

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
use tracing::{debug, warn};

/// Linux's default `fs.nr_open`: the most a soft limit of "unlimited" may
/// become (setrlimit refuses anything above nr_open).
const NR_OPEN_DEFAULT: u64 = 1 << 20;

/// Raises the soft limit to the hard one; logs what it became, and warns
/// when that is below `max_connections`. Never fails start-up: a gateway
/// with fewer descriptors still serves, up to them.
pub fn raise(max_connections: usize) {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            warn!(error = %e, "cannot read the open-file limit");
            return;
        }
    };
    let target = if hard == RLIM_INFINITY {
        nr_open()
    } else {
        hard
    };
    let now = if soft < target {
        match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            Ok(()) => target,
            Err(e) => {
                warn!(error = %e, soft, hard, "cannot raise the open-file limit");
                soft
            }
        }
    } else {
        soft
    };
    debug!(was = soft, soft = now, hard, "open-file limit");
    if now < max_connections as u64 {
        // Worth a warning only when someone asked for more connections than
        // the system allows; the default is a ceiling, not a promise, and a
        // warning at every start would teach people to ignore warnings.
        if max_connections == crate::config::DEFAULT_MAX_CONNECTIONS {
            debug!(
                open_files = now,
                max_connections, "connections past the open-file limit are answered 503"
            );
        } else {
            warn!(
                open_files = now,
                max_connections,
                "the open-file limit is below --max-connections; connections past it are answered 503"
            );
        }
    }
}

/// `fs.nr_open`, the ceiling of any descriptor limit.
fn nr_open() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(NR_OPEN_DEFAULT)
}
