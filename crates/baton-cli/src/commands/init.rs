//! `baton init --shared GROUP [DIR]`: a baton dir several users share.

use std::path::{Path, PathBuf};

use baton_lock::{BatonDir, DirRule};
use clap::Args;

use crate::exit_codes::{for_lock_error, BATON_FAILED};
use crate::say::fail;

/// `baton init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Share the dir with this group (a name or a numeric id).
    #[arg(long, value_name = "GROUP", required = true)]
    pub shared: String,
    /// The baton dir [default: $BATON_DIR; this user's own default dir is never shared].
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `baton init --shared GROUP [DIR]`.
pub(crate) fn cmd_init(args: &InitArgs, global_dir: Option<&Path>) -> u8 {
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
            Ok((p, DirRule::Env)) => p,
            // This user's own dir on this machine (under a runtime dir no
            // one else can enter): sharing it would help nobody.
            Ok((p, _)) => {
                errln!(
                    "baton: name the dir to share (`baton init --shared {} DIR`, e.g. /srv/baton): the default baton dir '{}' is this user's own",
                    args.shared,
                    p.display()
                );
                return BATON_FAILED;
            }
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
