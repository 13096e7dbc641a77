//! The `tether` binary: a thin layer over the actor system.

mod admin;
mod backup;
mod bench;
mod config;
mod fdlimit;
mod logging;
mod node;
mod restore;
mod serve;
mod thp;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tether_host as host;
use tether_terminal as client;

/// mimalloc instead of glibc's malloc: every event allocates its frame,
/// params and row, and `perf` of the turn path put a third of the
/// gateway's time in glibc's malloc, free and heap consolidation.
/// `--features system-alloc` builds with the system allocator instead, for
/// heap profilers that hook malloc (heaptrack): mimalloc is invisible to
/// them.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// tether: a session gateway for AI-agent applications.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    // Boxed: its many flags dwarf the other commands.
    Serve(Box<config::ServeArgs>),
    /// Measure the gateway (docs/BENCHMARKS.md): runs the `tether-bench`
    /// binary beside this one with these arguments.
    #[command(disable_help_flag = true)]
    Bench(bench::BenchForward),
    /// Copy a running gateway's SQLite store to a new file, online
    /// (docs/RELIABILITY.md, "Backup and restore").
    Backup(backup::BackupArgs),
    /// Put a backup in place of a stopped gateway's SQLite store: checks
    /// it, moves the old store and its WAL aside (docs/RELIABILITY.md,
    /// "Backup and restore").
    Restore(restore::RestoreArgs),
    /// An operator's commands on a stopped gateway's store: `erase-profile
    /// NAME`, `vacuum` (docs/RELIABILITY.md, "Deletion").
    Admin(admin::AdminArgs),
    /// Run a compute host: a worker that runs turns for a gateway over
    /// stdin/stdout (docs/PROTOCOL.md Part 2).
    Host(host::HostArgs),
    /// Terminal client commands: `new`, `sessions`, `send`, `attach`
    /// (docs/CLIENT.md).
    #[command(flatten)]
    Client(client::ClientCommand),
}

/// Makes every argument whose environment variable is set but empty read
/// as if it were unset. `TETHER_TOKEN=` in a unit file or a compose file
/// usually means "none"; clap would take it as the value `""` and fail (or
/// worse, take an empty value as meant). Done on the command, before
/// parsing, so the environment itself (which compute hosts inherit) is left
/// as it is.
fn ignore_empty_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        let empty = arg
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| v.is_empty());
        if empty {
            arg.env(None::<&'static str>)
        } else {
            arg
        }
    })
    .mut_subcommands(ignore_empty_env)
}

/// Exit status for bad configuration (sysexits' EX_USAGE).
pub(crate) const EX_USAGE: u8 = 64;
/// Exit status when the database could not be reached in time (sysexits'
/// EX_UNAVAILABLE).
pub(crate) const EX_UNAVAILABLE: u8 = 69;

/// A flag or environment value clap refused. `tether serve` documents 64
/// for bad configuration, whether it comes from a flag, the environment or
/// the file; the client commands keep clap's 2 (docs/CLIENT.md). Help and
/// `--version` are not errors.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let serving = std::env::args().nth(1).as_deref() == Some("serve");
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if serving && !informational {
        let _ = e.print();
        std::process::exit(i32::from(EX_USAGE));
    }
    e.exit()
}

fn main() -> ExitCode {
    thp::disable();
    let matches = match ignore_empty_env(Cli::command()).try_get_matches() {
        Ok(m) => m,
        Err(e) => usage_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    match cli.command {
        Command::Client(cmd) => client::main(cmd),
        Command::Host(args) => host_main(args),
        Command::Bench(args) => bench::forward(args),
        Command::Backup(args) => backup::run(args),
        Command::Restore(args) => restore::run(args),
        Command::Admin(args) => admin::run(args),
        Command::Serve(args) => serve_main(*args, matches.subcommand_matches("serve")),
    }
}

/// `tether host`.
fn host_main(args: host::HostArgs) -> ExitCode {
    logging::init(args.log_format);
    // One thread: a host is one process per slot, fed one line at a
    // time; worker threads would only add their heaps and wake-ups
    // (its stdin and stdout have threads of their own).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logging::stderr_line(format_args!("tether host: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // anyhow for its `{:#}`: the error with its sources.
    match runtime
        .block_on(host::run(args))
        .map_err(anyhow::Error::from)
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "tether host stopped");
            logging::stderr_line(format_args!("tether host: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// `tether serve`: its flags resolved against the environment and the
/// config file (`sub`, the command's matches), then the gateway.
fn serve_main(args: config::ServeArgs, sub: Option<&clap::ArgMatches>) -> ExitCode {
    let args = match sub.map(|m| args.clone().resolve(m)).unwrap_or(Ok(args)) {
        Ok(a) => a,
        Err(e) => {
            logging::stderr_line(format_args!("tether: {e:#}"));
            return ExitCode::from(EX_USAGE);
        }
    };
    logging::init(args.log_format);
    thp::report();
    if !args.stdio {
        fdlimit::raise(args.max_connections);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logging::stderr_line(format_args!("tether: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve::run(args)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "tether stopped");
            logging::stderr_line(format_args!("tether: {e:#}"));
            ExitCode::FAILURE
        }
    }
}
