//! `baton reservations`: list a repository's live reservations, or break
//! one (`break TOKEN`).

use std::path::PathBuf;

use baton_lock::reserve::ReservationRecord;
use clap::{Args, Subcommand};

use super::lock::Flags;
use super::reserve::{for_reserve_error, patterns, space_of};
use crate::say::{fail, print_json};

/// `baton reservations`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReservationsArgs {
    /// Only reservations overlapping this path or glob.
    #[arg(value_name = "PATH")]
    pub path: Option<String>,

    /// Print JSON: an array of {ticket, token, patterns, mode, granted, holder {agent, pid,
    /// client_pid, host, since, reason, principal, session}}.
    #[arg(long)]
    pub json: bool,

    /// The repository [default: the working directory's].
    #[arg(long, value_name = "DIR", global = true)]
    pub repo: Option<PathBuf>,

    /// Break a reservation.
    #[command(subcommand)]
    pub action: Option<ReservationsCommand>,
}

/// `baton reservations ...` subcommands.
#[derive(Debug, Subcommand)]
pub enum ReservationsCommand {
    /// Remove a live reservation by its token (an operator's last resort): it stops blocking
    /// anyone at once; its holder is not stopped, and can tell it was broken.
    #[command(after_help = "Example:\n  baton reservations break 1764336000123456")]
    Break {
        /// The reservation's fencing token (as `baton reservations` lists it).
        #[arg(value_name = "TOKEN")]
        token: u64,
        /// Print the broken reservation as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `baton reservations`.
pub(crate) fn cmd_reservations(args: ReservationsArgs, flags: &Flags<'_>) -> u8 {
    let store = flags.backend.reservations();
    let space = match space_of(args.repo.as_deref()) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if let Some(ReservationsCommand::Break { token, json }) = args.action {
        return match store.break_reservation(&space, token) {
            Ok(row) => {
                if json {
                    print_json(&row)
                } else {
                    outln!(
                        "baton: broke reservation {token} of {} (pid {} on {}): {}",
                        row.holder.agent,
                        row.holder.pid,
                        row.holder.host,
                        paths(&row)
                    );
                    0
                }
            }
            Err(e) => fail(&e, for_reserve_error(&e)),
        };
    }
    let filter = match &args.path {
        None => None,
        Some(p) => match patterns(&space, std::slice::from_ref(p)) {
            Ok(mut v) => v.pop(),
            Err(code) => return code,
        },
    };
    let rows = match store.reservations(&space, filter.as_ref()) {
        Ok(r) => r,
        Err(e) => return fail(&e, for_reserve_error(&e)),
    };
    if args.json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        outln!("no reservations");
        return 0;
    }
    outln!("TOKEN             MODE       STATE    AGENT (PID@HOST, SINCE)  PATHS  [REASON]");
    for r in &rows {
        let token = r.token.map_or_else(|| "-".to_string(), |t| t.to_string());
        let state = if r.granted { "held" } else { "waiting" };
        let reason = r
            .holder
            .reason
            .as_deref()
            .map(|x| format!("  [{x}]"))
            .unwrap_or_default();
        outln!(
            "{token:<17} {:<10} {state:<8} {} ({}@{}, {})  {}{reason}",
            r.mode.as_str(),
            r.holder.agent,
            r.holder.pid,
            r.holder.host,
            r.holder.since,
            paths(r)
        );
    }
    0
}

fn paths(r: &ReservationRecord) -> String {
    r.patterns
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}
