//! Command-line syntax: every command, flag and help text. No behaviour here.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use baton_lock::LockName;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::commands::InvalidInput;
use crate::duration::{parse_duration, parse_positive_duration};

fn lock_name(s: &str) -> Result<LockName, String> {
    LockName::new(s).map_err(|e| e.to_string())
}

/// A fencing token as `lock acquire` prints it: a positive integer (grants
/// start at 1, so 0 names none).
fn token(s: &str) -> Result<u64, InvalidInput> {
    s.parse::<u64>().ok().filter(|t| *t > 0).ok_or_else(|| {
        InvalidInput(format!(
            "invalid token '{s}': a token is a positive integer printed by `baton lock acquire`"
        ))
    })
}

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
    /// Baton dir holding all coordination state [default: $BATON_DIR, else <git common
    /// dir>/baton inside a repository, else $XDG_RUNTIME_DIR/baton, else /tmp/baton-<uid>]
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
    Run(RunArgs),
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
    State(crate::state_cli::StateCommand),
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

/// How diagnostics (`-v`) are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per event: time, level, span (with the run id), target, message, fields.
    Text,
    /// One JSON object per line, with the spans (and so the run id) in `spans`.
    Json,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command under locks and/or in a concurrency group.
    #[command(after_help = "Examples:
  baton run --lock deploy -- ./deploy.sh
  baton run --lock repo/main --wait 30s --timeout 10m -- git push
  baton run --lock a --lock b -- make        # locks are taken in sorted order: no deadlock
  baton run --lock cache --shared -- ./read-cache.sh
  baton run --lock gpu --max 2 -- python train.py
  baton run --group issue/42 --mode supersede -- ./agent.sh     # newest message wins
  baton run --group nightly --mode skip -- ./sync.sh            # don't pile up
  baton run --group deploy --max-pending 3 -- ./deploy.sh       # bounded queue

Groups (--group KEY): runs of one key are serialised (queue, default; --max N at a time), or a
new run cancels the running one and older waiters (supersede), or replaces the waiting one
(coalesce), or is dropped if the key is busy (skip, exit 75). Superseded runs exit 79; their
command gets TERM, then KILL after --grace. All runs of a key must use the same mode and --max.
With --group, --max applies to the group; the command also gets BATON_GROUP.

The command runs in its own process group with BATON_LOCK, BATON_FENCING_TOKEN,
BATON_RUN_ID and BATON_DIR set (with several locks, BATON_LOCK and BATON_FENCING_TOKEN
are comma-separated lists in sorted order). SIGINT, SIGTERM, SIGHUP and SIGQUIT are
forwarded to it. The lock is released when it exits; it is never inherited by the command,
so a daemon the command leaves behind does not keep it.

Exit status: the command's own (128+N if killed by signal N); 75 if the lock was busy
(--no-wait) or --wait elapsed; 124 if --timeout killed it; 125 if baton failed;
126 / 127 if the command could not be executed / was not found.")]
    Run(RunArgs),

    /// Inspect, take, release or break locks.
    #[command(subcommand)]
    Lock(LockCommand),

    /// Inspect concurrency groups.
    #[command(subcommand)]
    Group(GroupCommand),

    /// Print the run lifecycle events (JSON lines): queued, started, superseded, finished, skipped.
    #[command(
        after_help = "Examples:\n  baton events --group issue/42\n  baton events --follow | jq -c 'select(.event == \"superseded\")'\n\nThe log (<baton dir>/events.jsonl) is renamed to events.jsonl.1 when it reaches BATON_EVENTS_MAX_BYTES (default 4 MiB); both are read, oldest first, and --follow continues across the rename."
    )]
    Events {
        /// Only this group's events.
        #[arg(long, value_name = "KEY", value_parser = lock_name)]
        group: Option<LockName>,
        /// Keep printing events as they happen.
        #[arg(long)]
        follow: bool,
    },

    /// Crash-safe state files: atomic JSON edits, JSONL appends, compare-and-swap.
    #[command(subcommand)]
    State(crate::state_cli::StateCommand),

    /// Isolated per-run git workspaces: create, list, remove, gc.
    #[command(subcommand)]
    Workspace(crate::git_cli::WorkspaceCommand),

    /// Safe git operations: a push that rebases and retries instead of losing commits.
    #[command(subcommand)]
    Git(crate::git_cli::GitCommand),

    /// Run the job service: agent jobs over HTTP, queued, limited, each in its own workspace.
    #[command(after_help = "Examples:
  baton serve                                   127.0.0.1:7420, jobs in <baton dir>/serve.db
  baton serve --config /etc/baton/serve.toml    templates, token, limits (see README \"Job service\")
  baton serve --listen 127.0.0.1:0 --max-concurrency 4

Flags override the config file. The first line on stdout is
`baton serve: listening on http://ADDR`. SIGTERM or SIGINT drains: new jobs are refused
(503), a chat call whose job is still queued is answered 503 and its job cancelled,
running ones may finish for drain_timeout, then they are cancelled; queued jobs
stay for the next start. One service per baton dir and per SQLite store. Exit status: 0
after a drain; 125 if the service could not start (nothing changed then).")]
    Serve(ServeArgs),

    /// Submit, inspect, follow and cancel jobs of a job service (`baton serve`).
    #[command(after_help = "Examples:
  baton job submit 'fix the failing test'              prints the job's id
  baton job submit --wait --group issue/42 --mode supersede 'handle the new comment'
  baton job list --status running
  baton job log \"$ID\" --follow
  baton job cancel \"$ID\"
  BATON_SERVER=http://build-box:7420 BATON_TOKEN=\"$(cat ~/.baton-token)\" baton job list

The service is --server, else $BATON_SERVER, else http://127.0.0.1:7420; its token is read
from --token-file, else $BATON_TOKEN (never put a token on the command line). Errors: 75 if
the service is full or shutting down (retry after the time named), 125 if it cannot be
reached or refuses the request; `submit --wait` exits with the job's code (see its help).")]
    Job(crate::job_cli::JobArgs),

    /// Check that baton can work here and explain what is not right, with remedies.
    #[command(
        after_help = "Checks: where the baton dir is and which rule chose it (--dir,
$BATON_DIR, git repository, $XDG_RUNTIME_DIR, temp dir); its owner and permissions; the
filesystem under it (network and FUSE filesystems are warned about loudly: kernel locks there
depend on a server or a daemon); whether OFD locks work there (a real probe); inotify; the git
version; free space for workspaces; leftover workspaces of dead owners; the PID namespace
(container or host) and whether /proc is its own; with --backend, the PostgreSQL database:
reachable, baton's tables there (or creatable), the user's privileges.

Exit status: 0 all well; 1 warnings (baton works, see the remedies); 125 baton cannot work there.

Example:\n  baton doctor\n  baton --dir /mnt/shared/baton doctor --json | jq '.checks[] | select(.status != \"ok\")'"
    )]
    Doctor {
        /// Print JSON {baton_dir, rule, status, checks: [{name, status, summary, remedy, detail}]}.
        #[arg(long)]
        json: bool,
    },

    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    #[command(after_help = "Examples:
  baton completions bash > ~/.local/share/bash-completion/completions/baton
  baton completions zsh > \"${fpath[1]}/_baton\"
  baton completions fish > ~/.config/fish/completions/baton.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Write man pages for baton and every subcommand into the directory given by --dir.
    #[command(after_help = "Example:
  baton man --dir ~/.local/share/man/man1     # baton.1, baton-run.1, baton-lock-status.1, ...

Here --dir names where the pages go (created if missing), not a baton dir; the paths
written are printed, one per line.")]
    Man,

    /// The PostgreSQL backend's tables (--backend).
    #[command(subcommand)]
    Db(DbCommand),

    /// Internal: the background holder started by `baton lock acquire`.
    #[command(name = "__hold", hide = true)]
    Hold,

    /// Set up a baton dir that several users share (`--shared GROUP`).
    #[command(after_help = "Example:
  sudo baton init --shared agents /srv/baton      then every member of group agents:
  baton --dir /srv/baton run --lock deploy -- ./deploy.sh

The dir (created if missing; DIR defaults to the baton dir baton would use) and what is
already in it get group GROUP, group read and write, and the set-group-ID bit (mode 2770), so
that what any member creates there belongs to GROUP and stays usable by the others; others
get no access. Members are accepted although the dir is not theirs; anyone else is refused
with the remedy. A world-writable or symlinked dir is still refused. See README
\"Containers and sandboxes\".")]
    Init(InitArgs),
}

/// `baton init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Share the dir with this group (a name or a numeric id).
    #[arg(long, value_name = "GROUP", required = true)]
    pub shared: String,
    /// The baton dir [default: the one baton would use here].
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

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

/// `baton serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The TOML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7420]; a non-loopback one requires a token.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Jobs running at once [default: 10]; with a PostgreSQL store, across all its nodes.
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<u64>,
    /// Jobs running at once on this node (1..=max-concurrency) [default: max-concurrency].
    #[arg(long, value_name = "N")]
    pub node_max_concurrency: Option<u64>,
    /// Running + queued jobs never exceed this; beyond it submissions get 429 [default: 100].
    #[arg(long, value_name = "N")]
    pub max_queue_depth: Option<u64>,
    /// Finished jobs and their logs are removed this long after they end [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub job_ttl: Option<Duration>,
    /// The job store [default: sqlite://<baton dir>/serve.db], or postgres://... (TLS as
    /// libpq's `?sslmode=...&sslrootcert=...` say; default prefer).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

/// How long to wait for a lock.
#[derive(Debug, Args, Clone, Copy)]
pub struct WaitArgs {
    /// Give up if the lock is not acquired within this long (e.g. 250ms, 5s, 2m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once (exit 75) if the lock is busy or others already wait for it.
    #[arg(long)]
    pub no_wait: bool,
}

/// How the lock is shared.
#[derive(Debug, Args, Clone, Copy)]
pub struct ModeArgs {
    /// Take a shared (read) lock: many shared holders at once, exclusive holders wait.
    #[arg(long, conflicts_with = "max")]
    pub shared: bool,

    /// Use the lock as a semaphore with N slots (with --group: N runs of the group at once,
    /// mode queue); every user of the name must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max: Option<u32>,
}

/// What is recorded about the holder.
#[derive(Debug, Args, Clone)]
pub struct HolderArgs {
    /// What the holder does, shown by `baton lock status` [default: the command line].
    #[arg(long, value_name = "TEXT")]
    pub operation: Option<String>,

    /// Who the holder acts for [default: user@host].
    #[arg(long, value_name = "TEXT")]
    pub owner: Option<String>,
}

/// Group modes on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Every run executes, one at a time (or --max at a time), in arrival order.
    Queue,
    /// A new run cancels the running one and every older waiting one (they exit 79).
    Supersede,
    /// The running run finishes; only the newest waiting run runs next (others exit 79).
    Coalesce,
    /// If the group is running or has a waiter, exit 75 at once without running.
    Skip,
}

/// `baton run`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").args(["locks", "group", "workspace"]).required(true).multiple(true)))]
pub struct RunArgs {
    /// Lock to hold while the command runs; repeat for several.
    #[arg(long = "lock", value_name = "NAME", value_parser = lock_name)]
    pub locks: Vec<LockName>,

    /// Run in this concurrency group (key rules as lock names); see --mode.
    #[arg(long, value_name = "KEY", value_parser = lock_name)]
    pub group: Option<LockName>,

    /// How runs of the group relate.
    #[arg(long, value_enum, default_value = "queue", requires = "group")]
    pub mode: ModeArg,

    /// Queue mode: refuse (exit 75) an arrival when this many runs already wait.
    #[arg(long, value_name = "N", requires = "group", value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub max_pending: Option<u32>,

    /// Shell command run when this run is superseded (BATON_SUPERSEDED_BY is set), at most --grace long.
    #[arg(long, value_name = "CMD", requires = "group")]
    pub on_superseded: Option<String>,

    #[command(flatten)]
    pub lock_mode: ModeArgs,

    #[command(flatten)]
    pub wait: WaitArgs,

    /// Kill the command's whole process group after this long (TERM, --grace, KILL); exit 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    /// Time between SIGTERM and SIGKILL when stopping the command.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, default_value = "10s")]
    pub grace: Duration,

    /// Leave processes that the command started in the background running
    /// after it exits, for a command that starts a daemon on purpose. By
    /// default they are terminated (TERM, --grace, KILL) before the locks are
    /// released, so nothing the command started runs beside the next holder.
    #[arg(long)]
    pub leave_leftovers: bool,

    #[command(flatten)]
    pub holder: HolderArgs,

    #[command(flatten)]
    pub workspace: crate::git_cli::RunWorkspaceArgs,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

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

/// `baton lock ...`.
#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Show a lock (or every lock): holder, mode, waiters, and whether the last holder died.
    #[command(after_help = "Examples:
  baton lock status deploy
  baton lock status --json | jq '.[] | select(.held)'

JSON: one object per lock (an array without NAME) with name, held, mode, max, holder
{pid, host, owner, operation, run_id, acquired_at, token, alive, ...}, holders, waiters,
last_holder_died, last_holder, last_token, content (ok|empty|unreadable|missing).")]
    Status {
        /// The lock; all locks when omitted.
        #[arg(value_parser = lock_name)]
        name: Option<LockName>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// List every lock in the baton dir.
    #[command(after_help = "Example:\n  baton lock list --json")]
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Stop a lock's holder if it is a live process on this host (TERM, --grace, KILL).
    #[command(after_help = "Example:\n  baton lock break deploy --grace 5s

The lock file is never removed or rewritten: the kernel releases the lock when the holder
exits. A holder on another host is refused. A `baton run` holder forwards the TERM to its
command and stops it with its own grace period, so give --grace more time than that.")]
    Break {
        /// The lock.
        #[arg(value_parser = lock_name)]
        name: LockName,
        /// Time between SIGTERM and SIGKILL.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, default_value = "15s")]
        grace: Duration,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Take a lock for a shell script: a background holder keeps it until released.
    #[command(after_help = "Example:
  TOKEN=$(baton lock acquire memory --wait 30s --ttl 10m) || exit 1
  ... critical section, pass $TOKEN to stores that check fencing ...
  baton lock release memory --token \"$TOKEN\"

Prints the fencing token. The lock is held by a small background process until
`baton lock release`, until --ttl elapses, or until the process that ran `acquire`
(usually your script's shell) exits, whichever comes first.")]
    Acquire {
        /// The lock.
        #[arg(value_parser = lock_name)]
        name: LockName,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        mode: ModeArgs,
        /// Release automatically after this long.
        #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, allow_hyphen_values = true)]
        ttl: Option<Duration>,
        #[command(flatten)]
        holder: HolderArgs,
        /// Print JSON {name, token, run_id, holder_pid} instead of the token.
        #[arg(long)]
        json: bool,
    },

    /// Release a lock taken with `baton lock acquire`.
    #[command(after_help = "Example:\n  baton lock release memory --token \"$TOKEN\"

With --token, only that grant is released: a token that is no longer current changes
nothing and exits 75.")]
    Release {
        /// The lock.
        #[arg(value_parser = lock_name)]
        name: LockName,
        /// The token printed by `acquire`. Without it, only a hold that this
        /// script (the process that ran `acquire`) took is released.
        #[arg(long, value_name = "N", value_parser = token, allow_hyphen_values = true)]
        token: Option<u64>,
        /// Release the hold even if another script took it.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
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
