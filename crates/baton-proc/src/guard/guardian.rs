//! The guardian process and the supervisor's end of it (Unix): see the
//! [module documentation](super).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    recvmsg, send, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage,
};
use rustix::process::Pid;

use super::fence::{
    mono_ns, write_all, Fence, GuardSpec, GUARD_ARG, GUARD_DISARMED, GUARD_FENCED, GUARD_ORPHANED,
};
use crate::contain::{terminate_group, terminate_session, GroupIdentity, SUPERVISED};
use crate::error::ProcError;
use crate::sys::{ProcFd, SEND_FLAGS};
use crate::time::timespec;
use crate::tree::{ProcessTree, TreeSnapshot};

/// The supervisor's end of a running guardian. Dropping it disarms it.
pub(crate) struct Guardian {
    child: Option<std::process::Child>,
    /// Readable once it has exited.
    pidfd: Option<ProcFd>,
    socket: Option<Arc<OwnedFd>>,
    fence: Fence,
    /// Set once it has exited: whether it fenced the command.
    fenced: Option<bool>,
}

impl Guardian {
    /// Starts the guardian (not armed yet: nothing to guard).
    pub(crate) fn spawn(spec: &GuardSpec) -> Result<Guardian, ProcError> {
        Guardian::spawn_with(spec, std::process::Stdio::inherit())
    }

    /// [`Guardian::spawn`] with its standard error connected to `stderr`.
    pub(crate) fn spawn_with(
        spec: &GuardSpec,
        stderr: std::process::Stdio,
    ) -> Result<Guardian, ProcError> {
        use std::os::unix::process::CommandExt;
        let (ours, theirs) = crate::sys::socketpair_cloexec()
            .map_err(|e| ProcError::io("create the guardian's socket", e))?;
        // Registered before a shared subreaper may look for orphans.
        let spawning = crate::orphans::spawning();
        let child = std::process::Command::new(&spec.program)
            .arg(GUARD_ARG)
            .stdin(std::process::Stdio::from(theirs))
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            // Its own group: a Ctrl-C or a job-control stop of the
            // supervisor's group must not reach it.
            .process_group(0)
            .spawn()
            .map_err(|e| ProcError::io("start the command's guardian", e))?;
        // A child of ours, but not an orphan of the command's.
        SUPERVISED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(child.id() as i32);
        drop(spawning);
        let pidfd = Pid::from_raw(child.id() as i32).and_then(|p| ProcFd::open(p).ok());
        Ok(Guardian {
            pidfd,
            child: Some(child),
            socket: Some(Arc::new(ours)),
            fence: spec.fence.clone(),
            fenced: None,
        })
    }

    /// A descriptor readable once it has exited.
    pub(crate) fn pidfd(&self) -> Option<&ProcFd> {
        self.pidfd.as_ref()
    }

    /// Hands it the command's group, with the fence's deadline; from now
    /// on the fence tells it every later deadline.
    pub(crate) fn arm(&self, pgid: i32) -> Result<(), ProcError> {
        let Some(socket) = &self.socket else {
            return Err(ProcError::io(
                "arm the command's guardian",
                io::Error::from(io::ErrorKind::NotConnected),
            ));
        };
        let leader = crate::procfs::stat(pgid);
        let (start, session) = leader.map_or((0, 0), |l| (l.start_time, l.session));
        let mut s = self.fence.lock();
        let until = s.until().unwrap_or(0);
        write_all(
            socket,
            format!("A {pgid} {start} {session} {until}\n").as_bytes(),
        )
        .map_err(|e| ProcError::io("arm the command's guardian", e))?;
        s.told = until;
        s.socket = Some(Arc::clone(socket));
        Ok(())
    }

    /// Hands it a process tree to guard instead of a group: process `root`
    /// (if it still is the one that started at `root_start`) and what it
    /// starts, which the guardian follows itself
    /// ([`ProcessTree`](crate::ProcessTree)). `keep` are descriptors it keeps
    /// open until it exits (the lock files of a hold: their kernel locks
    /// then outlive this process until the tree is stopped).
    pub(crate) fn arm_tree(
        &self,
        tree: &TreeSnapshot,
        keep: &[BorrowedFd<'_>],
    ) -> Result<(), ProcError> {
        let Some(socket) = &self.socket else {
            return Err(ProcError::io(
                "arm the guardian",
                io::Error::from(io::ErrorKind::NotConnected),
            ));
        };
        let mut s = self.fence.lock();
        let until = s.until().unwrap_or(0);
        let mut line = format!("T {} {} {until}", tree.root, tree.root_start);
        for (pid, start) in &tree.foreign {
            line.push_str(&format!(" {pid}:{start}"));
        }
        if let Some(mark) = tree.mark {
            line.push_str(&format!(" M{mark}"));
        }
        line.push('\n');
        send_with_fds(socket, line.as_bytes(), keep)
            .map_err(|e| ProcError::io("arm the guardian", e))?;
        s.told = until;
        s.socket = Some(Arc::clone(socket));
        Ok(())
    }

    /// Disarms it, to exit on its own (call it once the command and
    /// its leftovers are gone). Returns whether it had stopped the command
    /// itself because the supervisor stopped vouching in time.
    pub(crate) fn finish(mut self) -> bool {
        self.close()
    }

    fn close(&mut self) -> bool {
        if let Some(fenced) = self.fenced {
            return fenced;
        }
        self.fence.lock().socket = None;
        let mut fenced = false;
        if let Some(socket) = self.socket.take() {
            // A guardian that fences says so on the socket before it kills:
            // the command's death, which brought us here, came after.
            fenced = said_fenced(&socket);
            let _ = write_all(&socket, b"D\n");
        }
        // Dropping the socket is its end of file: it exits. It is reaped
        // off this thread: waiting here would add its start-up to every
        // run's hold (a short command ends before its guardian has even
        // started), serialising the lock's holders on it.
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            let pidfd = self.pidfd.take();
            let reap = move || {
                // One that does not exit within 5 s is killed.
                if let Some(fd) = &pidfd {
                    let mut fds = [PollFd::new(fd, PollFlags::IN)];
                    let limit = timespec(Duration::from_secs(5));
                    loop {
                        match poll(&mut fds, Some(&limit)) {
                            Err(Errno::INTR) => continue,
                            Ok(0) => {
                                let _ = child.kill();
                            }
                            _ => {}
                        }
                        break;
                    }
                }
                let _ = child.wait();
                SUPERVISED
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|p| *p != pid);
            };
            // Without a thread (out of resources) it still exits, and stays
            // a zombie until this process ends.
            let _ = std::thread::Builder::new()
                .name("baton-guard-reap".into())
                .spawn(reap);
        }
        self.fenced = Some(fenced);
        fenced
    }
}

/// Whether the guardian wrote "F" (it fenced the command), without waiting.
fn said_fenced(socket: &OwnedFd) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        rustix::net::recv(socket.as_fd(), &mut buf, rustix::net::RecvFlags::DONTWAIT),
        Ok((n, _)) if buf[..n].contains(&b'F')
    )
}

impl Drop for Guardian {
    fn drop(&mut self) {
        self.close();
    }
}

/// The guardian process: reads its standard input (the socket from the
/// supervisor) until disarmed, or stops the armed command when the
/// supervisor dies or its deadline passes. Returns the exit code
/// ([`GUARD_DISARMED`], [`GUARD_FENCED`], [`GUARD_ORPHANED`], or 125 for a
/// broken protocol).
///
/// Call it from `main` when the first argument is [`GUARD_ARG`].
#[allow(unsafe_code)] // signal(2) with SIG_IGN: the SAFETY comment below
pub fn guardian_main() -> i32 {
    // Started as `/proc/self/exe`, it would be called "exe" wherever a
    // process's name is shown: in `ps`, and in `lock status` when it is the
    // one that keeps a lock file open ("held by pid N (exe)").
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::set_name(c"baton-guard");
    // Signals meant for the terminal or the supervisor's job are not ours.
    for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGPIPE] {
        // SAFETY: SIG_IGN is a valid disposition for these signals; no
        // handler code runs.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let input = rustix::stdio::stdin();
    let mut armed: Option<Armed> = None;
    let mut disarmed = false;
    let mut buf: Vec<u8> = Vec::new();
    // Descriptors handed over to be kept open until this process exits.
    let mut kept: Vec<OwnedFd> = Vec::new();
    loop {
        let timeout = match &mut armed {
            Some(a) if a.until > 0 => {
                let now = mono_ns();
                if now >= a.until {
                    // A command that had ended already was not cut short.
                    if !a.running() {
                        return GUARD_DISARMED;
                    }
                    // Told before the kill: the supervisor learns it from
                    // the socket when it sees its command end.
                    let _ = send(input, b"F\n", SEND_FLAGS);
                    a.stop();
                    return GUARD_FENCED;
                }
                Some(Duration::from_nanos(a.until - now))
            }
            _ => None,
        };
        // A tree is followed between messages.
        let follow = armed.as_ref().and_then(Armed::follow_every);
        let timeout = match (timeout, follow) {
            (Some(t), Some(f)) => Some(t.min(f)),
            (t, f) => t.or(f),
        };
        let mut fds = [PollFd::new(&input, PollFlags::IN)];
        match poll(&mut fds, timeout.map(timespec).as_ref()) {
            // The deadline, time to follow the tree, or a signal.
            Ok(0) | Err(Errno::INTR) => {
                if let Some(a) = armed.as_mut() {
                    a.refresh();
                }
                continue;
            }
            Ok(_) => {}
            Err(_) => {
                if let Some(a) = armed.as_mut() {
                    a.stop();
                }
                return GUARD_ORPHANED;
            }
        }
        let mut chunk = [0u8; 512];
        let n = match receive(input, &mut chunk, &mut kept) {
            Ok(n) => n,
            Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
            Err(_) => 0,
        };
        if n == 0 {
            // End of file: the supervisor closed its end, or died.
            if disarmed {
                return GUARD_DISARMED;
            }
            if let Some(a) = armed.as_mut() {
                a.stop();
                return GUARD_ORPHANED;
            }
            return GUARD_DISARMED; // nothing was started
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            match parse(&line) {
                Some(Message::Arm(a)) => armed = Some(a),
                Some(Message::Feed(until)) => {
                    if let Some(a) = armed.as_mut() {
                        a.until = a.until.max(until);
                    }
                }
                Some(Message::Disarm) => {
                    armed = None;
                    disarmed = true;
                }
                None => {
                    if let Some(a) = armed.as_mut() {
                        a.stop();
                    }
                    return baton_contract::exit::BATON_FAILED;
                }
            }
        }
    }
}

/// What an armed guardian stops, and until when it may run.
struct Armed {
    target: Target,
    /// Monotonic nanoseconds; 0 = no deadline (only the supervisor's death).
    until: u64,
}

/// A command's process group, or a process tree the guardian follows.
enum Target {
    Group {
        pgid: i32,
        leader_start_time: u64,
        session: i32,
    },
    /// `None` once the root had exited when the guardian was armed, or
    /// once the tree has been stopped.
    Tree(Option<ProcessTree>),
}

/// How often a guardian of a tree collects what the tree started (as the
/// holder of `baton lock acquire` does).
const FOLLOW_EVERY: Duration = Duration::from_millis(25);

impl Armed {
    /// Whether a process of the group, as recorded, or of the tree still runs.
    fn running(&mut self) -> bool {
        match &mut self.target {
            Target::Group {
                pgid,
                leader_start_time,
                session,
            } => {
                let (pgid, start, session) = (*pgid, *leader_start_time, *session);
                let reused =
                    crate::procfs::stat(pgid).is_some_and(|l| !l.exited && l.start_time != start);
                !reused
                    && !crate::procfs::scan(|_, st| {
                        st.pgrp == pgid
                            && !st.exited
                            && st.start_time >= start
                            && (session == 0 || st.session == session)
                    })
                    .is_empty()
            }
            Target::Tree(tree) => tree.as_mut().is_some_and(|t| {
                t.refresh();
                !t.pids().is_empty()
            }),
        }
    }

    /// How often to follow the target between messages (a tree only).
    fn follow_every(&self) -> Option<Duration> {
        matches!(self.target, Target::Tree(Some(_))).then_some(FOLLOW_EVERY)
    }

    /// Collects what a followed tree started since the last call.
    fn refresh(&mut self) {
        if let Target::Tree(Some(tree)) = &mut self.target {
            tree.refresh();
        }
    }

    /// Kills the whole group or tree at once (no grace: the bound is the
    /// promise); whether anything of it was still running.
    fn stop(&mut self) -> bool {
        match &mut self.target {
            // A command in a session of its own (the job service's): all of
            // that session.
            Target::Group {
                pgid,
                leader_start_time,
                session,
            } if *session == *pgid => {
                !terminate_session(*pgid, *leader_start_time, Duration::ZERO).is_empty()
            }
            Target::Group {
                pgid,
                leader_start_time,
                session,
            } => !terminate_group(
                *pgid,
                GroupIdentity::Recorded {
                    leader_start_time: *leader_start_time,
                    session: *session,
                },
                Duration::ZERO,
            )
            .is_empty(),
            Target::Tree(tree) => match tree.take() {
                Some(t) => {
                    let any = !t.pids().is_empty();
                    t.terminate(Duration::ZERO);
                    any
                }
                None => false,
            },
        }
    }
}

enum Message {
    Arm(Armed),
    Feed(u64),
    Disarm,
}

fn parse(line: &[u8]) -> Option<Message> {
    let text = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = text.split(' ');
    match parts.next()? {
        "A" => {
            let pgid: i32 = parts.next()?.parse().ok()?;
            let leader_start_time: u64 = parts.next()?.parse().ok()?;
            let session: i32 = parts.next()?.parse().ok()?;
            let until: u64 = parts.next()?.parse().ok()?;
            (pgid > 1).then_some(Message::Arm(Armed {
                target: Target::Group {
                    pgid,
                    leader_start_time,
                    session,
                },
                until,
            }))
        }
        "T" => {
            let root: i32 = parts.next()?.parse().ok()?;
            let root_start: u64 = parts.next()?.parse().ok()?;
            let until: u64 = parts.next()?.parse().ok()?;
            let (marks, rest): (Vec<&str>, Vec<&str>) = parts.partition(|p| p.starts_with('M'));
            let mark = match marks.first() {
                Some(m) => Some(m.get(1..)?.parse().ok()?),
                None => None,
            };
            let foreign = rest
                .into_iter()
                .map(|p| {
                    let (pid, start) = p.split_once(':')?;
                    Some((pid.parse().ok()?, start.parse().ok()?))
                })
                .collect::<Option<Vec<(i32, u64)>>>()?;
            (root > 1).then(|| {
                Message::Arm(Armed {
                    target: Target::Tree(ProcessTree::follow_as(&TreeSnapshot {
                        root,
                        root_start,
                        foreign,
                        mark,
                    })),
                    until,
                })
            })
        }
        "F" => Some(Message::Feed(parts.next()?.parse().ok()?)),
        "D" => Some(Message::Disarm),
        _ => None,
    }
}

/// Reads what the supervisor sent into `buf`, keeping any descriptors that
/// came with it in `kept` (close-on-exec).
fn receive(socket: impl AsFd, buf: &mut [u8], kept: &mut Vec<OwnedFd>) -> Result<usize, Errno> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_KEPT))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        socket,
        &mut [io::IoSliceMut::new(buf)],
        &mut control,
        RECV_FLAGS,
    )?;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            kept.extend(fds);
        }
    }
    Ok(got.bytes)
}

/// The guardian never executes anything; close-on-exec is only hygiene
/// where the system offers it on receipt.
#[cfg(not(target_vendor = "apple"))]
const RECV_FLAGS: RecvFlags = RecvFlags::CMSG_CLOEXEC;
#[cfg(target_vendor = "apple")]
const RECV_FLAGS: RecvFlags = RecvFlags::empty();

/// The most descriptors one message hands over.
const MAX_KEPT: usize = 16;

/// Sends `bytes` with `fds` attached (at most [`MAX_KEPT`]); never raises
/// `SIGPIPE`. The message is far below the socket's buffer: one call.
fn send_with_fds(socket: &OwnedFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_KEPT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("at most {MAX_KEPT} descriptors can be handed to a guardian"),
        ));
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_KEPT))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::from(io::ErrorKind::OutOfMemory));
    }
    loop {
        match sendmsg(
            socket.as_fd(),
            &[io::IoSlice::new(bytes)],
            &mut control,
            SEND_FLAGS,
        ) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_and_garbage_is_refused() {
        assert!(matches!(
            parse(b"A 1234 99 1200 5000\n"),
            Some(Message::Arm(Armed {
                target: Target::Group {
                    pgid: 1234,
                    leader_start_time: 99,
                    session: 1200,
                },
                until: 5000
            }))
        ));
        assert!(matches!(parse(b"F 77\n"), Some(Message::Feed(77))));
        assert!(matches!(parse(b"D\n"), Some(Message::Disarm)));
        assert!(
            parse(b"A 1 2 3 4\n").is_none(),
            "pgid 1 is never a command's"
        );
        assert!(parse(b"X\n").is_none());
        assert!(parse(b"T 1 2 3\n").is_none(), "pid 1 is never a script");
        assert!(parse(b"T 5 2 3 7:x\n").is_none(), "a broken foreign member");
        // A root that is not running (pid 0 never is one of ours): armed,
        // with nothing to follow.
        assert!(matches!(
            parse(format!("T {} 1 0\n", i32::MAX).as_bytes()),
            Some(Message::Arm(Armed {
                target: Target::Tree(None),
                until: 0
            }))
        ));
        assert!(parse(b"F x\n").is_none());
    }
}
