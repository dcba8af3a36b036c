//! Command-line syntax: the whole command tree, gathered from the command
//! modules (each defines its own arguments, next to its handler), the
//! global options, and the fast parse of the commands that run once per
//! step. No behaviour here.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::args::LogFormat;
use crate::commands::lock::LockCommand;
use crate::commands::run::RunArgs;
use crate::commands::state::StateCommand;
use crate::commands::Command;

/// Concurrency control for AI agents and scripts that share git repositories and state files.
///
/// Locks are kernel locks on files in the baton dir: a holder that dies, even by SIGKILL,
/// releases its lock at once, so there are no stale locks and no TTLs to tune.
#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    propagate_version = true,
    max_term_width = 100
)]
#[command(after_help = "Examples:
  baton run --lock deploy -- ./deploy.sh          run a command while holding a lock
  baton run --lock db --shared -- ./report.sh     several shared holders at once
  baton run --lock gpu --max 2 -- ./train.sh      at most 2 at a time (semaphore)
  baton lock status                               who holds what, who waits
  TOKEN=$(baton lock acquire memory --wait 30s)   hold a lock from a shell script...
  baton lock release memory --token \"$TOKEN\"       ...and release it
  baton run --group issue/42 --mode supersede -- ./agent.sh   newest run wins, older ones stop
  baton state edit tasks.json -- jq '.n += 1'     atomic read-modify-write of a state file
  baton reserve src/parser -- ./agent.sh          reserve paths of this repository while it runs
  baton -vv run --lock deploy -- ./deploy.sh      show what baton does and waits for
  baton doctor                                    can baton work here? what to fix, and how
  baton job submit --wait 'fix the tests'         a job on the job service (`baton serve`)

Exit codes: the command's own code; 75 busy / not acquired; 76 lock lost (--backend: its
database session ended, the command was stopped); 79 superseded; 124 timed out;
125 baton failed (bad usage, bad input, I/O); 126 / 127 command not executable / not found.")]
pub struct Cli {
    /// Options that every command takes.
    #[command(flatten)]
    pub globals: Globals,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options that every command takes (before or after its name).
#[derive(Debug, Args)]
pub struct Globals {
    /// Baton dir holding all coordination state [default: $BATON_DIR, else this user's dir on
    /// this machine, <temp dir>/baton-<uid> ($TMPDIR or /tmp)]
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Keep locks and groups in a PostgreSQL database, shared by every machine using it,
    /// instead of the baton dir: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE, TLS as
    /// libpq's `?sslmode=disable|prefer|require|verify-ca|verify-full` (default prefer) and
    /// `&sslrootcert=FILE|system` say (a managed database: sslmode=verify-full). Applies
    /// to `run --lock`, `run --group`, `group status` and the `lock` commands; give the
    /// `--store` URL of a `baton serve` to share its jobs' groups. The tables are created
    /// on first use (or by `baton db migrate`). A run whose database session ends stops its
    /// command and exits 76.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "BATON_BACKEND",
        hide_env_values = true
    )]
    pub backend: Option<String>,

    /// Show on stderr what baton does and waits for: -v the main steps, -vv also the lock
    /// line (position, holder waited for), git commands and retries, -vvv everything.
    /// BATON_LOG (a filter: `debug`, `baton_lock=debug,info`) overrides. Nothing without it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Print no warnings (a network filesystem, processes a command left
    /// behind, ...); errors are still printed. On success baton prints
    /// nothing on stderr anyway, so `-q` is what a git user types, and safe.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Format of the -v diagnostics: text, or one JSON object per line.
    #[arg(
        long,
        value_enum,
        global = true,
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,
}

/// The commands whose start-up cost matters, because scripts and agents run
/// them once per step (`baton run`, `baton state`, `baton lock`), are parsed
/// with a tree that holds only the one named, so that clap does not build
/// every other command's arguments and help on each call (they were about
/// half of the instructions `baton run --lock L -- true` executed). The
/// definitions are the very types of [`Cli`]; whatever the small tree does
/// not accept (`--help`, `--version`, a mistake, any other command) is
/// parsed again by [`parse`] with the whole [`Cli`], which words every
/// message. A success in the small tree is the same value as in the whole
/// one: the command is one of the whole tree's, defined by the same type,
/// and a word that names another command is an error in the small tree.
#[derive(Debug, Parser)]
#[command(name = "baton", version, propagate_version = true)]
struct HotCli<C: Subcommand> {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: C,
}

/// `baton run` alone.
#[derive(Debug, Subcommand)]
enum HotRun {
    Run(Box<RunArgs>),
}

/// `baton lock ...` alone.
#[derive(Debug, Subcommand)]
enum HotLock {
    #[command(subcommand)]
    Lock(LockCommand),
}

/// `baton state ...` alone.
#[derive(Debug, Subcommand)]
enum HotState {
    #[command(subcommand)]
    State(StateCommand),
}

impl From<HotRun> for Command {
    fn from(HotRun::Run(args): HotRun) -> Command {
        Command::Run(args)
    }
}

impl From<HotLock> for Command {
    fn from(HotLock::Lock(c): HotLock) -> Command {
        Command::Lock(c)
    }
}

impl From<HotState> for Command {
    fn from(HotState::State(c): HotState) -> Command {
        Command::State(c)
    }
}

/// Parses `args` with the small tree of `C`, if that accepts them.
fn parse_hot<C: Subcommand + Into<Command>>(args: &[OsString]) -> Option<Cli> {
    let hot = HotCli::<C>::try_parse_from(args).ok()?;
    Some(Cli {
        globals: hot.globals,
        command: hot.command.into(),
    })
}

/// The first word of `args` (after the program name) that is neither an
/// option nor the value of a global option: the command's name, if the
/// command line is well formed. Only a guess: [`parse`] checks it by parsing.
fn command_word(args: &[OsString]) -> Option<&str> {
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_str()?;
        match word {
            "--dir" | "--backend" | "--log-format" => {
                words.next();
            }
            _ if word.starts_with('-') => {}
            _ => return Some(word),
        }
    }
    None
}

/// Parses a command line (the program name first): through the small tree
/// of the command it names when that is `run`, `lock` or `state` and the
/// small tree accepts it, else through the whole [`Cli`]. The result is the
/// same either way, and every error comes from [`Cli`].
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let hot = match command_word(&args) {
        Some("run") => parse_hot::<HotRun>(&args),
        Some("lock") => parse_hot::<HotLock>(&args),
        Some("state") => parse_hot::<HotState>(&args),
        _ => None,
    };
    match hot {
        Some(cli) => Ok(cli),
        None => {
            use clap::FromArgMatches;
            let mut matches = whole_command().try_get_matches_from(args)?;
            Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut whole_command()))
        }
    }
}

/// The commands `--backend` does not apply to: `serve` keeps its jobs in
/// `--store`, `job` is a client of a service. They refuse it (see
/// [`backend_on_command_line`]), and their help does not show it.
pub const WITHOUT_BACKEND: [&str; 2] = ["serve", "job"];

/// The whole [`Cli`], with the global `--backend` hidden from the help of
/// [`WITHOUT_BACKEND`] (and their subcommands).
pub fn whole_command() -> clap::Command {
    use clap::CommandFactory;
    fn hide(c: clap::Command) -> clap::Command {
        let subs: Vec<String> = c
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        let mut c = c.mut_args(|a| {
            if a.get_id() == "backend" {
                a.hide(true)
            } else {
                a
            }
        });
        for s in subs {
            c = c.mut_subcommand(s, hide);
        }
        c
    }
    let mut cmd = Cli::command();
    // Propagates the global options into every subcommand, so that they
    // can be changed there.
    cmd.build();
    for name in WITHOUT_BACKEND {
        cmd = cmd.mut_subcommand(name, hide);
    }
    cmd
}

/// Whether `--backend` was given on the command line (not through
/// `BATON_BACKEND`, which applies to every command that takes it), before
/// any `--`.
pub fn backend_on_command_line(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
        .any(|a| a == "--backend" || a.starts_with("--backend="))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{parse, parse_hot, Cli, HotLock, HotRun, HotState};

    fn argv(line: &str) -> Vec<std::ffi::OsString> {
        std::iter::once("baton")
            .chain(line.split_whitespace())
            .map(Into::into)
            .collect()
    }

    /// What the whole tree makes of `line`, success or error, as text.
    fn whole(line: &str) -> String {
        match Cli::try_parse_from(argv(line)) {
            Ok(cli) => format!("{cli:?}"),
            Err(e) => format!("{:?}: {e}", e.kind()),
        }
    }

    fn through_parse(line: &str) -> String {
        match parse(argv(line)) {
            Ok(cli) => format!("{cli:?}"),
            Err(e) => format!("{:?}: {e}", e.kind()),
        }
    }

    #[test]
    fn the_small_trees_give_what_the_whole_tree_gives() {
        let accepted = [
            "run --lock x -- true",
            "--dir /tmp/d run --lock a --lock b --wait 5s --timeout 1m -- make -j2",
            "-vv --log-format json run --group g --mode supersede --max-pending 2 -- ./a.sh",
            "run --lock x --shared --operation op --owner me --no-wait -- sh -c 'x --dir y'",
            "run --dir /d --lock x -- run --lock y -- true",
            "--backend= run --lock x -- true",
            "lock status",
            "lock status x --json",
            "lock acquire memory --wait 30s --ttl 10m",
            "--dir /d lock release memory --token 3",
            "lock break deploy --grace 1s",
            "state edit a.json -- jq .n+=1",
            "state append e.jsonl {\"a\":1}",
            "state get a.json --json",
        ];
        for line in accepted {
            let hot = match line
                .split_whitespace()
                .find(|w| ["run", "lock", "state"].contains(w))
            {
                Some("run") => parse_hot::<HotRun>(&argv(line)),
                Some("lock") => parse_hot::<HotLock>(&argv(line)),
                _ => parse_hot::<HotState>(&argv(line)),
            };
            let hot = hot.map(|cli| format!("{cli:?}"));
            assert_eq!(hot.as_deref(), Some(whole(line).as_str()), "{line}");
            assert_eq!(through_parse(line), whole(line), "{line}");
        }
    }

    #[test]
    fn what_the_small_trees_refuse_is_worded_by_the_whole_tree() {
        let refused = [
            "run --lock x",
            "run --lock ../x -- true",
            "run --help",
            "run --version",
            "--version",
            "lock",
            "lock frobnicate",
            "state edit",
            "run --lock x --max 0 -- true",
            "--dir run lock status",
            "doctor --json",
            "events --group g",
            "help run",
            "job list",
        ];
        for line in refused {
            assert_eq!(through_parse(line), whole(line), "{line}");
        }
    }
}
