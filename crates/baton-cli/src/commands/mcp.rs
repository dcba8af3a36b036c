//! `baton mcp`: the MCP server over stdio (in the `baton-service` binary
//! only; the work is done by `baton_mcp`). With `--backend` (or
//! `BATON_BACKEND`) its path reservations are kept in that database;
//! its named locks and state files stay in the baton dir.

use std::path::PathBuf;

use std::sync::Arc;

use baton_lock::reserve::ReservationStore;
use baton_lock::BatonDir;
use clap::Args;

use crate::exit_codes::BATON_FAILED;
use crate::say::fail;

/// `baton mcp` options.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The repository whose paths are reserved and whose state files are read and
    /// changed [default: the one at or above the working directory].
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// The agent's name shown to others [default: the client's name and pid, as the client
    /// gives it in `initialize`, e.g. claude-code-4242].
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
}

/// `baton mcp`; `reservations`: where path reservations are kept (the
/// baton dir's, or `--backend`'s database).
pub(crate) fn cmd_mcp(
    args: McpArgs,
    dir: BatonDir,
    named_dir: bool,
    reservations: Arc<dyn ReservationStore>,
) -> u8 {
    let mut config =
        match baton_mcp::Config::for_repo(dir, named_dir, args.repo.as_deref(), args.agent) {
            Ok(c) => c,
            Err(e) => return fail(&e, BATON_FAILED),
        };
    config.reservations = reservations;
    match baton_mcp::serve_stdio(config) {
        Ok(()) => 0,
        Err(e) => fail(&e, BATON_FAILED),
    }
}
