//! `baton group status` and `baton events`: what the concurrency groups
//! are doing, and what they did.

use baton_lock::{BatonDir, LockName};
use baton_run::events::print_events;
use baton_run::Backend;
use clap::Subcommand;

use crate::args::lock_name;
use crate::exit_codes::for_run_error;
use crate::say::{fail, print_json};
use crate::startup::restore_default_sigpipe;

/// `baton group ...`.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Show a group (or all): mode, running run, waiting runs in order, counters.
    #[command(after_help = "Example:\n  baton group status issue/42 --json")]
    Status {
        /// The group key; all groups when omitted.
        #[arg(value_parser = lock_name)]
        key: Option<LockName>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `baton group ...`.
pub(crate) fn cmd_group(cmd: GroupCommand, backend: &Backend) -> u8 {
    match cmd {
        GroupCommand::Status { key, json } => {
            restore_default_sigpipe();
            match backend.group_status(key.as_ref()) {
                Ok(all) => print_groups(&all, key.is_some(), json),
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
    }
}

/// `baton events [--group KEY] [--follow]`.
pub(crate) fn cmd_events(dir: &BatonDir, group: Option<&LockName>, follow: bool) -> u8 {
    restore_default_sigpipe();
    let mut out = std::io::stdout();
    match print_events(dir, group.map(LockName::as_str), follow, &mut out) {
        Ok(()) => 0,
        Err(e) => fail(&e, for_run_error(&e)),
    }
}

/// Prints `baton group status`.
fn print_groups(all: &[baton_run::GroupStatus], one: bool, json: bool) -> u8 {
    if json {
        return if one {
            match all.first() {
                Some(g) => print_json(g),
                None => print_json(&serde_json::Value::Null),
            }
        } else {
            print_json(all)
        };
    }
    if all.is_empty() {
        outln!("no groups");
        return 0;
    }
    for g in all {
        let mode = g.mode.map(|m| m.as_str()).unwrap_or("idle");
        let counters = match (g.completed, g.superseded, g.skipped) {
            (Some(completed), Some(superseded), Some(skipped)) => {
                format!("  completed {completed}  superseded {superseded}  skipped {skipped}")
            }
            _ => String::new(), // not counted (PostgreSQL)
        };
        outln!(
            "group {}  mode {}{}{counters}",
            g.key,
            mode,
            if g.max > 1 {
                format!(" (max {})", g.max)
            } else {
                String::new()
            },
        );
        for r in &g.running {
            outln!(
                "  running  run {}  pid {}  since {}  {}",
                r.run_id,
                r.process.pid,
                r.started_at.as_deref().unwrap_or("-"),
                r.command
            );
        }
        for (i, r) in g.waiting.iter().enumerate() {
            outln!(
                "  waiting  #{}  run {}  pid {}  since {}  {}{}",
                i + 1,
                r.run_id,
                r.process.pid,
                r.queued_at,
                r.command,
                r.superseded_by
                    .as_deref()
                    .map(|b| format!("  (superseded by {b})"))
                    .unwrap_or_default()
            );
        }
    }
    0
}
