//! The terminal client: `tether new | sessions | send | attach | hosts`.
//!
//! These commands are ordinary protocol clients living in the same binary as
//! the gateway, so that a shell (or a script) can drive a session without
//! installing anything else. They speak only the public wire protocol over
//! WebSocket (docs/PROTOCOL.md Part 1); nothing here reaches into the
//! gateway's internals, which keeps them honest examples of a client.
//!
//! Exit statuses are part of the interface (scripts branch on them), so they
//! are decided here once: 0 success, 1 the gateway answered but the request
//! or the turn failed, 2 the command could not talk to the gateway at all
//! (bad invocation, unreachable, refused token, connection lost).

mod attach;
mod conn;
mod hosts;
mod new;
mod outcome;
mod presence;
mod send;
mod sessions;
mod view;

use std::process::ExitCode;

use clap::{Args, Subcommand};

use conn::ClientError;

/// Where the gateway listens by default (`tether serve` without `--listen`).
const DEFAULT_URL: &str = "ws://127.0.0.1:7878/ws";

/// The client subcommands, flattened into `tether`'s own.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Create a session and print its id (only the id, for `$(...)`).
    New(new::NewArgs),
    /// List sessions, newest first.
    Sessions(sessions::SessionsArgs),
    /// Submit one prompt to a session and stream the reply to stdout.
    Send(send::SendArgs),
    /// Follow a session: print its transcript, stream live events, and
    /// submit each line of stdin as a prompt.
    Attach(attach::AttachArgs),
    /// List this gateway's compute hosts (`--pids`: only their pids, for
    /// `kill -9 $(tether hosts --pids)`).
    Hosts(hosts::HostsArgs),
}

/// How to reach the gateway; shared by every client command.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Gateway WebSocket URL (`http://HOST:PORT` and `HOST:PORT` are
    /// accepted too and mean `ws://HOST:PORT/ws`).
    #[arg(long, env = "TETHER_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// Bearer token, for a gateway started with `--token` (the token only,
    /// without the `PROFILE:` prefix the gateway's flag takes).
    #[arg(long, env = "TETHER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Profile to act in, for a gateway without tokens (with tokens the
    /// token decides the profile).
    #[arg(long, env = "TETHER_PROFILE")]
    pub profile: Option<String>,
}

/// Exit statuses of the client commands.
pub mod exit {
    /// The command did what it was asked.
    pub const OK: u8 = 0;
    /// The gateway answered with an error, or the turn failed or was
    /// interrupted.
    pub const FAILED: u8 = 1;
    /// Bad invocation, or the gateway could not be reached, refused the
    /// token, or dropped the connection (`send`).
    pub const USAGE: u8 = 2;
    /// `attach` quit on Ctrl-C (128 + SIGINT, as shells report it).
    pub const SIGINT: u8 = 130;
}

/// Text appended to `--help` of the commands that stream a turn.
const EXIT_HELP: &str = "\
Exit status:
  0  the turn completed (send), or stdin ended / the session closed (attach)
  1  the gateway answered with an error (unknown or closed session, ...),
     or the turn ended with an error or was interrupted (send)
  2  bad usage, gateway unreachable, token refused (HTTP 401/403),
     or the connection was lost (send)
  130  quit on Ctrl-C";

/// Runs one client command to completion and maps its outcome to an exit
/// status, reporting failures on stderr.
pub fn main(cmd: ClientCommand) -> ExitCode {
    let name = match &cmd {
        ClientCommand::New(_) => "new",
        ClientCommand::Sessions(_) => "sessions",
        ClientCommand::Send(_) => "send",
        ClientCommand::Attach(_) => "attach",
        ClientCommand::Hosts(_) => "hosts",
    };
    // One thread is plenty for one connection; the stdin reader of `attach`
    // has its own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tether {name}: cannot start the runtime: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let outcome = runtime.block_on(async move {
        match cmd {
            ClientCommand::New(args) => new::run(args).await,
            ClientCommand::Sessions(args) => sessions::run(args).await,
            ClientCommand::Send(args) => send::run(args).await,
            ClientCommand::Attach(args) => attach::run(args).await,
            ClientCommand::Hosts(args) => hosts::run(args).await,
        }
    });
    // Do not wait for tasks still blocked on stdin or the socket.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`tether sessions | head -1`): nobody is
        // left to tell, so leave quietly, as `cat` and `ls` do.
        Err(ClientError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::from(exit::FAILED)
        }
        Err(e) => {
            eprintln!("tether {name}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
