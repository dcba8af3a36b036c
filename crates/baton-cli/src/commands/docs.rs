//! `baton completions SHELL` and `baton man --dir D`: generated from the
//! same clap definitions as `--help` (the root command they are given,
//! [`crate::command`]), so they cannot drift from the commands.

use std::path::{Path, PathBuf};

use crate::exit_codes::BATON_FAILED;
use crate::startup::restore_default_sigpipe;

/// `baton completions SHELL`: the script on stdout.
pub(crate) fn cmd_completions(shell: clap_complete::Shell, root: &clap::Command) -> u8 {
    use clap_complete::Generator;
    restore_default_sigpipe(); // `baton completions bash | head`
    let mut cmd = without_hidden_subcommands(root);
    cmd.set_bin_name("baton");
    cmd.build();
    // Not clap_complete::generate: it panics when the write fails.
    match shell.try_generate(&cmd, &mut std::io::stdout().lock()) {
        Ok(()) => 0,
        Err(e) => {
            errln!("baton: cannot write the output to stdout: {e}");
            BATON_FAILED
        }
    }
}

/// The root command without its hidden subcommands (the internal `__hold`),
/// which clap_complete would otherwise offer.
fn without_hidden_subcommands(root: &clap::Command) -> clap::Command {
    let mut cmd = clap::Command::new("baton")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(root.is_subcommand_required_set());
    if let Some(about) = root.get_about() {
        cmd = cmd.about(about.clone());
    }
    for arg in root.get_arguments() {
        cmd = cmd.arg(arg.clone());
    }
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}

/// The commands that get a man page: `baton` and every visible subcommand,
/// at every depth, with their display names (`baton-lock-status`).
fn documented_commands(root: &clap::Command) -> Vec<clap::Command> {
    fn walk(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
        out.push(cmd.clone());
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out);
        }
    }
    let mut root = root.clone().disable_help_subcommand(true);
    root.build();
    let mut out = Vec::new();
    walk(&root, &mut out);
    out
}

/// `baton man --dir D`: writes one page per command into `dir` (created if
/// missing) and prints the paths written.
pub(crate) fn cmd_man(dir: Option<&Path>, root: &clap::Command) -> u8 {
    let Some(dir) = dir else {
        errln!(
            "baton: man needs --dir DIR, the directory to write the pages to (see 'baton man --help')"
        );
        return BATON_FAILED;
    };
    match write_pages(dir, root) {
        Ok(paths) => {
            for p in paths {
                outln!("{}", p.display());
            }
            0
        }
        Err(e) => {
            errln!("baton: {e}");
            BATON_FAILED
        }
    }
}

fn write_pages(dir: &Path, root: &clap::Command) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create directory '{}': {e}", dir.display()))?;
    let mut written = Vec::new();
    for cmd in documented_commands(root) {
        let page = clap_mangen::Man::new(cmd).source(concat!("baton ", env!("CARGO_PKG_VERSION")));
        let path = dir.join(page.get_filename());
        let mut text = Vec::new();
        page.render(&mut text)
            .map_err(|e| format!("cannot render man page '{}': {e}", path.display()))?;
        std::fs::write(&path, text)
            .map_err(|e| format!("cannot write man page '{}': {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
