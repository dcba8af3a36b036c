//! The commands: one module per command family, each owning its arguments
//! and its handler over the leaf modules (`args`, `say`, `exit_codes`,
//! `logging`, `startup`, `filesystem`); here only the top-level [`Command`]
//! that gathers them and the match that hands each to its module.

pub(crate) mod db;
pub(crate) mod docs;
pub(crate) mod doctor;
pub(crate) mod git;
pub(crate) mod group;
pub(crate) mod guard;
pub(crate) mod hold;
pub(crate) mod init;
pub(crate) mod job;
pub(crate) mod lock;
pub(crate) mod mcp;
pub(crate) mod reservations;
pub(crate) mod reserve;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod state;
pub(crate) mod workspace;

use std::path::Path;

use baton_lock::{BatonDir, LockName};
use clap::Subcommand;

use self::db::DbCommand;
use self::git::GitCommand;
use self::group::GroupCommand;
use self::init::InitArgs;
use self::job::JobArgs;
use self::lock::{Flags, LockCommand};
use self::mcp::McpArgs;
use self::reservations::ReservationsArgs;
use self::reserve::ReserveArgs;
use self::run::RunArgs;
use self::serve::ServeArgs;
use self::state::StateCommand;
use self::workspace::WorkspaceCommand;
use crate::args::lock_name;
use crate::exit_codes::BATON_FAILED;

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
are comma-separated lists in sorted order), BATON_PREVIOUS_HOLDER_DIED=1 when the previous
holder of a lock or of the group's slot ended without releasing it (its work may be half
done: repair first), BATON_PREVIOUS_OUTCOME telling how that holder ended (released,
failed:<code>, killed:<signal> such as killed:SIGKILL, or died; unset before the first
run), and git's automatic maintenance runs in the
foreground in it (maintenance.autoDetach and gc.autoDetach false, through GIT_CONFIG_COUNT,
after any entries of yours), so a commit leaves nothing running. SIGINT, SIGTERM, SIGHUP and
SIGQUIT are forwarded to it. The lock is released when it exits; it is never inherited by the command,
so a daemon the command leaves behind does not keep it.

Exit status: the command's own (128+N if killed by signal N); 75 if the lock was busy
(--no-wait) or --wait elapsed; 124 if --timeout killed it; 125 if baton failed;
126 / 127 if the command could not be executed / was not found.")]
    Run(Box<RunArgs>),

    /// Inspect, take, release or break locks.
    #[command(subcommand)]
    Lock(LockCommand),

    /// Reserve paths of a repository while a command runs, or check that they are free.
    #[command(after_help = "Examples:
  baton reserve src/parser --reason 'refactor' -- ./agent.sh      exclusive, held while it runs
  baton reserve 'src/**/*.ts' docs/api.md --wait 5m -- make         several paths: all or none
  baton reserve --shared docs -- ./build-docs.sh                     shared ones coexist
  baton reserve --check src/parser/lexer.rs || echo 'someone else is on it'

A reservation names paths or globs of one repository, relative to its root (an absolute path
inside it is accepted; '..', paths outside it and symlinks leading out are refused, 125). A
path covers itself and everything below it. Every worktree of the repository and every clone
of the same origin (same user's baton dir) share the reservations. Two conflict when a file
could be covered by both and one is exclusive; disjoint ones never wait. Overlapping
requests are served first come, first served; a request for several paths is granted all at
once or not at all, so two requests in different orders never deadlock. The reservation is
held by this process and released the moment it ends, even by SIGKILL.

With --backend URL (or BATON_BACKEND) reservations live in that PostgreSQL database, keyed
by the repository's origin, so agents on every machine using it share them under the same
rules; the holder's database session holds it (its end releases it).

The command runs supervised as under `baton run --lock` (own process group, signals
forwarded, leftovers stopped before the release) with BATON_FENCING_TOKEN (the grant's
token, larger than any before in the repository), BATON_RESERVATION (the paths) and
BATON_PREVIOUS_HOLDER_DIED=1 when the holder of an overlapping reservation died holding it.

Reservations are advisory: a program that never asks is not stopped, except at commit by the
pre-commit guard (`baton git guard install`). A process that holds some paths and then asks
for more can deadlock with another doing the reverse, as with any locks: give --wait.

Exit status: the command's own; 75 busy (--no-wait), --wait elapsed, or (--check) reserved by
another live holder, named on stderr; 125 bad path, not a repository, or baton failed.")]
    Reserve(ReserveArgs),

    /// List a repository's live reservations (held and waiting), or break one.
    #[command(after_help = "Examples:
  baton reservations
  baton reservations src/parser --json
  baton reservations break 1764336000123456")]
    Reservations(ReservationsArgs),

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
    State(StateCommand),

    /// Isolated per-run git workspaces: create, list, remove, gc.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),

    /// Safe git operations: a push that rebases and retries instead of losing commits.
    #[command(subcommand)]
    Git(GitCommand),

    /// Run the job service: agent jobs over HTTP, queued, limited, each in its own workspace.
    #[command(after_help = "Examples:
  baton serve                                   127.0.0.1:7420, jobs in <baton dir>/serve.db
  baton serve --config /etc/baton/serve.toml    templates, token, limits (docs/src/reference/service-config.md)
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
    Job(JobArgs),

    /// Check that baton can work here and explain what is not right, with remedies.
    #[command(
        after_help = "Checks: where the baton dir is and which rule chose it (--dir,
$BATON_DIR, this user's <temp dir>/baton-<uid>), and holders an older baton left in this clone's
former default dir (<git common dir>/baton); its owner and permissions; the
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

    /// Serve an AI agent over MCP (stdio): path reservations, locks, state files, workspaces, push.
    #[command(after_help = "Examples:
  claude mcp add baton -- baton mcp          Claude Code
  baton mcp --repo ~/src/app --agent alice   another repository, a chosen name
  baton mcp --backend postgres://agent@db/coord   reservations shared by every machine

Tools: reserve, release, reservations, lock, unlock, state_read, state_update, state_append,
workspace_create, workspace_remove, push (see docs/src/concepts/agents.md). Everything the
session takes is held by this process: when the client closes stdin, it is all released and
baton mcp exits 0; when the client or this process dies, the kernel releases it. Reservations
are advisory: an agent that never asks is not stopped, except at commit by the pre-commit
guard. With --backend (or BATON_BACKEND) reservations live in that PostgreSQL database, keyed
by the repository's origin, held by this process's database sessions; locks and state files
stay in the baton dir.
Exit status: 0 when the client closed the session; 125 if it could not start.")]
    Mcp(McpArgs),

    /// Internal: the background holder started by `baton lock acquire`.
    #[command(name = "__hold", hide = true)]
    Hold,

    /// Set up a baton dir that several users share (`--shared GROUP`).
    #[command(after_help = "Example:
  sudo baton init --shared agents /srv/baton      then every member of group agents:
  baton --dir /srv/baton run --lock deploy -- ./deploy.sh

The dir (created if missing; DIR defaults to $BATON_DIR, never to your own default dir) and what is
already in it get group GROUP, group read and write, and the set-group-ID bit (mode 2770), so
that what any member creates there belongs to GROUP and stays usable by the others; others
get no access. Members are accepted although the dir is not theirs; anyone else is refused
with the remedy. A world-writable or symlinked dir is still refused. See
docs/src/concepts/containers.md.")]
    Init(InitArgs),
}

/// How `baton serve` and `baton job` are carried out: in this process (the
/// `baton-service` binary), or by executing `baton-service` (the `baton`
/// binary). Function pointers, so that `baton` refers to none of the job
/// service's code and the linker leaves it out: the binary that starts once
/// per `baton run` is half the size (see bench/README.md, "Where the time goes").
pub(crate) struct Services {
    pub serve: fn(ServeArgs, BatonDir) -> u8,
    pub job: fn(JobArgs) -> u8,
    /// `baton mcp`: its protocol's code (rmcp, tokio) stays out of `baton` too.
    pub mcp: fn(
        McpArgs,
        BatonDir,
        bool,
        std::sync::Arc<dyn baton_lock::reserve::ReservationStore>,
    ) -> u8,
}

/// What the commands that need no baton dir (and must not create one) take.
pub(crate) struct Plain<'a> {
    /// `--dir`, as given.
    pub dir: Option<&'a Path>,
    /// `--backend`, as given (empty is none).
    pub backend: Option<&'a str>,
    /// The whole command tree, for completions and man pages.
    pub root: fn() -> clap::Command,
}

/// Carries out a command that needs no baton dir; any other command is
/// handed back.
#[allow(clippy::result_large_err)] // moved back once per process, not a hot path
pub(crate) fn run_without_dir(
    command: Command,
    plain: &Plain<'_>,
    services: &Services,
) -> Result<u8, Command> {
    Ok(match command {
        Command::Completions { shell } => docs::cmd_completions(shell, &(plain.root)()),
        Command::Man => docs::cmd_man(plain.dir, &(plain.root)()),
        Command::Doctor { json } => {
            crate::startup::restore_default_sigpipe();
            doctor::cmd_doctor(plain.dir, plain.backend, json)
        }
        Command::Init(args) => init::cmd_init(&args, plain.dir),
        // A client of a job service: no baton dir of its own.
        Command::Job(args) => (services.job)(args),
        other => return Err(other),
    })
}

/// Carries out a command in the baton dir `dir`, with its locks in `flags.backend`.
pub(crate) fn run_in_dir(
    command: Command,
    dir: BatonDir,
    flags: &Flags<'_>,
    services: &Services,
) -> u8 {
    match command {
        Command::Serve(args) => (services.serve)(args, dir),
        Command::Mcp(args) => {
            (services.mcp)(args, dir, flags.named_dir, flags.backend.reservations())
        }
        Command::Run(args) => run::cmd_run(&dir, *args, flags),
        Command::Hold => hold::cmd_hold(&dir),
        Command::Lock(cmd) => lock::cmd_lock(&dir, cmd, flags),
        Command::Reserve(args) => reserve::cmd_reserve(&dir, args, flags),
        Command::Reservations(args) => reservations::cmd_reservations(args, flags),
        Command::Db(cmd) => db::cmd_db(cmd, flags.backend),
        Command::Group(cmd) => group::cmd_group(cmd, flags.backend),
        Command::Events { group, follow } => group::cmd_events(&dir, group.as_ref(), follow),
        Command::State(cmd) => state::cmd_state(&dir, cmd),
        Command::Workspace(cmd) => workspace::cmd_workspace(&dir, cmd, flags.named_dir),
        Command::Git(cmd) => git::cmd_git(&dir, cmd, flags),
        // Carried out by `run_without_dir`, never handed here.
        Command::Doctor { .. }
        | Command::Init(_)
        | Command::Completions { .. }
        | Command::Man
        | Command::Job(_) => BATON_FAILED,
    }
}
