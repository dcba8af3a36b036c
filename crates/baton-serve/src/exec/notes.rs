//! baton's own lines in a job's stderr log (as `baton run` says them on its
//! stderr): where a branch reset kept the old tip, which processes the
//! command left running.

/// Says in the job's stderr log (and the service's log) that its workspace
/// started its branch over, and where the old tip is kept, as `baton run
/// --reset-branch` says on its stderr.
pub(super) fn note_reset(log: &crate::sys::Owned, job_id: &str, w: &baton_git::Workspace) {
    let (Some(branch), Some(kept)) = (&w.branch, &w.abandoned_ref) else {
        return;
    };
    let old = w.abandoned_commit.as_deref().unwrap_or("?");
    tracing::info!(job = %job_id, branch = %branch, abandoned_ref = %kept, "a job's workspace started its branch over");
    let line = format!(
        "baton: branch '{branch}' was at {old}, which '{}' lacks: started it over at {} and kept its old tip as {kept} in '{}'\n",
        w.reference,
        w.commit,
        w.base_repo.display()
    );
    if let Ok(fd) = log.try_clone() {
        use std::io::Write;
        let _ = std::fs::File::from(fd).write_all(line.as_bytes());
    }
}

/// `pid 12 (sleep), pid 13 (sh, had left the process group)`.
pub(super) fn leftover_list(all: &[baton_proc::Leftover]) -> String {
    all.iter()
        .map(|l| {
            let escaped = match l.escaped {
                true => ", had left the process group",
                false => "",
            };
            format!("pid {} ({}{escaped})", l.pid, l.command)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
