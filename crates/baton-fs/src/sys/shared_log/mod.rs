//! The system calls of [`crate::shared_log`], per platform.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

#[cfg(target_os = "linux")]
pub(crate) use linux::DirWatch;
#[cfg(not(target_os = "linux"))]
pub(crate) use poll::DirWatch;
#[cfg(unix)]
pub(crate) use unix::try_lock_exclusive;
#[cfg(windows)]
pub(crate) use windows::try_lock_exclusive;

/// How often [`DirWatch::wait`](crate::shared_log::DirWatch::wait) looks
/// again where there is no inotify.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Where there is no inotify: a wait is a pause of [`POLL`].
#[cfg(not(target_os = "linux"))]
mod poll {
    use std::ffi::OsString;
    use std::io;
    use std::path::Path;

    pub(crate) struct DirWatch;

    impl DirWatch {
        pub(crate) fn new(dir: &Path) -> io::Result<DirWatch> {
            // Fail as inotify would for a directory that is not there.
            std::fs::read_dir(dir)?;
            Ok(DirWatch)
        }

        pub(crate) fn wait(&self, _names: &[OsString]) -> io::Result<()> {
            std::thread::sleep(super::POLL);
            Ok(())
        }
    }
}
