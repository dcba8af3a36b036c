//! `baton mcp`: the MCP server over stdio (in the `baton-service` binary
//! only; the work is done by `baton_mcp`).

use std::path::PathBuf;

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

/// `baton mcp`.
pub(crate) fn cmd_mcp(args: McpArgs, dir: BatonDir, named_dir: bool) -> u8 {
    let config = match baton_mcp::Config::for_repo(dir, named_dir, args.repo.as_deref(), args.agent)
    {
        Ok(c) => c,
        Err(e) => return fail(&e, BATON_FAILED),
    };
    match baton_mcp::serve_stdio(config) {
        Ok(()) => 0,
        Err(e) => fail(&e, BATON_FAILED),
    }
}
