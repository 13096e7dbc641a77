//! Transparent huge pages off for the process (and the compute hosts it
//! starts, which inherit the flag).
//!
//! mimalloc asks the kernel for huge pages on its arenas (`madvise`), so
//! touching a few bytes of a fresh 2 MiB region makes all of it resident: a
//! gateway that had served nobody held 12 MiB of anonymous memory in six
//! huge pages, each compute host as much, most of it untouched. A gateway's
//! heap is tens of megabytes spread over many small objects, where huge
//! pages save little TLB and cost that memory; `docs/BENCHMARKS.md`
//! ("Memory") has the before and after. Without the flag (an old kernel, a
//! seccomp profile) tether runs as before.

use tracing::debug;

/// Sets `PR_SET_THP_DISABLE`, first thing in `main`: mimalloc has then
/// made at most its first region resident.
pub fn disable() {
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        // Before logging is set up: kept for a later look with RUST_LOG.
        debug!(error = %e, "could not disable transparent huge pages");
    }
}
