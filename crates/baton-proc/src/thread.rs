//! Which thread is calling.

/// Whether the calling thread is the process's main thread (the one that
/// ran `main`): the one thread that may hand a child the terminal, as the
/// others (a service's workers) may run many at once.
///
/// - Linux: its thread id is the pid (`gettid() == getpid()`), exact;
/// - macOS: `pthread_main_np()`, exact;
/// - Windows: std names the main thread `main` (a thread the program
///   itself named `main` counts too). Windows hands no terminal to a child
///   ([`RunSpec::terminal`](crate::RunSpec::terminal) is a unix feature),
///   so nothing there depends on it yet.
pub fn is_main_thread() -> bool {
    imp()
}

#[cfg(unix)]
fn imp() -> bool {
    crate::sys::is_main_thread()
}

#[cfg(windows)]
fn imp() -> bool {
    std::thread::current().name() == Some("main")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_thread_is_not_the_main_thread() {
        let spawned = std::thread::Builder::new()
            .name("main".into())
            .spawn(is_main_thread)
            .unwrap()
            .join()
            .unwrap();
        // Named `main` on purpose: only Windows goes by the name.
        assert_eq!(spawned, cfg!(windows));
        let plain = std::thread::spawn(is_main_thread).join().unwrap();
        assert!(!plain);
    }
}
