//! CPU time and memory of the server under test, read from `/proc`: the
//! server process itself and, separately, its descendants (tether's
//! compute hosts), plus the generator's own CPU time.

use std::collections::HashMap;

use crate::harness::status_kib;

/// `/proc/PID/stat` counts CPU time in clock ticks of 1/100 s on Linux.
const TICKS_PER_S: f64 = 100.0;

/// One reading of a process tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// utime + stime of the server, seconds.
    pub server_cpu_s: f64,
    /// utime + stime of its live descendants, seconds.
    pub children_cpu_s: f64,
    /// Peak resident set (VmHWM) of the server, KiB.
    pub server_peak_kib: u64,
    /// Sum of the descendants' VmHWM, KiB.
    pub children_peak_kib: u64,
    /// Current resident set (VmRSS) of the server, KiB.
    pub server_rss_kib: u64,
    /// The largest current VmRSS of one descendant (a compute host), KiB.
    pub child_max_rss_kib: u64,
}

/// Reads `pid` and its descendants; zeros when `pid` is unknown or gone.
pub fn sample(pid: Option<u32>) -> Sample {
    let Some(pid) = pid else {
        return Sample::default();
    };
    let mut s = Sample {
        server_cpu_s: cpu_s(pid),
        server_peak_kib: status_kib(pid, "VmHWM:"),
        server_rss_kib: status_kib(pid, "VmRSS:"),
        ..Sample::default()
    };
    for child in descendants(pid) {
        s.children_cpu_s += cpu_s(child);
        s.children_peak_kib += status_kib(child, "VmHWM:");
        s.child_max_rss_kib = s.child_max_rss_kib.max(status_kib(child, "VmRSS:"));
    }
    s
}

/// CPU seconds this process (the generator) used so far.
pub fn own_cpu_s() -> f64 {
    cpu_s(std::process::id())
}

/// `utime` and `stime` of `/proc/PID/stat`, in seconds.
fn cpu_s(pid: u32) -> f64 {
    let Some(fields) = stat_fields(pid) else {
        return 0.0;
    };
    // Fields 14 and 15 (1-based) are 11 and 12 after the command name.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / TICKS_PER_S
}

/// The fields of `/proc/PID/stat` after the command name (which may hold
/// spaces and parentheses, so it is cut at the last `)`).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Every live process below `pid` in the process tree.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // The parent pid is field 4 (1-based), 1 after the command name.
        if let Some(ppid) = stat_fields(p)
            .and_then(|f| f.get(1).cloned())
            .and_then(|v| v.parse::<u32>().ok())
        {
            children.entry(ppid).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).into_iter().flatten() {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// `Max open files` of this process: (soft, hard).
pub fn fd_limits() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    Some((nums.next()?, nums.next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = sample(Some(std::process::id()));
        assert!(s.server_peak_kib > 0 && s.server_rss_kib > 0);
        assert!(fd_limits().is_some_and(|(soft, hard)| soft <= hard));
    }
}
