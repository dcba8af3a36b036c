//! `baton db migrate`: baton's tables in the `--backend` database.

use baton_run::Backend;
use clap::Subcommand;

use crate::exit_codes::BATON_FAILED;
use crate::say::fail;

/// `baton db ...`.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create or upgrade baton's tables in the --backend database (done on first use too;
    /// run it once as the database's owner when agents connect as users who may not
    /// create tables).
    #[command(
        after_help = "Example:\n  baton --backend postgres://admin@db.internal/agents db migrate"
    )]
    Migrate,
}

/// `baton db ...`.
pub(crate) fn cmd_db(cmd: DbCommand, backend: &Backend) -> u8 {
    match cmd {
        DbCommand::Migrate => match backend.migrate() {
            Ok(m) => {
                outln!(
                    "baton's tables are at schema version {} in {}",
                    m.version,
                    m.place
                );
                0
            }
            Err(e) => fail(&e, BATON_FAILED),
        },
    }
}
