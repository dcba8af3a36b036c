//! One invocation of the CLI, start to end: the guardian's dispatch, the
//! parse (with clap's errors on one line), diagnostics, the baton dir and
//! the backend, then the command ([`crate::commands`]).

use baton_lock::{BatonDir, DirRule};
use baton_run::Backend;

use crate::cli::Cli;
use crate::commands::lock::Flags;
use crate::commands::{run_in_dir, run_without_dir, Command, Plain, Services};
use crate::exit_codes::{for_lock_error, BATON_FAILED};
use crate::logging;
use crate::say::fail;

/// Runs the command line of this process; returns its exit code.
pub(crate) fn run_cli(services: &Services) -> u8 {
    // A run's guardian (see `baton_proc::guard`): this same program,
    // executed by the run's supervisor; not a command of the CLI.
    // It also records that this program serves as one (for git's
    // children on macOS, `baton_proc::GuardSpec::where_needed`); on
    // Windows there is none (a run's Job Object dies with its supervisor).
    if let Some(code) = baton_proc::dispatch_guardian() {
        return u8::try_from(code).unwrap_or(BATON_FAILED);
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
    crate::say::set_quiet(cli.globals.quiet);
    if let Err(e) = logging::init(cli.globals.verbose, cli.globals.log_format) {
        errln!("baton: {e}");
        return BATON_FAILED;
    }
    // The background holder opens its own span, with the hold's run id.
    let _span = (!matches!(cli.command, Command::Hold)).then(logging::enter_run_span);
    let backend_url = cli.globals.backend.as_deref().filter(|u| !u.is_empty());
    let plain = Plain {
        dir: cli.globals.dir.as_deref(),
        backend: backend_url,
        root: <Cli as clap::CommandFactory>::command,
    };
    let command = match run_without_dir(cli.command, &plain, services) {
        Ok(code) => return code,
        Err(command) => command,
    };
    let mut named_dir = true;
    let dir = match BatonDir::locate(cli.globals.dir.as_deref()).and_then(|(path, rule)| {
        if !matches!(command, Command::Hold) {
            tracing::info!(path = %path.display(), rule = rule.as_str(), "baton dir ({rule})");
        }
        named_dir = matches!(rule, DirRule::Explicit | DirRule::Env);
        BatonDir::open(path)
    }) {
        Ok(d) => d,
        Err(e) => return fail(&e, for_lock_error(&e)),
    };
    let takes_locks = matches!(
        command,
        Command::Run(_) | Command::Lock(crate::commands::lock::LockCommand::Acquire { .. })
    );
    if !named_dir && takes_locks && backend_url.is_none() {
        warn_of_previous_default(&dir);
    }
    if !named_dir && matches!(command, Command::Serve(_)) {
        warn_of_temporary_dir(&dir);
    }
    // A wait that goes on through a server restart says so once.
    let backend = match Backend::open_noting(&dir, backend_url, |m| errln!("baton: {m}")) {
        Ok(b) => b,
        Err(e) => return fail(&e, BATON_FAILED),
    };
    if matches!(dir.sharing(), baton_lock::Sharing::Group { .. }) {
        // What this process and its children create (workspaces, files of
        // the command) stays usable by the dir's group.
        baton_lock::sharing::open_umask_to_group();
    }
    let flags = Flags {
        verbose: cli.globals.verbose,
        log_format: cli.globals.log_format,
        backend: &backend,
        backend_url,
        named_dir,
    };
    run_in_dir(command, dir, &flags, services)
}

/// During an upgrade: holders of an older baton in this clone's former
/// default dir (`<git common dir>/baton`) do not exclude holders in the
/// per-user dir used now; say so (README "Upgrading").
fn warn_of_previous_default(dir: &BatonDir) {
    let Some(old) = std::env::current_dir()
        .ok()
        .and_then(|cwd| baton_lock::previous_default(&cwd, dir.path()))
    else {
        return;
    };
    let held = baton_lock::held_locks_in(&old);
    if !held.is_empty() {
        warnln!(
            "baton: warning: lock(s) {} are held in '{}', this clone's baton dir before lock names became per machine; those holders (an older baton) do not exclude holders in '{}' (see `baton doctor`)",
            held.join(", "),
            old.display(),
            dir.path().display()
        );
    }
}

/// `baton serve` keeps its SQLite store (unless `--store` names another),
/// job outputs and workspaces in its baton dir: the per-user default is
/// under the temporary dir, which a reboot (a tmpfs) or a cleaner of old
/// temporary files may empty. Say so.
fn warn_of_temporary_dir(dir: &BatonDir) {
    let tmpfs = baton_lock::filesystem(dir.path()).is_ok_and(|f| f.name == "tmpfs");
    warnln!(
        "baton: warning: the service's baton dir '{}' is this user's default, in the temporary dir{}: its default job store, job outputs and workspaces may not survive a reboot or a cleaner of old temporary files; give --dir DIR (or BATON_DIR) for jobs that must survive",
        dir.path().display(),
        if tmpfs { " (a tmpfs)" } else { "" }
    );
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
                .and_then(|s| s.downcast_ref::<crate::args::InvalidInput>())
                .map(ToString::to_string);
            let message = own.as_deref().unwrap_or(first);
            let path = subcommand_path(std::env::args_os().skip(1));
            errln!("baton: {message} (see '{path} --help')");
            BATON_FAILED
        }
    }
}

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
