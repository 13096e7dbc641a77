//! `tether backup PATH`: a consistent copy of a running gateway's SQLite
//! store, taken without stopping it (`tether_store::backup_sqlite`). A
//! PostgreSQL store is backed up with PostgreSQL's own tools
//! (docs/RELIABILITY.md, "Backup and restore").

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `tether backup`.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The file to write: a new SQLite database holding every event
    /// committed before the backup began. Never overwritten.
    pub path: PathBuf,
    /// The gateway's data directory (its store is DATA_DIR/tether.db).
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    pub data_dir: PathBuf,
    /// The store, if not DATA_DIR/tether.db: `sqlite://PATH`.
    #[arg(long, env = "TETHER_DATABASE_URL")]
    pub database_url: Option<String>,
    /// At most this many MiB written a second (0: as fast as the disk
    /// goes). The copy shares the disk with the gateway's syncs: unpaced,
    /// a large store's copy can hold its commits for a second.
    #[arg(long, default_value_t = tether_store::DEFAULT_PACE_MIB_S)]
    pub pace_mib_s: u32,
}

pub fn run(args: BackupArgs) -> ExitCode {
    let db = match args.database_url.as_deref() {
        None => args.data_dir.join("tether.db"),
        Some(url) => match tether_store::Backend::from_url(url) {
            Ok(tether_store::Backend::Sqlite(cfg)) => cfg.db_path,
            Ok(tether_store::Backend::Postgres(_)) => {
                eprintln!(
                    "tether backup: {} is PostgreSQL; back it up with pg_dump or \
                     point-in-time recovery (docs/RELIABILITY.md, \"Backup and restore\")",
                    tether_store::mask_url(url)
                );
                return ExitCode::from(crate::EX_USAGE);
            }
            Err(e) => {
                eprintln!("tether backup: {e}");
                return ExitCode::from(crate::EX_USAGE);
            }
        },
    };
    match tether_store::backup_sqlite(&db, &args.path, args.pace_mib_s) {
        Ok(r) => {
            println!(
                "backed up {} sessions and {} events (epoch {}) from {} to {}: {} bytes in {} ms",
                r.sessions,
                r.events,
                r.epoch,
                db.display(),
                args.path.display(),
                r.bytes,
                r.took.as_millis()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tether backup: {e}");
            ExitCode::FAILURE
        }
    }
}
