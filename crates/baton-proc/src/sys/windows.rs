//! Windows: process handles and creation times (a process's identity),
//! Job Objects (a run's whole tree, killed when the supervisor's handle
//! closes), console control events (the graceful stop), events and pipes.
//! Every `unsafe` call of the crate on Windows is here, behind a safe
//! function.

use std::io;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use windows_sys::Win32::Foundation::{
    SetHandleInformation, ERROR_INVALID_PARAMETER, FILETIME, HANDLE, HANDLE_FLAG_INHERIT,
    INVALID_HANDLE_VALUE, WAIT_FAILED, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::System::Console::{
    GenerateConsoleCtrlEvent, GetStdHandle, SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_C_EVENT,
    STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicProcessIdList,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_PROCESS_ID_LIST, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Pipes::CreatePipe;
use windows_sys::Win32::System::Threading::{
    CreateEventW, GetExitCodeProcess, GetProcessTimes, OpenProcess, OpenThread,
    QueryFullProcessImageNameW, ResetEvent, ResumeThread, SetEvent, TerminateProcess,
    WaitForMultipleObjects, WaitForSingleObject, INFINITE, PROCESS_NAME_WIN32,
    PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SET_QUOTA, PROCESS_SYNCHRONIZE, PROCESS_TERMINATE,
    THREAD_SUSPEND_RESUME,
};

/// `STATUS_CONTROL_C_EXIT`: the exit code of a console process that a
/// Ctrl-C or Ctrl-Break ended.
pub(crate) const STATUS_CONTROL_C_EXIT: u32 = 0xC000_013A;

/// The error of the last failed call, as `io::Error` does.
fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// A handle a call returned, owned; the last error when it is null (or
/// `INVALID_HANDLE_VALUE`, for the calls that return that).
fn owned(handle: HANDLE) -> io::Result<OwnedHandle> {
    if handle.is_null() || handle == INVALID_HANDLE_VALUE {
        return Err(last_error());
    }
    // SAFETY: a valid handle just returned to us, owned by nobody else.
    Ok(unsafe { OwnedHandle::from_raw_handle(handle as RawHandle) })
}

fn raw(handle: &impl AsRawHandle) -> HANDLE {
    handle.as_raw_handle() as HANDLE
}

/// A wait's limit in milliseconds, rounded up (so a deadline is never
/// woken up early); `INFINITE` for none.
fn millis(limit: Option<Duration>) -> u32 {
    match limit {
        None => INFINITE,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            u32::try_from(ms).unwrap_or(INFINITE - 1).min(INFINITE - 1)
        }
    }
}

/// Waits until one of `handles` is signalled or `limit` passes; the index of
/// the first signalled one, `None` on the timeout. At most 64 handles.
pub(crate) fn wait_any(
    handles: &[BorrowedHandle<'_>],
    limit: Option<Duration>,
) -> io::Result<Option<usize>> {
    let raw: Vec<HANDLE> = handles.iter().map(raw).collect();
    let count =
        u32::try_from(raw.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `raw` holds `count` handles, borrowed (so open) for the call.
    let got = unsafe { WaitForMultipleObjects(count, raw.as_ptr(), 0, millis(limit)) };
    match got {
        WAIT_TIMEOUT => Ok(None),
        WAIT_FAILED => Err(last_error()),
        n if n.wrapping_sub(WAIT_OBJECT_0) < count => Ok(Some((n - WAIT_OBJECT_0) as usize)),
        // WAIT_ABANDONED_*: only mutexes are abandoned; none is waited on.
        other => Err(io::Error::other(format!(
            "unexpected wait result {other:#x}"
        ))),
    }
}

/// A process, opened by its pid: the handle pins it (its pid is not reused
/// while the handle is open) and is signalled once it has exited.
#[derive(Debug)]
pub(crate) struct Process {
    handle: OwnedHandle,
    pid: u32,
}

impl Process {
    /// Opens process `pid` to wait for it, read its times, terminate it and
    /// put it in a job;
    /// `None` when there is no such process.
    pub(crate) fn open(pid: u32) -> io::Result<Option<Process>> {
        Process::open_with(pid, true)
    }

    /// Opens process `pid` only to wait for it and read its times (allowed
    /// for more processes than [`Process::open`]); `None` when there is none.
    pub(crate) fn open_to_query(pid: u32) -> io::Result<Option<Process>> {
        Process::open_with(pid, false)
    }

    fn open_with(pid: u32, terminate: bool) -> io::Result<Option<Process>> {
        let mut access = PROCESS_SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION;
        if terminate {
            // PROCESS_SET_QUOTA too: AssignProcessToJobObject needs it.
            access |= PROCESS_TERMINATE | PROCESS_SET_QUOTA;
        }
        // SAFETY: plain arguments; the handle returned is owned below.
        let handle = unsafe { OpenProcess(access, 0, pid) };
        match owned(handle) {
            Ok(handle) => Ok(Some(Process { handle, pid })),
            Err(e) if e.raw_os_error() == Some(ERROR_INVALID_PARAMETER as i32) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Its pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// What waits for it.
    pub(crate) fn handle(&self) -> BorrowedHandle<'_> {
        use std::os::windows::io::AsHandle;
        self.handle.as_handle()
    }

    /// Its creation time: 100-nanosecond intervals since 1601 (UTC), the
    /// same for every reader on the machine.
    pub(crate) fn creation_time(&self) -> io::Result<u64> {
        let zero = FILETIME {
            dwLowDateTime: 0,
            dwHighDateTime: 0,
        };
        let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
        // SAFETY: an open process handle and four FILETIMEs of ours.
        let ok = unsafe {
            GetProcessTimes(
                raw(&self.handle),
                &mut created,
                &mut exited,
                &mut kernel,
                &mut user,
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        Ok(u64::from(created.dwHighDateTime) << 32 | u64::from(created.dwLowDateTime))
    }

    /// Waits until it has exited or `limit` passes; true if it has.
    pub(crate) fn wait(&self, limit: Option<Duration>) -> io::Result<bool> {
        // SAFETY: an open process handle.
        match unsafe { WaitForSingleObject(raw(&self.handle), millis(limit)) } {
            WAIT_OBJECT_0 => Ok(true),
            WAIT_TIMEOUT => Ok(false),
            _ => Err(last_error()),
        }
    }

    /// Whether it has exited (its handle is signalled: not by its exit code,
    /// which a running process may also return, 259).
    pub(crate) fn has_exited(&self) -> bool {
        matches!(self.wait(Some(Duration::ZERO)), Ok(true))
    }

    /// Its exit code (`STILL_ACTIVE`, 259, while it runs).
    pub(crate) fn exit_code(&self) -> io::Result<u32> {
        let mut code = 0u32;
        // SAFETY: an open process handle and a u32 of ours.
        if unsafe { GetExitCodeProcess(raw(&self.handle), &mut code) } == 0 {
            return Err(last_error());
        }
        Ok(code)
    }

    /// Terminates it with exit code `code`. Terminating a process that has
    /// exited already is not an error.
    pub(crate) fn terminate(&self, code: u32) -> io::Result<()> {
        // SAFETY: an open process handle with PROCESS_TERMINATE.
        if unsafe { TerminateProcess(raw(&self.handle), code) } == 0 && !self.has_exited() {
            return Err(last_error());
        }
        Ok(())
    }

    /// The file name of its program (`cmd.exe`), or `?`.
    pub(crate) fn image_name(&self) -> String {
        let mut buf = [0u16; 1024];
        let mut len = buf.len() as u32;
        // SAFETY: an open process handle, a buffer of `len` u16s.
        let ok = unsafe {
            QueryFullProcessImageNameW(
                raw(&self.handle),
                PROCESS_NAME_WIN32,
                buf.as_mut_ptr(),
                &mut len,
            )
        };
        if ok == 0 {
            return "?".into();
        }
        let path = String::from_utf16_lossy(&buf[..len as usize]);
        path.rsplit(['\\', '/']).next().unwrap_or("?").to_string()
    }
}

/// Resumes the threads of process `pid` (created suspended: its one
/// thread). Returns how many were resumed.
pub(crate) fn resume_threads(pid: u32) -> io::Result<usize> {
    // SAFETY: plain arguments; the snapshot handle is owned below.
    let snapshot = owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) })?;
    // SAFETY: all zeros is a valid THREADENTRY32; dwSize is set below.
    let mut entry: THREADENTRY32 = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    let mut resumed = 0;
    // SAFETY: the snapshot is open; `entry` is ours with its size set.
    let mut more = unsafe { Thread32First(raw(&snapshot), &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: plain arguments; the thread handle is owned below.
            let thread =
                owned(unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) })?;
            // SAFETY: an open thread handle with THREAD_SUSPEND_RESUME.
            if unsafe { ResumeThread(raw(&thread)) } == u32::MAX {
                return Err(last_error());
            }
            resumed += 1;
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(raw(&snapshot), &mut entry) } != 0;
    }
    Ok(resumed)
}

/// A Job Object whose processes are all killed when its last handle closes
/// (`JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`). Its handle is not inheritable:
/// only this process holds it, so the job's processes die with it.
#[derive(Debug)]
pub(crate) struct Job(OwnedHandle);

impl Job {
    /// A new job that kills its processes when closed.
    pub(crate) fn new() -> io::Result<Job> {
        // SAFETY: no attributes (a handle that is not inherited), no name.
        let job = Job(owned(unsafe {
            CreateJobObjectW(std::ptr::null(), std::ptr::null())
        })?);
        job.set_kill_on_close(true)?;
        Ok(job)
    }

    fn set_kill_on_close(&self, kill: bool) -> io::Result<()> {
        // SAFETY: all zeros is a valid limit information (no limit).
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        if kill {
            info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        }
        // SAFETY: an open job handle; `info` is of the size given.
        let ok = unsafe {
            SetInformationJobObject(
                raw(&self.0),
                JobObjectExtendedLimitInformation,
                (&raw const info).cast(),
                std::mem::size_of_val(&info) as u32,
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// Puts `process` (and so every process it starts) in the job.
    pub(crate) fn assign(&self, process: &Process) -> io::Result<()> {
        // SAFETY: open job and process handles.
        if unsafe { AssignProcessToJobObject(raw(&self.0), raw(&process.handle)) } == 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// The pids of the job's processes that have not exited.
    pub(crate) fn pids(&self) -> io::Result<Vec<u32>> {
        // Room for 1024 processes: the header, then one usize per pid.
        const ROOM: usize = 1024;
        let mut buf = vec![0usize; 2 + ROOM];
        let bytes = (buf.len() * std::mem::size_of::<usize>()) as u32;
        // SAFETY: an open job handle; `buf` has `bytes` bytes, aligned for
        // JOBOBJECT_BASIC_PROCESS_ID_LIST (two u32s, then usizes).
        let ok = unsafe {
            QueryInformationJobObject(
                raw(&self.0),
                JobObjectBasicProcessIdList,
                buf.as_mut_ptr().cast(),
                bytes,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(last_error());
        }
        // SAFETY: the call filled the header at the start of `buf`.
        let header = unsafe { &*buf.as_ptr().cast::<JOBOBJECT_BASIC_PROCESS_ID_LIST>() };
        let listed = (header.NumberOfProcessIdsInList as usize).min(ROOM);
        let offset = std::mem::offset_of!(JOBOBJECT_BASIC_PROCESS_ID_LIST, ProcessIdList)
            / std::mem::size_of::<usize>();
        Ok(buf[offset..offset + listed]
            .iter()
            .filter_map(|p| u32::try_from(*p).ok())
            .collect())
    }

    /// Terminates every process of the job with exit code `code`.
    pub(crate) fn terminate(&self, code: u32) -> io::Result<()> {
        // SAFETY: an open job handle.
        if unsafe { TerminateJobObject(raw(&self.0), code) } == 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// Lets the job's processes outlive it: closing it no longer kills them.
    pub(crate) fn leave_running(&self) -> io::Result<()> {
        self.set_kill_on_close(false)
    }
}

/// Sends `CTRL_BREAK_EVENT` to the console process group `group` (a process
/// started with `CREATE_NEW_PROCESS_GROUP`, and those it started). Fails
/// when this process has no console, or the group is not on it.
pub(crate) fn ctrl_break(group: u32) -> io::Result<()> {
    // SAFETY: plain arguments.
    if unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, group) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// A manual-reset event: what a [`Canceller`](crate::Canceller) wakes.
#[derive(Debug)]
pub(crate) struct Waker(OwnedHandle);

impl Waker {
    pub(crate) fn new() -> io::Result<Waker> {
        // SAFETY: no attributes, manual reset, not signalled, no name.
        let event = unsafe { CreateEventW(std::ptr::null(), 1, 0, std::ptr::null()) };
        Ok(Waker(owned(event)?))
    }

    /// Signals it (for good: it is never reset).
    pub(crate) fn wake(&self) {
        // SAFETY: an open event handle.
        unsafe { SetEvent(raw(&self.0)) };
    }

    /// What waits for it.
    pub(crate) fn handle(&self) -> BorrowedHandle<'_> {
        use std::os::windows::io::AsHandle;
        self.0.as_handle()
    }
}

/// A pipe (read end, write end); neither end is inheritable (a child gets
/// a duplicate of the end it is given).
pub(crate) fn pipe_cloexec() -> io::Result<(OwnedHandle, OwnedHandle)> {
    let mut read: HANDLE = std::ptr::null_mut();
    let mut write: HANDLE = std::ptr::null_mut();
    // SAFETY: two HANDLEs of ours; no attributes (not inheritable).
    if unsafe { CreatePipe(&mut read, &mut write, std::ptr::null(), 0) } == 0 {
        return Err(last_error());
    }
    Ok((owned(read)?, owned(write)?))
}

/// Console control events (Ctrl-C, Ctrl-Break) received by this process,
/// counted while at least one [`CtrlCatcher`] lives; none of them ends this
/// process meanwhile.
pub(crate) struct CtrlCatcher {
    seen: usize,
}

/// How many control events arrived since the process started catching.
static CTRL_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Catchers alive now.
static CATCHERS: Mutex<usize> = Mutex::new(0);
/// Signalled by the handler; reset by the catcher that looks.
static CTRL_EVENT: OnceLock<Option<Waker>> = OnceLock::new();

unsafe extern "system" fn on_ctrl(kind: u32) -> i32 {
    if kind == CTRL_C_EVENT || kind == CTRL_BREAK_EVENT {
        CTRL_COUNT.fetch_add(1, Ordering::SeqCst);
        if let Some(Some(event)) = CTRL_EVENT.get() {
            event.wake();
        }
        return 1; // handled: this process goes on
    }
    0 // a close, logoff or shutdown: the next handler (the default: exit)
}

impl CtrlCatcher {
    /// Starts catching Ctrl-C and Ctrl-Break.
    pub(crate) fn new() -> io::Result<CtrlCatcher> {
        if CTRL_EVENT.get_or_init(|| Waker::new().ok()).is_none() {
            return Err(io::Error::other("cannot create the console event"));
        }
        let mut catchers = CATCHERS.lock().unwrap_or_else(PoisonError::into_inner);
        if *catchers == 0 {
            // SAFETY: `on_ctrl` is a handler of the right signature that
            // only touches atomics and an event handle.
            if unsafe { SetConsoleCtrlHandler(Some(on_ctrl), 1) } == 0 {
                return Err(last_error());
            }
        }
        *catchers += 1;
        Ok(CtrlCatcher {
            seen: CTRL_COUNT.load(Ordering::SeqCst),
        })
    }

    /// What is signalled when an event arrived.
    pub(crate) fn handle(&self) -> Option<BorrowedHandle<'_>> {
        CTRL_EVENT.get().and_then(Option::as_ref).map(Waker::handle)
    }

    /// How many events arrived since the last call.
    pub(crate) fn pending(&mut self) -> usize {
        if let Some(Some(event)) = CTRL_EVENT.get() {
            // Reset before reading the count: an event counted after the
            // read signals it again.
            // SAFETY: an open event handle.
            unsafe { ResetEvent(raw(&event.0)) };
        }
        let now = CTRL_COUNT.load(Ordering::SeqCst);
        let new = now.saturating_sub(self.seen);
        self.seen = now;
        new
    }
}

impl Drop for CtrlCatcher {
    fn drop(&mut self) {
        let mut catchers = CATCHERS.lock().unwrap_or_else(PoisonError::into_inner);
        *catchers = catchers.saturating_sub(1);
        if *catchers == 0 {
            // SAFETY: removes the handler added in `new`.
            unsafe { SetConsoleCtrlHandler(Some(on_ctrl), 0) };
        }
    }
}

/// Monotonic nanoseconds since this process first asked (only compared
/// within this process: no guardian runs on Windows).
pub(crate) fn mono_ns() -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The exit code of a process this crate terminated (`TerminateProcess`,
/// `TerminateJobObject`): 137, as a shell reports a `SIGKILL`ed command.
/// (Under wine a process killed through its Job Object may report 0
/// instead: the supervisor decides how a run ended from what it did, never
/// from this code.)
pub(crate) const KILLED_EXIT_CODE: u32 = 137;

/// How a command is created: suspended (it runs nothing until it is in its
/// job and recorded), leading a console process group of its own (so that
/// `CTRL_BREAK_EVENT` reaches it and what it starts, and Ctrl-C typed at
/// the console does not: the supervisor decides what it gets).
pub(crate) const SPAWN_FLAGS: u32 = windows_sys::Win32::System::Threading::CREATE_NEW_PROCESS_GROUP
    | windows_sys::Win32::System::Threading::CREATE_SUSPENDED;

/// The program running now (its path, as the loader found it).
pub(crate) fn this_program() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_default()
}

/// Makes this process's standard handles not inheritable (children given
/// them through `Stdio::inherit` get duplicates all the same).
pub(crate) fn uninherit_standard_handles() {
    for which in [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE] {
        // SAFETY: reads this process's standard handle; no arguments of ours.
        let handle = unsafe { GetStdHandle(which) };
        if handle.is_null() || handle == INVALID_HANDLE_VALUE {
            continue;
        }
        // SAFETY: a handle of this process (possibly a console pseudo
        // handle, for which the call fails harmlessly); only its inherit
        // flag changes.
        unsafe { SetHandleInformation(handle, HANDLE_FLAG_INHERIT, 0) };
    }
}
