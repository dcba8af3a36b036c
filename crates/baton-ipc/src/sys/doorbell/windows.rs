//! Windows: a named auto-reset event, `Local\<name>`; the watcher's thread
//! waits for it, and closing the watcher sets a stop flag and the event.

use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use windows_sys::Win32::Foundation::{GetLastError, ERROR_ALREADY_EXISTS, HANDLE, WAIT_OBJECT_0};
use windows_sys::Win32::System::Threading::{
    CreateEventW, OpenEventW, SetEvent, WaitForSingleObject, EVENT_MODIFY_STATE, INFINITE,
};

/// `Local\<name>`, NUL-terminated UTF-16; `None` for a name with a NUL or a
/// backslash (which event names may not hold).
fn event_name(name: &str) -> Option<Vec<u16>> {
    if name.contains(['\0', '\\']) {
        return None;
    }
    let full = format!("Local\\{name}");
    Some(
        std::ffi::OsStr::new(&full)
            .encode_wide()
            .chain([0])
            .collect(),
    )
}

pub(crate) struct Doorbell {
    event: OwnedHandle,
}

pub(crate) fn bind_named(name: &str) -> io::Result<Doorbell> {
    Doorbell::bind(name)
}

impl Doorbell {
    fn bind(name: &str) -> io::Result<Doorbell> {
        let wide = event_name(name).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: no attributes, auto-reset, not signalled; `wide` is a
        // NUL-terminated UTF-16 string alive for the call.
        let event = unsafe { CreateEventW(std::ptr::null(), 0, 0, wide.as_ptr()) };
        // SAFETY: reads the calling thread's last error; no arguments.
        let existed = unsafe { GetLastError() } == ERROR_ALREADY_EXISTS;
        if event.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a valid handle just returned to us, owned by nobody else.
        let event = unsafe { OwnedHandle::from_raw_handle(event as RawHandle) };
        if existed {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        Ok(Doorbell { event })
    }

    pub(crate) fn watch(self, on_ring: impl Fn() + Send + 'static) -> io::Result<Watcher> {
        let event = Arc::new(self.event);
        let stop = Arc::new(AtomicBool::new(false));
        let (ringing, stopped) = (Arc::clone(&event), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("baton-doorbell".into())
            .spawn(move || {
                while wait(&ringing) && !stopped.load(Ordering::SeqCst) {
                    on_ring();
                }
            })?;
        Ok(Watcher {
            event: Some(event),
            stop,
            thread: Some(thread),
        })
    }
}

/// Waits until `event` is set; false when the wait fails.
fn wait(event: &OwnedHandle) -> bool {
    // SAFETY: an open event handle, borrowed for the call.
    unsafe { WaitForSingleObject(event.as_raw_handle() as HANDLE, INFINITE) == WAIT_OBJECT_0 }
}

/// Sets `event` (with `EVENT_MODIFY_STATE` access).
fn set(event: &OwnedHandle) {
    // SAFETY: an open event handle, borrowed for the call.
    unsafe { SetEvent(event.as_raw_handle() as HANDLE) };
}

pub(crate) struct Watcher {
    /// Shared with the thread; closed with it (the name is free again).
    event: Option<Arc<OwnedHandle>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    pub(crate) fn close(&mut self) {
        if let (Some(thread), Some(event)) = (self.thread.take(), self.event.take()) {
            // The flag first: the thread that the event wakes sees it.
            self.stop.store(true, Ordering::SeqCst);
            set(&event);
            let _ = thread.join();
        }
    }
}

pub(crate) fn ring_named(name: &str) {
    let Some(wide) = event_name(name) else {
        return;
    };
    // SAFETY: `wide` is a NUL-terminated UTF-16 string alive for the call.
    let event = unsafe { OpenEventW(EVENT_MODIFY_STATE, 0, wide.as_ptr()) };
    if event.is_null() {
        return; // no such bell: gone
    }
    // SAFETY: a valid handle just returned to us, owned by nobody else.
    let event = unsafe { OwnedHandle::from_raw_handle(event as RawHandle) };
    set(&event);
}
