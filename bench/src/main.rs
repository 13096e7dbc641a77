//! `tether-bench`: the benchmarks and load generators, a binary of their
//! own so that the `tether` binary ships without the actor hooks they
//! inject events through. `tether bench ARGS` runs this binary.

use std::process::ExitCode;

use clap::Parser;

/// Measure tether (docs/BENCHMARKS.md).
#[derive(Debug, Parser)]
#[command(name = "tether bench", version)]
struct Cli {
    #[command(flatten)]
    args: tether_bench::BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match tether_bench::run(cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tether bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
