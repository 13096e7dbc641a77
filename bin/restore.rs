//! `tether restore BACKUP`: puts a backup in place of a stopped gateway's
//! SQLite store, safely (`tether_store::restore_sqlite`: the gateway's
//! locks taken, the copy's integrity checked, the old store and its WAL
//! moved aside together). A PostgreSQL store is restored with
//! PostgreSQL's own tools (docs/RELIABILITY.md, "Backup and restore").

use std::path::PathBuf;
use std::process::ExitCode;

use tether_store::RestoreError;

/// Arguments of `tether restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The backup to restore: a file `tether backup` wrote.
    pub backup: PathBuf,
    /// The gateway's data directory (its store is DATA_DIR/tether.db).
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    pub data_dir: PathBuf,
    /// The store, if not DATA_DIR/tether.db: `sqlite://PATH`.
    #[arg(long, env = "TETHER_DATABASE_URL")]
    pub database_url: Option<String>,
}

pub fn run(args: RestoreArgs) -> ExitCode {
    let db = match args.database_url.as_deref() {
        None => args.data_dir.join("tether.db"),
        Some(url) => match tether_store::Backend::from_url(url) {
            Ok(tether_store::Backend::Sqlite(cfg)) => cfg.db_path,
            Ok(tether_store::Backend::Postgres(_)) => {
                eprintln!(
                    "tether restore: {} is PostgreSQL; restore it with pg_restore or \
                     point-in-time recovery (docs/RELIABILITY.md, \"Backup and restore\")",
                    tether_store::mask_url(url)
                );
                return ExitCode::from(crate::EX_USAGE);
            }
            Err(e) => {
                eprintln!("tether restore: {e}");
                return ExitCode::from(crate::EX_USAGE);
            }
        },
    };
    match tether_store::restore_sqlite(&args.backup, &db, &args.data_dir) {
        Ok(r) => {
            println!(
                "restored {} sessions and {} events (epoch {}) from {} to {}",
                r.sessions,
                r.events,
                r.epoch,
                args.backup.display(),
                db.display()
            );
            if let Some(old) = &r.replaced {
                println!(
                    "the store that was there is now {} (with its -wal, if it had one); \
                     delete it once the restore is what you want",
                    old.display()
                );
            }
            if let Some((held, served)) = r.older_than_served {
                println!(
                    "this data directory served {served} events of epoch {}, the backup holds \
                     {held}: the next gateway gives the store a new epoch, and clients that saw \
                     more are told their history was lost",
                    r.epoch
                );
            }
            ExitCode::SUCCESS
        }
        Err(e @ RestoreError::Held(_)) => {
            eprintln!("tether restore: {e}");
            ExitCode::from(crate::EX_USAGE)
        }
        Err(e) => {
            eprintln!("tether restore: nothing restored: {e}");
            ExitCode::FAILURE
        }
    }
}
