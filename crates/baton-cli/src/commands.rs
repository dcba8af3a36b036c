//! Dispatch: each command calls one library function and prints its result.

use std::error::Error;
use std::time::Duration;

use std::sync::Arc;

use baton_lock::{list, BatonDir, Mode, WaitPolicy};
use baton_proc::LeftoverPolicy;
use baton_run::events::print_events;
use baton_run::hold::{
    break_lock, caller_to_watch, lock_status, release_held, serve_hold, start_holder, HoldRequest,
};
use baton_run::{
    group_status, remote_group_status, run, Backend, GroupMode, GroupRequest, RunControl,
    RunRequest,
};

use crate::cli::{
    Cli, Command, DbCommand, GroupCommand, LockCommand, LogFormat, ModeArg, ModeArgs, WaitArgs,
};
use crate::exit_codes::{for_child, for_lock_error, for_run_error, BATON_FAILED};
use crate::{docs, doctor, logging, output};

/// How `baton serve` and `baton job` are carried out: in this process (the
/// `baton-service` binary), or by executing `baton-service` (the `baton`
/// binary). Function pointers, so that `baton` refers to none of the job
/// service's code and the linker leaves it out: the binary that starts once
/// per `baton run` is half the size (see bench/README.md, "Where the time goes").
struct Services {
    serve: fn(crate::cli::ServeArgs, BatonDir) -> u8,
    job: fn(crate::job_cli::JobArgs) -> u8,
}

/// The `baton` command: runs the CLI and returns the process exit code;
/// `serve` and `job` are handed to the `baton-service` binary next to it.
pub fn main() -> u8 {
    crate::say::finish(run_cli(&Services {
        serve: |_, _| crate::service::exec_service(),
        job: |_| crate::service::exec_service(),
    }))
}

/// The `baton-service` command: the whole CLI, `serve` and `job` included.
pub fn service_main() -> u8 {
    crate::say::finish(run_cli(&Services {
        serve,
        job: crate::job_cli::run,
    }))
}

fn run_cli(services: &Services) -> u8 {
    // A run's guardian (see `baton_proc::guard`): this same program,
    // executed by the run's supervisor; not a command of the CLI.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(baton_proc::GUARD_ARG)) {
        return u8::try_from(baton_proc::guardian_main()).unwrap_or(BATON_FAILED);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match crate::cli::parse(args.iter().cloned()) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let without_backend = match &cli.command {
        Command::Serve(_) => Some((
            "serve",
            "give its job store with --store postgres://... (or `store` in its config)",
        )),
        Command::Job(_) => Some((
            "job",
            "it is a client of a service, whose job store is set where it runs (`baton serve --store`)",
        )),
        _ => None,
    };
    if let Some((name, hint)) =
        without_backend.filter(|_| crate::cli::backend_on_command_line(&args))
    {
        errln!("baton: --backend does not apply to `baton {name}`: {hint}");
        return BATON_FAILED;
    }
    if let Err(e) = logging::init(cli.globals.verbose, cli.globals.log_format) {
        errln!("baton: {e}");
        return BATON_FAILED;
    }
    // The background holder opens its own span, with the hold's run id.
    let _span = (!matches!(cli.command, Command::Hold)).then(logging::enter_run_span);
    // Commands that need no baton dir (and must not create one).
    match &cli.command {
        Command::Completions { shell } => return docs::completions(*shell),
        Command::Man => return docs::man(cli.globals.dir.as_deref()),
        Command::Doctor { json } => {
            crate::startup::restore_default_sigpipe();
            let backend = cli.globals.backend.as_deref().filter(|u| !u.is_empty());
            return doctor::doctor(cli.globals.dir.as_deref(), backend, *json);
        }
        Command::Init(args) => return init(args, cli.globals.dir.as_deref()),
        _ => {}
    }
    // A client of a job service: no baton dir of its own.
    let command = match cli.command {
        Command::Job(args) => return (services.job)(args),
        other => other,
    };
    let dir = match BatonDir::locate(cli.globals.dir.as_deref()).and_then(|(path, rule)| {
        if !matches!(command, Command::Hold) {
            tracing::info!(path = %path.display(), rule = rule.as_str(), "baton dir ({rule})");
        }
        BatonDir::open(path)
    }) {
        Ok(d) => d,
        Err(e) => return fail(&e, for_lock_error(&e)),
    };
    let backend_url = cli.globals.backend.filter(|u| !u.is_empty());
    let backend = match backend_url.as_deref() {
        None => Backend::Local,
        Some(url) => match baton_pg::Database::new(url) {
            // A wait that goes on through a server restart says so once.
            Ok(db) => Backend::Postgres(Arc::new(db.on_notice(|m| errln!("baton: {m}")))),
            Err(e) => return fail(&e, BATON_FAILED),
        },
    };
    if matches!(dir.sharing(), baton_lock::Sharing::Group { .. }) {
        // What this process and its children create (workspaces, files of
        // the command) stays usable by the dir's group.
        baton_lock::sharing::open_umask_to_group();
    }
    let flags = CliFlags {
        verbose: cli.globals.verbose,
        log_format: cli.globals.log_format,
        backend,
        backend_url,
    };
    match command {
        Command::Serve(args) => (services.serve)(args, dir),
        Command::Run(args) => {
            let group = args.group.map(|key| {
                let gmode = match args.mode {
                    ModeArg::Queue => GroupMode::Queue,
                    ModeArg::Supersede => GroupMode::Supersede,
                    ModeArg::Coalesce => GroupMode::Coalesce,
                    ModeArg::Skip => GroupMode::Skip,
                };
                GroupRequest {
                    key,
                    mode: gmode,
                    max: args.lock_mode.max.unwrap_or(1),
                    max_pending: args.max_pending,
                    wait: wait(args.wait),
                }
            });
            let lock_mode = if group.is_some() {
                ModeArgs {
                    shared: args.lock_mode.shared,
                    max: None,
                }
            } else {
                args.lock_mode
            };
            let req = RunRequest {
                locks: args.locks,
                backend: flags.backend.clone(),
                mode: mode(lock_mode),
                wait: wait(args.wait),
                group,
                on_superseded: args.on_superseded,
                owner: args.holder.owner,
                operation: args.holder.operation,
                command: args.command,
                timeout: args.timeout,
                grace: args.grace,
                workspace: args.workspace.request(),
                keep_workspace: args.workspace.keep_workspace,
                leftovers: if args.leave_leftovers {
                    LeftoverPolicy::Leave
                } else {
                    LeftoverPolicy::Terminate
                },
                control: RunControl::new(),
                forward_signals: true,
                run_id: Some(logging::run_id().to_string()),
                env: Vec::new(),
                clear_env: false,
                cwd: None,
                stdio: Default::default(),
                setup: None,
                on_start: None,
                // Another machine may take over a run on PostgreSQL: its
                // whole command must stop with this process, or when this
                // process stops vouching for itself in time.
                guard: matches!(flags.backend, Backend::Postgres(_)).then(|| {
                    baton_proc::GuardSpec::this_program(baton_proc::Fence::new(baton_pg::FENCE))
                }),
            };
            doctor::warn_if_remote(&dir);
            // This process runs one command: orphans of its descendants come
            // back to it, so that they can be stopped when the command ends.
            if let Err(e) = baton_proc::become_subreaper() {
                errln!("baton: warning: {e}; processes that leave the command's process group are not contained");
            }
            tracing::info!(
                locks = ?req.locks.iter().map(|l| l.as_str()).collect::<Vec<_>>(),
                group = req.group.as_ref().map(|g| g.key.as_str()),
                command = %baton_run::command_line(&req.command),
                "run: taking the group slot and locks, then running the command"
            );
            match run(&dir, &req) {
                Ok(report) => {
                    tracing::info!(
                        ran = report.ran,
                        exit_code = report.outcome.exit_code(),
                        "run: done"
                    );
                    if let (false, Some(by), Some(g)) =
                        (report.ran, &report.superseded_by, &req.group)
                    {
                        errln!(
                            "baton: run {} in group '{}' was superseded by run {by} while waiting",
                            report.run_id,
                            g.key
                        );
                    }
                    if !report.leftovers.is_empty() {
                        errln!(
                            "baton: warning: the command left {} process(es) running ({}); terminated them (TERM, --grace, KILL) before releasing",
                            report.leftovers.len(),
                            output::leftovers(&report.leftovers)
                        );
                    }
                    if let Some(e) = &report.workspace_error {
                        errln!(
                            "baton: warning: {e} (the workspace is left for `baton workspace gc`)"
                        );
                    }
                    for_child(report.outcome.exit_code())
                }
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        Command::Hold => u8::try_from(serve_hold(&dir)).unwrap_or(BATON_FAILED),
        Command::Lock(cmd) => lock(&dir, cmd, &flags),
        Command::Db(cmd) => db(cmd, &flags.backend),
        Command::Group(GroupCommand::Status { key, json }) => {
            crate::startup::restore_default_sigpipe();
            let all = match &flags.backend {
                Backend::Local => group_status(&dir, key.as_ref()),
                Backend::Postgres(db) => remote_group_status(db, key.as_ref()),
            };
            match all {
                Ok(all) => output::groups(&all, key.is_some(), json),
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        Command::Events { group, follow } => {
            crate::startup::restore_default_sigpipe();
            let mut out = std::io::stdout();
            match print_events(&dir, group.as_ref().map(|g| g.as_str()), follow, &mut out) {
                Ok(()) => 0,
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        Command::State(cmd) => crate::state_cli::run(&dir, cmd),
        Command::Workspace(cmd) => crate::git_cli::run_workspace(&dir, cmd),
        Command::Git(cmd) => crate::git_cli::run_git(&dir, cmd),
        // Handled above, before the baton dir was resolved.
        Command::Doctor { .. }
        | Command::Init(_)
        | Command::Completions { .. }
        | Command::Man
        | Command::Job(_) => BATON_FAILED,
    }
}

/// `baton init --shared GROUP [DIR]`.
fn init(args: &crate::cli::InitArgs, global_dir: Option<&std::path::Path>) -> u8 {
    let Some(gid) = baton_lock::sharing::group_id(&args.shared) else {
        errln!(
            "baton: unknown group '{}': no group of that name (see `getent group`); create it with `groupadd {}` first",
            args.shared, args.shared
        );
        return BATON_FAILED;
    };
    let path = match args.dir.as_deref().or(global_dir) {
        Some(p) => p.to_path_buf(),
        None => match BatonDir::locate(None) {
            Ok((p, _)) => p,
            Err(e) => return fail(&e, for_lock_error(&e)),
        },
    };
    match BatonDir::init_shared(&path, gid) {
        Ok(dir) => {
            outln!(
                "baton dir '{}' is shared with group {} (mode 2770); members use it with --dir '{}' or BATON_DIR",
                dir.path().display(),
                baton_lock::sharing::describe_group(gid),
                dir.path().display()
            );
            0
        }
        Err(e) => fail(&e, for_lock_error(&e)),
    }
}

/// The global flags a subcommand may pass on.
struct CliFlags {
    verbose: u8,
    log_format: LogFormat,
    /// Where locks live (`--backend`).
    backend: Backend,
    /// The URL as given, password included, for the background holder.
    backend_url: Option<String>,
}

/// The global flags that give the background holder the same diagnostics.
fn holder_args(verbose: u8, format: LogFormat) -> Vec<String> {
    let mut args: Vec<String> = (0..verbose.min(3)).map(|_| "-v".to_string()).collect();
    if format == LogFormat::Json {
        args.extend(["--log-format".to_string(), "json".to_string()]);
    }
    args
}

fn lock(dir: &BatonDir, cmd: LockCommand, flags: &CliFlags) -> u8 {
    crate::startup::restore_default_sigpipe();
    match cmd {
        LockCommand::Status {
            name: Some(name),
            json,
        } => match lock_status(&flags.backend, dir, &name) {
            Ok(st) => output::status(&st, json),
            Err(e) => fail(&e, for_run_error(&e)),
        },
        LockCommand::Status { name: None, json } | LockCommand::List { json } => {
            let all = match &flags.backend {
                Backend::Local => list(dir).map_err(baton_run::RunError::from),
                Backend::Postgres(db) => db.list().map_err(baton_run::RunError::from),
            };
            match all {
                Ok(all) => output::list(&all, json),
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        LockCommand::Break { name, grace, json } => {
            match break_lock(&flags.backend, dir, &name, grace) {
                Ok(report) => {
                    crate::say::committed();
                    output::broke(&report, json)
                }
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        LockCommand::Acquire {
            name,
            wait: w,
            mode: m,
            ttl,
            holder,
            json,
        } => {
            let exe = match std::env::current_exe() {
                Ok(exe) => exe,
                Err(e) => return fail(&e, BATON_FAILED),
            };
            let caller = caller_to_watch();
            let req = HoldRequest {
                name: name.to_string(),
                shared: m.shared,
                max: m.max.unwrap_or(1),
                wait_ms: match wait(w) {
                    WaitPolicy::Forever => None,
                    WaitPolicy::AtMost(d) => Some(millis(d)),
                    _ => Some(0),
                },
                ttl_ms: ttl.map(millis),
                owner: holder.owner,
                operation: holder.operation,
                watch_pid: caller.map(|c| c.0),
                watch_start_time: caller.map(|c| c.1),
                grace_ms: None,
                run_id: Some(logging::run_id().to_string()),
                share_stderr: logging::active(),
                holder_args: holder_args(flags.verbose, flags.log_format),
                backend: flags.backend_url.clone(),
            };
            doctor::warn_if_remote(dir);
            tracing::info!(lock = %name, "lock acquire: starting the background holder");
            match start_holder(&exe, dir, &req) {
                Ok(held) => {
                    let code = output::acquired(&held, json);
                    match crate::say::delivered() {
                        Ok(()) => code,
                        Err(e) => {
                            // Without its token the caller cannot use or
                            // release the hold: give it back.
                            let _ = release_held(
                                &flags.backend,
                                dir,
                                &name,
                                Some(held.token),
                                caller,
                                false,
                            );
                            errln!("baton: cannot write the token of lock '{name}' to stdout ({e}): the lock was released again");
                            BATON_FAILED
                        }
                    }
                }
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        LockCommand::Release {
            name,
            token,
            force,
            json,
        } => match release_held(&flags.backend, dir, &name, token, caller_to_watch(), force) {
            Ok(report) => {
                crate::say::committed();
                output::released(&report, json)
            }
            Err(e) => fail(&e, for_run_error(&e)),
        },
    }
}

/// `baton db ...`.
fn db(cmd: DbCommand, backend: &Backend) -> u8 {
    let Backend::Postgres(db) = backend else {
        errln!(
            "baton: `baton db` needs --backend postgres://USER@HOST/DATABASE (or BATON_BACKEND)"
        );
        return BATON_FAILED;
    };
    match cmd {
        DbCommand::Migrate => match db.migrate() {
            Ok(v) => {
                outln!("baton's tables are at schema version {v} in {}", db.url());
                0
            }
            Err(e) => fail(&e, BATON_FAILED),
        },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn mode(m: ModeArgs) -> Mode {
    match (m.shared, m.max) {
        (true, _) => Mode::Shared,
        (false, Some(n)) => Mode::Semaphore(n),
        (false, None) => Mode::Exclusive,
    }
}

fn wait(w: WaitArgs) -> WaitPolicy {
    match (w.no_wait, w.wait) {
        (true, _) => WaitPolicy::Immediately,
        (false, Some(d)) => WaitPolicy::from(d),
        (false, None) => WaitPolicy::Forever,
    }
}

/// Prints a clap error as one line (help and version go to stdout, exit 0).
fn usage_error(e: clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            crate::startup::restore_default_sigpipe(); // `baton --help | head`
            match e.print() {
                Ok(()) => 0,
                Err(e) => {
                    errln!("baton: cannot write the output to stdout: {e}");
                    BATON_FAILED
                }
            }
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            BATON_FAILED
        }
        _ => {
            // clap's message spans lines (the missing arguments follow on
            // indented lines, then a blank line and usage); keep the first
            // paragraph, on one line.
            let text = e.to_string();
            let para: Vec<&str> = text
                .lines()
                .skip_while(|l| l.trim().is_empty())
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let joined = para.join(" ");
            let first = joined.strip_prefix("error: ").unwrap_or(&joined);
            // A value parser that words the whole message itself (see
            // `InvalidInput`) is printed as it is, without clap's framing.
            let own = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<InvalidInput>())
                .map(ToString::to_string);
            let message = own.as_deref().unwrap_or(first);
            let path = subcommand_path(std::env::args_os().skip(1));
            errln!("baton: {message} (see '{path} --help')");
            BATON_FAILED
        }
    }
}

/// An invalid command-line value, with a message that stands on its own
/// ("invalid token '-1': ..."): printed instead of clap's "invalid value
/// '-1' for '--token <N>': ...".
#[derive(Debug)]
pub(crate) struct InvalidInput(pub(crate) String);

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for InvalidInput {}

/// The command whose help explains the arguments `args` (argv without the
/// program name), e.g. `baton lock acquire`: the subcommands named in
/// `args`, found by walking the command tree the way clap parses it (an
/// option that takes a value consumes the next argument unless written
/// `--opt=value`). Stops at `--`, at the first unknown word and at anything
/// that is not UTF-8, so it never names a command that does not exist.
fn subcommand_path(args: impl IntoIterator<Item = std::ffi::OsString>) -> String {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    let mut path = vec![cmd.get_name().to_string()];
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(arg) = arg.to_str() else { break };
        if arg == "--" {
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let takes_value = !long.contains('=')
                && cmd
                    .get_arguments()
                    .any(|a| a.get_long() == Some(long) && a.get_action().takes_values());
            if takes_value {
                args.next();
            }
            continue;
        }
        if arg.starts_with('-') {
            continue; // -h, -V: no short option takes a value
        }
        if !cmd.has_subcommands() {
            continue; // a positional argument of the command reached
        }
        let Some(sub) = cmd.find_subcommand(arg).cloned() else {
            break;
        };
        path.push(sub.get_name().to_string());
        cmd = sub;
    }
    path.join(" ")
}

/// Prints an error and its causes on one line; returns `code`.
pub(crate) fn fail(e: &dyn Error, code: u8) -> u8 {
    errln!("baton: {}", baton_lock::one_line(e));
    code
}

/// `baton serve`.
fn serve(args: crate::cli::ServeArgs, dir: BatonDir) -> u8 {
    let overrides = baton_serve::Overrides {
        listen: args.listen,
        max_concurrency: args.max_concurrency,
        node_max_concurrency: args.node_max_concurrency,
        max_queue_depth: args.max_queue_depth,
        job_ttl: args.job_ttl,
        store: args.store,
    };
    let config = match baton_serve::Config::load(args.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => return fail(&e, BATON_FAILED),
    };
    match crate::serve_process::run(config, dir) {
        Ok(()) => 0,
        Err(e) => fail(&e, BATON_FAILED),
    }
}
