//! `tether bench`: the benchmarks live in their own binary, `tether-bench`
//! (bench/), so that this one carries neither the actor hooks they inject
//! events through nor the load generator. This command runs that binary,
//! found beside this one, with the same arguments, and tells it to measure
//! this `tether`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// Everything after `tether bench`, `--help` included, goes to `tether-bench`.
#[derive(Debug, clap::Args)]
pub struct BenchForward {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

pub fn forward(args: BenchForward) -> ExitCode {
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("tether bench: cannot find this executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bench = me.with_file_name("tether-bench");
    if !bench.is_file() {
        eprintln!(
            "tether bench: {} is not built; build it beside this binary with \
             `cargo build --release -p tether-bench` (or `cargo build --release --workspace`)",
            bench.display()
        );
        return ExitCode::FAILURE;
    }
    // exec: the benchmark is this process from here on (its pid, its
    // signals, its exit status), so scripts that pin or time `tether
    // bench` measure the benchmark itself.
    let e = Command::new(&bench)
        .args(&args.args)
        .env("TETHER_BIN", &me)
        .exec();
    eprintln!("tether bench: cannot run {}: {e}", bench.display());
    ExitCode::FAILURE
}
