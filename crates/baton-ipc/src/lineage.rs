//! How a process came to be, as `baton lock acquire` needs to know it to
//! find the script it was called from (past the subshells of a command
//! substitution): whether a process is a fork of its parent that has not
//! executed another program, and whether its standard output is a pipe its
//! parent reads.
//!
//! - Linux reads `/proc`: a fork has its parent's command line and start
//!   of the stack (`exec` places the stack anew, at a random address); a
//!   pipe's two ends have one `pipe:[inode]` link, told apart by the access
//!   mode in `fdinfo`.
//! - macOS asks the kernel (`proc_pidinfo`, `proc_pidfdinfo`): a process
//!   that has executed a program has `PROC_FLAG_EXEC` (a fork starts
//!   without it); each end of a pipe has a handle and names its peer's.
//! - Windows: a shell there forks no subshells; both answers are `false`.

/// Whether `pid` is a child of `parent` made by `fork` that has not
/// executed another program since (a subshell of `parent`'s shell).
pub fn is_fork_of(pid: i32, parent: i32) -> bool {
    #[cfg(unix)]
    return baton_proc::procfs::stat(pid).is_some_and(|st| st.ppid == parent)
        && crate::sys::lineage::forked_without_exec(pid, parent);
    #[cfg(windows)]
    {
        let _ = (pid, parent);
        false
    }
}

/// Whether the standard output of `pid` is a pipe whose read end `reader`
/// has open (as a shell reads a command substitution's output).
pub fn stdout_read_by(pid: i32, reader: i32) -> bool {
    #[cfg(unix)]
    return crate::sys::lineage::stdout_read_by(pid, reader);
    #[cfg(windows)]
    {
        let _ = (pid, reader);
        false
    }
}

/// The command name of `pid` (at most 15 bytes on Linux, 16 on macOS, as
/// the kernel keeps it; the executable's file name on Windows is not read:
/// `None`).
pub fn command_name(pid: i32) -> Option<String> {
    #[cfg(unix)]
    return baton_proc::procfs::stat(pid).map(|st| st.comm);
    #[cfg(windows)]
    {
        let _ = pid;
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

    use std::io::Read;
    use std::process::{Command, Stdio};

    use super::*;

    /// A shell's command substitution subshell (`$(...)` of more than one
    /// command) is a fork of the shell writing into a pipe the shell reads;
    /// the program it runs is neither.
    #[test]
    fn a_command_substitution_subshell_is_a_fork_whose_output_its_parent_reads() {
        let dir = tempfile::tempdir().unwrap();
        let facts = dir.path().join("facts");
        // The subshell finds its pid (the parent of a `sh` it executes in
        // a substitution of its own), then its child asks about it.
        let script = format!(
            "out=$(sub=$(exec sh -c 'echo $PPID'); BATON_TEST_SUB=$sub BATON_TEST_SHELL=$$ {exe} --exact lineage::tests::facts_helper --ignored --quiet; echo done); echo \"$out\"",
            exe = std::env::current_exe().unwrap().display(),
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .env("BATON_TEST_FACTS", &facts)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(child.wait().unwrap().success());
        assert!(out.trim().ends_with("done"), "{out}");
        let text = std::fs::read_to_string(&facts).unwrap();
        assert!(
            text.contains("subshell is a fork of the shell: true"),
            "{text}"
        );
        assert!(text.contains("the shell reads its output: true"), "{text}");
        assert!(text.contains("this is a fork of it: false"), "{text}");
        assert!(text.contains("it reads this one's output: false"), "{text}");
    }

    /// Run by the test above, in the subshell: says what it finds about its
    /// parent (the subshell, pid in `BATON_TEST_SUB`) and the shell
    /// (`BATON_TEST_SHELL`), into the file `BATON_TEST_FACTS`. Its stdout
    /// is the subshell's: redirecting it would make a shell such as dash
    /// point the subshell's own fd 1 elsewhere while it runs.
    #[test]
    #[ignore = "a helper: run by a_command_substitution_subshell_is_a_fork_whose_output_its_parent_reads"]
    fn facts_helper() {
        let number = |var| std::env::var(var).ok()?.parse::<i32>().ok();
        let (Some(sub), Some(shell)) = (number("BATON_TEST_SUB"), number("BATON_TEST_SHELL"))
        else {
            return;
        };
        let me = std::process::id() as i32;
        let facts = format!(
            "subshell is a fork of the shell: {}\nthe shell reads its output: {}\nthis is a fork of it: {}\nit reads this one's output: {}\n",
            is_fork_of(sub, shell),
            stdout_read_by(sub, shell),
            is_fork_of(me, sub),
            stdout_read_by(me, sub),
        );
        std::fs::write(std::env::var("BATON_TEST_FACTS").unwrap(), facts).unwrap();
    }

    #[test]
    fn the_command_name_of_this_process() {
        let name = command_name(std::process::id() as i32).unwrap();
        assert!(!name.is_empty());
        assert_eq!(command_name(-1), None);
    }
}
