//! The error of a start that failed: which of not found, not executable
//! (a missing `#!` interpreter named) or another failure, looked up after
//! the fact as `execvp` would have.

use std::io;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::{ProcError, RunSpec};

/// The error of a spawn that failed with `source`.
pub(crate) fn spawn_error(spec: &RunSpec, source: io::Error) -> ProcError {
    let program = spec.program.clone();
    let errno = source.raw_os_error().map(Errno::from_raw_os_error);
    match errno {
        // execve says ENOENT for a missing #! interpreter or ELF loader too.
        Some(Errno::NOENT) => match located(spec) {
            Some(path) => ProcError::InterpreterNotFound {
                interpreter: interpreter_of(&path),
                program,
                path,
            },
            None => ProcError::NotFound { program },
        },
        Some(Errno::ACCESS | Errno::NOEXEC | Errno::ISDIR) => {
            ProcError::NotExecutable { program, source }
        }
        _ if source.kind() == io::ErrorKind::NotFound => ProcError::NotFound { program },
        _ if source.kind() == io::ErrorKind::PermissionDenied => {
            ProcError::NotExecutable { program, source }
        }
        _ => ProcError::Spawn { program, source },
    }
}

/// Where the command's program is, looked up as `execvp` does (a name with a
/// slash as it is, else in the command's `PATH`): only to explain an exec
/// that failed, so only an existing regular file counts.
fn located(spec: &RunSpec) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let is_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    let program = Path::new(&spec.program);
    if spec.program.as_bytes().contains(&b'/') {
        // A relative path is the child's: from its working directory.
        let path = match &spec.cwd {
            Some(cwd) => cwd.join(program),
            None => program.to_path_buf(),
        };
        return is_file(&path).then_some(path);
    }
    let path = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"))?;
    std::env::split_paths(&path)
        .map(|dir| match &spec.cwd {
            // An empty or relative entry is the child's too.
            Some(cwd) if dir.is_relative() => cwd.join(dir).join(program),
            _ => dir.join(program),
        })
        .find(|p| is_file(p))
}

/// The interpreter named on the `#!` line of `path`, if it has one.
fn interpreter_of(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    // Split as the kernel does (spaces and tabs): a carriage return stays part
    // of the name, which is why a script with Windows line endings fails.
    let name = line
        .split(|b| *b == b' ' || *b == b'\t')
        .find(|w| !w.is_empty())?;
    Some(String::from_utf8_lossy(name).into_owned())
}
