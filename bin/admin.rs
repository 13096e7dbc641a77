//! `tether admin`: an operator's commands on a store whose gateway is
//! stopped.
//!
//! - `erase-profile NAME`: erases every session of a profile, with its
//!   events and handoffs, and the profile itself (GDPR-style requests).
//! - `vacuum`: gives a SQLite store's free pages back to the file system,
//!   turning incremental vacuum on first if the store predates it.
//!
//! Why offline rather than a method of a running gateway: a running gateway
//! holds sessions in memory (their rings, their transcripts, peers attached
//! to them), and an erase must leave nothing of a profile readable through
//! any route. With the gateway stopped nothing is in memory, and the store's
//! lock (the file lock of SQLite, the writer's advisory lock of PostgreSQL)
//! proves it: the command refuses to run while a gateway holds the store.
//! It also needs no credential beyond access to the store itself, which an
//! operator who may erase a profile has anyway, where an admin method would
//! need an authority over every profile that the client tokens do not give.
//! One session is deleted online with `session.delete`.

use std::path::PathBuf;
use std::process::ExitCode;

use tether_store::Backend;

/// Events (or sessions) per erase transaction.
const BATCH: u32 = 2000;

/// `tether admin`.
#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
    /// The gateway's data directory (its store is DATA_DIR/tether.db).
    #[arg(
        long,
        env = "TETHER_DATA_DIR",
        default_value = "./tether-data",
        global = true
    )]
    pub data_dir: PathBuf,
    /// The store, if not DATA_DIR/tether.db: `sqlite://PATH` or
    /// `postgres://…`.
    #[arg(long, env = "TETHER_DATABASE_URL", global = true)]
    pub database_url: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Erase every session of profile NAME, its events, its handoffs and
    /// the profile itself. The gateway must be stopped.
    EraseProfile {
        /// The profile.
        name: String,
    },
    /// Give a SQLite store's free pages back to the file system (turning
    /// incremental vacuum on first, if the store predates it). The
    /// gateway must be stopped.
    Vacuum,
}

pub fn run(args: AdminArgs) -> ExitCode {
    let backend = match args.database_url.as_deref() {
        None => Backend::sqlite(args.data_dir.join("tether.db")),
        Some(url) => match Backend::from_url(url) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("tether admin: {e}");
                return ExitCode::from(crate::EX_USAGE);
            }
        },
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tether admin: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match run_on(args.command, backend).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("tether admin: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn run_on(command: AdminCommand, backend: Backend) -> anyhow::Result<ExitCode> {
    let described = backend.describe();
    let store = match tether_store::open(backend.clone()).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!(
                "tether admin: cannot open {described}: {e} (is a gateway still running on it? \
                 stop it first)"
            );
            return Ok(ExitCode::from(if e.is_usage() {
                crate::EX_USAGE
            } else {
                crate::EX_UNAVAILABLE
            }));
        }
    };
    match command {
        AdminCommand::EraseProfile { name } => {
            let erased = store.eraser.erase_profile(&name, BATCH).await?;
            let mut pages = 0;
            loop {
                let given = store.eraser.reclaim(u32::MAX).await?;
                pages += given;
                if given == 0 {
                    break;
                }
            }
            println!(
                "erased profile {name:?} from {described}: {erased} sessions; \
                 {pages} free pages given back"
            );
        }
        AdminCommand::Vacuum => match &backend {
            Backend::Sqlite(cfg) => {
                let pages = tether_store::vacuum_sqlite(cfg).await?;
                println!("vacuumed {described}: {pages} pages given back");
            }
            Backend::Postgres(_) => {
                eprintln!(
                    "tether admin vacuum: {described} is PostgreSQL, whose autovacuum reuses \
                     the space (VACUUM FULL gives it back to the file system; \
                     docs/RELIABILITY.md, \"Retention\")"
                );
                return Ok(ExitCode::from(crate::EX_USAGE));
            }
        },
    }
    drop(store);
    Ok(ExitCode::SUCCESS)
}
