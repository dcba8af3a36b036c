//! Shared baton dirs on Unix: set-group-ID directories and group modes
//! (`crate::sharing`).

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode bits that make a directory shared: set-group-ID and group `rwx`.
pub const SHARED_DIR_BITS: u32 = 0o2070;

/// Whether `dir` is a shared baton directory (or a directory inside one).
pub fn is_shared(dir: &Path) -> bool {
    fs::metadata(dir).is_ok_and(|m| m.mode() & SHARED_DIR_BITS == SHARED_DIR_BITS)
}

/// Creates directory `path` (mode 0700, or 2770 inside a shared directory,
/// whatever the umask); an existing one is left as it is.
pub fn create_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    if path.parent().is_some_and(is_shared) {
        fs::set_permissions(path, fs::Permissions::from_mode(0o2770))?;
    }
    Ok(())
}

/// Opens `path` with `options` (which must not ask to create), creating it
/// with mode `private` (0660 in a shared directory) if it does not exist.
pub fn open_or_create(path: &Path, options: &OpenOptions, private: u32) -> io::Result<File> {
    for _ in 0..8 {
        match options.open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let mut create = options.clone();
        create.create_new(true).mode(private);
        match create.open(path) {
            Ok(file) => {
                share_new_file(&file, path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    options.open(path)
}

/// Gives a file just created at `path` group read and write when its
/// directory is shared (the umask may have taken them).
pub fn share_new_file(file: &File, path: &Path) -> io::Result<()> {
    if path.parent().is_some_and(is_shared) {
        let mode = file.metadata()?.mode() & 0o7777;
        if mode & 0o060 != 0o060 {
            file.set_permissions(fs::Permissions::from_mode((mode | 0o060) & 0o1777))?;
        }
    }
    Ok(())
}

/// Whether this process is in group `gid` (effective or supplementary).
pub fn is_member(gid: u32) -> bool {
    let gid = rustix::process::Gid::from_raw(gid);
    rustix::process::getegid() == gid
        || rustix::process::getgroups().is_ok_and(|groups| groups.contains(&gid))
}

/// The id of group `name` (a number is taken as an id).
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Some(gid);
    }
    let cname = CString::new(name).ok()?;
    lookup(|grp, buf, result| {
        // SAFETY: `cname` is a valid C string; `grp`, `buf` and `result`
        // point to live storage of the sizes given, as getgrnam_r requires.
        unsafe { libc::getgrnam_r(cname.as_ptr(), grp, buf.as_mut_ptr(), buf.len(), result) }
    })
    .map(|(gid, _)| gid)
}

/// The name of group `gid`, if it has one.
pub fn group_name(gid: u32) -> Option<String> {
    lookup(|grp, buf, result| {
        // SAFETY: as in `group_id`: every pointer is to live storage of the
        // given size.
        unsafe { libc::getgrgid_r(gid, grp, buf.as_mut_ptr(), buf.len(), result) }
    })
    .map(|(_, name)| name)
}

/// Runs a `getgr*_r` call with a growing buffer; the group's id and name.
fn lookup(
    mut call: impl FnMut(*mut libc::group, &mut Vec<libc::c_char>, *mut *mut libc::group) -> libc::c_int,
) -> Option<(u32, String)> {
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: `group` is a plain C struct for which all-zero bytes is valid.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc = call(&mut grp, &mut buf, &mut result);
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || result.is_null() || grp.gr_name.is_null() {
            return None;
        }
        // SAFETY: on success `gr_name` points to a NUL-terminated string in
        // `buf`, which is still alive here.
        let name = unsafe { std::ffi::CStr::from_ptr(grp.gr_name) }
            .to_string_lossy()
            .into_owned();
        return Some((grp.gr_gid, name));
    }
}

/// `name (gid N)`, or `gid N` for a group without a name.
pub fn describe_group(gid: u32) -> String {
    match group_name(gid) {
        Some(name) => format!("'{name}' (gid {gid})"),
        None => format!("gid {gid}"),
    }
}

/// Clears the group bits of this process's umask, so that what it and its
/// children create (git checkouts of workspaces, files of a command) stays
/// usable by the group of a shared baton dir. Process-wide: only a program's
/// `main` calls it (baton does for a shared baton dir); the library never does.
pub fn open_umask_to_group() {
    use rustix::fs::Mode;
    let old = rustix::process::umask(Mode::empty());
    rustix::process::umask(old & !Mode::from_raw_mode(0o070));
}
