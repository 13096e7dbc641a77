//! Transparent huge pages off for the process (and the compute hosts it
//! starts, which inherit the flag).
//!
//! mimalloc asks the kernel for huge pages on its arenas (`madvise`), so
//! touching a few bytes of a fresh 2 MiB region makes all of it resident: a
//! gateway that had served nobody held 12 MiB of anonymous memory in six
//! huge pages, each compute host as much, most of it untouched. A gateway's
//! heap is tens of megabytes spread over many small objects, where huge
//! pages save little TLB and cost that memory; `docs/benchmarks/2026-12.md`
//! ("The frame path and the house") has the before and after. Without the flag (an old kernel, a
//! seccomp profile) tether runs as before.

use tracing::info;

/// Sets `PR_SET_THP_DISABLE`, first thing in `main`: mimalloc has then
/// made at most its first region resident. Nothing is logged yet (logging
/// is not set up); [`report`] says later whether it took.
pub fn disable() {
    let _ = nix::sys::prctl::set_thp_disable(true);
}

/// Once logging is up (`tether serve`): says so if the flag did not take.
pub fn report() {
    if !matches!(nix::sys::prctl::get_thp_disable(), Ok(true)) {
        info!("transparent huge pages stay on for this process (PR_SET_THP_DISABLE refused)");
    }
}
