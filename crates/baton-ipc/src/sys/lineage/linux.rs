//! Linux: [`crate::lineage`] from `/proc`.

use std::path::Path;

/// Same command line and same start of the stack as `parent` (`exec`
/// places the stack anew, at a random address).
pub(crate) fn forked_without_exec(pid: i32, parent: i32) -> bool {
    let stack = |p: i32| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|t| {
                let after = t.get(t.rfind(')')? + 1..)?.to_string();
                // Field 28 (startstack); fields after the name start at 3.
                after.split_whitespace().nth(25)?.parse::<u64>().ok()
            })
            .filter(|s| *s != 0)
    };
    cmdline(pid).is_some_and(|c| Some(c) == cmdline(parent))
        && stack(pid).is_some_and(|s| Some(s) == stack(parent))
}

fn cmdline(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// `pid`'s fd 1 links to a pipe (`pipe:[1234]`) that `reader` has open for
/// reading.
pub(crate) fn stdout_read_by(pid: i32, reader: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/fd/1"))
        .is_ok_and(|out| out.to_string_lossy().starts_with("pipe:") && reads(reader, &out))
}

/// Whether process `pid` has the read end of pipe `link` open. Both ends
/// have the same link; the access mode in `fdinfo` tells them apart (a
/// parent that merely shares the child's stdout holds the write end).
fn reads(pid: i32, link: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|l| l == link) && {
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            std::fs::read_to_string(info).is_ok_and(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|flags| flags & 0o3 != 0o1) // not O_WRONLY
            })
        }
    })
}
