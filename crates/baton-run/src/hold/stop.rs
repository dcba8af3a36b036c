//! Ending someone's hold from outside: `baton lock release` (the holder lets
//! go when asked) and `baton lock break` (the holder, and the script it
//! holds for, are stopped).

use std::time::Duration;

use baton_ipc::{ask_to_exit, Asked};
use baton_lock::{start_time, HolderInfo, HolderKind, Liveness, LockError, LockName};
use baton_proc::{terminate_verified, TerminateReport};
use serde::Serialize;

use crate::backend::Backend;
use crate::error::RunError;

/// What `release` did.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReleaseReport {
    /// The lock.
    pub name: String,
    /// The token released.
    pub token: u64,
    /// Pid of the background holder that was stopped.
    pub holder_pid: i32,
}

impl Backend {
    /// Releases a lock held by a background holder (`baton lock acquire`).
    ///
    /// With `token`, only the grant with that token is released; a token that is
    /// not current changes nothing and is reported as [`LockError::StaleToken`].
    /// Without it, only a hold taken for one of `callers` (the script asking,
    /// as [`callers_of_release`](crate::hold::callers_of_release) names it) is
    /// released, unless `force`: a script must never free a lock that another
    /// script holds (`trap 'baton lock release x' EXIT` after a failed
    /// acquire, say).
    pub fn release_held(
        &self,
        name: &LockName,
        token: Option<u64>,
        callers: &[(i32, u64)],
        force: bool,
    ) -> Result<ReleaseReport, RunError> {
        let st = self.status(name)?;
        let holds: Vec<&HolderInfo> = st
            .holders
            .iter()
            .filter(|h| h.kind == HolderKind::Hold)
            .collect();
        let mine: Vec<&HolderInfo> = holds
            .iter()
            .copied()
            .filter(|h| {
                force
                    || h.acquired_for.as_ref().is_some_and(|f| {
                        f.in_my_pid_ns()
                            && callers
                                .iter()
                                .any(|(pid, start)| f.pid == *pid && f.start_time == *start)
                    })
            })
            .collect();
        let target = match token {
        Some(t) => match st.holders.iter().find(|h| h.token == t) {
            Some(h) if h.kind == HolderKind::Hold => h,
            Some(h) => {
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: format!(
                        "token {t} belongs to a `baton {}` process (pid {}), which releases the lock itself when it ends; use `baton lock break` to stop it",
                        h.kind.as_str(),
                        h.pid
                    ),
                }
                .into())
            }
            None => {
                let current = st
                    .holders
                    .iter()
                    .map(|h| h.token.to_string())
                    .collect::<Vec<_>>();
                return Err(LockError::StaleToken {
                    name: name.to_string(),
                    given: t,
                    current: if current.is_empty() {
                        "none, the lock is free".into()
                    } else {
                        current.join(", ")
                    },
                }
                .into());
            }
        },
        None => match (mine.as_slice(), holds.as_slice()) {
            ([one], _) => *one,
            ([], []) if st.held => {
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: "it is not held by `baton lock acquire` (a `baton run` or library holder releases it itself; use `baton lock break` to stop one)".into(),
                }
                .into())
            }
            ([], []) => {
                return Err(LockError::NotHeld {
                    name: name.to_string(),
                    detail: None,
                }
                .into())
            }
            ([], [other, ..]) => {
                let whose = other
                    .acquired_for
                    .as_ref()
                    .map_or_else(|| "another process".to_string(), |f| format!("process {}", f.pid));
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: format!(
                        "it was acquired for {whose}, not for this script; release it with the token `acquire` printed (--token), or with --force"
                    ),
                }
                .into());
            }
            (_, _) => {
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: format!(
                        "{} background holders hold it; say which with --token",
                        mine.len()
                    ),
                }
                .into())
            }
        },
    };
        if target.host != baton_lock::hostname() {
            return Err(LockError::Refused {
            name: name.to_string(),
            reason: format!(
                "its background holder (pid {}) runs on host '{}'; release it there, or end it with `baton lock break`",
                target.pid, target.host
            ),
        }
        .into());
        }
        ask_to_release(name, target)?;
        Ok(ReleaseReport {
            name: name.to_string(),
            token: target.token,
            holder_pid: target.pid,
        })
    }
}

/// One holder stopped by `break`.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BrokenHolder {
    /// Who held it.
    pub holder: HolderInfo,
    /// `exited after TERM`, `killed`, `kill pending` or `already gone`.
    pub action: String,
}

/// What `break` did.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BreakReport {
    /// The lock.
    pub name: String,
    /// Whether it was held when `break` started.
    pub was_held: bool,
    /// Holders stopped.
    pub stopped: Vec<BrokenHolder>,
    /// Whether it is free now.
    pub free_now: bool,
}

impl Backend {
    /// Stops the live holders of a lock on this host: TERM, `grace`, KILL.
    ///
    /// Never unlinks or rewrites a lock file; the kernel releases the lock when
    /// the holder exits. Holders on another host, or a held lock whose recorded
    /// holder is gone, are refused with an explanation.
    pub fn break_lock(&self, name: &LockName, grace: Duration) -> Result<BreakReport, RunError> {
        #[cfg(feature = "postgres")]
        if let Some(db) = self.database() {
            return break_remote(db, name);
        }
        let st = self.status(name)?;
        let mut report = BreakReport {
            name: name.to_string(),
            was_held: st.held,
            stopped: Vec::new(),
            free_now: !st.held,
        };
        if !st.held {
            return Ok(report);
        }
        if st.holders.is_empty() {
            return Err(LockError::Refused {
            name: name.to_string(),
            reason: "it is held, but its metadata names no holder (unreadable or missing); find the holder with `fuser` on the lock file".into(),
        }
        .into());
        }
        for h in &st.holders {
            match h.liveness {
            Liveness::Unknown => {
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: format!(
                        "it is held by pid {} on host '{}', and baton can only stop holders on this host ('{}'); stop it there",
                        h.pid,
                        h.host,
                        baton_lock::hostname()
                    ),
                }
                .into())
            }
            Liveness::NotVisible => {
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: format!(
                        "it is held by pid {} in another PID namespace{}, which is not visible from here; run `baton lock break {name}` where that process can be seen: inside its container or sandbox, or on the host (the initial PID namespace sees every container)",
                        h.pid,
                        h.pid_ns.map(|ns| format!(" ({ns})")).unwrap_or_default(),
                    ),
                }
                .into())
            }
            Liveness::Dead | Liveness::Inherited => {
                let by = if st.kernel_holders.is_empty() {
                    "find it with `fuser` on the lock file".to_string()
                } else {
                    let pids: Vec<String> = st
                        .kernel_holders
                        .iter()
                        .map(|k| format!("pid {} ({})", k.pid, k.command))
                        .collect();
                    format!(
                        "the kernel shows it held by {}; stop that process if it should not hold the lock",
                        pids.join(", ")
                    )
                };
                return Err(LockError::Refused {
                    name: name.to_string(),
                    reason: format!(
                        "it is held, but its recorded holder pid {} is gone: another process inherited the lock file; {by}",
                        h.pid
                    ),
                }
                .into());
            }
            Liveness::Alive => {}
        }
        }
        for h in &st.holders {
            // A script holding through `lock acquire` is stopped before its
            // holder lets go, so it never works beside the next holder.
            if let Some(caller) = h
                .acquired_for
                .as_ref()
                .filter(|_| h.kind == HolderKind::Hold)
            {
                // Its pid here (it may run in another PID namespace).
                if let Some(pid) = caller.sighting().local_pid {
                    stop_caller(pid, caller.start_time, grace);
                }
            }
            let action = stop_holder(name, h, grace)?;
            // A command that ignored the TERM its holder forwarded would run
            // on after the holder was killed (until the next grant): stopped
            // now, identity-checked.
            h.stop_command(grace);
            report.stopped.push(BrokenHolder {
                holder: h.clone(),
                action: action.into(),
            });
        }
        report.free_now = !self.status(name)?.held;
        Ok(report)
    }
}

/// `break` on PostgreSQL: the holders' sessions are ended, wherever they
/// run; each holder's supervisor then stops its command (and a new holder
/// waits until it has).
#[cfg(feature = "postgres")]
fn break_remote(db: &baton_pg::Database, name: &LockName) -> Result<BreakReport, RunError> {
    let (done, free_now) = db.break_lock(name)?;
    Ok(BreakReport {
        name: name.to_string(),
        was_held: !done.is_empty(),
        stopped: done
            .into_iter()
            .map(|t| BrokenHolder {
                holder: t.holder,
                action: if t.terminated {
                    "session terminated".into()
                } else {
                    "session already ended".into()
                },
            })
            .collect(),
        free_now,
    })
}

/// Asks a background holder to let go (SIGUSR1, through a pidfd after an
/// identity check) and waits until it has exited.
fn ask_to_release(name: &LockName, h: &HolderInfo) -> Result<(), RunError> {
    let refused = |reason: String| -> RunError {
        LockError::Refused {
            name: name.to_string(),
            reason,
        }
        .into()
    };
    if h.liveness == Liveness::NotVisible {
        return Err(refused(format!(
            "its holder pid {} runs in another PID namespace, which is not visible from here; release it where it can be seen (inside its container, or on the host)",
            h.pid
        )));
    }
    // Its pid here (it may run in another PID namespace).
    let pid = h.local_pid.unwrap_or(h.pid);
    let expected = h.start_time;
    match ask_to_exit(
        pid,
        || start_time(pid) == Some(expected),
        Duration::from_secs(10),
    ) {
        Ok(Asked::StillRunning) => Err(refused(format!(
            "its holder pid {} did not let go within 10 s (stopped?)",
            h.pid
        ))),
        Ok(_) => Ok(()), // let go, or gone already: the kernel released the lock
        Err(baton_proc::ProcError::Signal { source, .. }) => Err(refused(format!(
            "cannot signal its holder pid {pid}: {source}"
        ))),
        Err(e) => Err(refused(format!(
            "cannot ask its holder pid {pid} to let go: {e}"
        ))),
    }
}

/// Stops the script a hold was taken for, with what it started.
#[cfg(unix)]
fn stop_caller(pid: i32, start: u64, grace: Duration) {
    baton_proc::terminate_tree(pid, start, grace);
}

/// Windows: the script's process itself is terminated (identity-checked);
/// processes it started and left running are not looked for.
#[cfg(windows)]
fn stop_caller(pid: i32, start: u64, grace: Duration) {
    let _ = terminate_verified(pid, grace, || start_time(pid) == Some(start));
}

fn stop_holder(name: &LockName, h: &HolderInfo, grace: Duration) -> Result<&'static str, RunError> {
    // Its pid here: it differs from the recorded one when the holder runs in
    // another PID namespace (a container seen from the host).
    let pid = h.local_pid.unwrap_or(h.pid);
    if pid == std::process::id() as i32 {
        return Err(LockError::Refused {
            name: name.to_string(),
            reason: "it is held by this very process".into(),
        }
        .into());
    }
    // The start time is the same clock in every PID namespace: compared
    // here, on the process pinned by the pidfd.
    let expected = h.start_time;
    let report = terminate_verified(pid, grace, || start_time(pid) == Some(expected))?;
    Ok(match report {
        TerminateReport::AlreadyGone => "already gone",
        TerminateReport::ExitedAfterTerm => "exited after TERM",
        TerminateReport::Killed => "killed",
        _ => "kill pending",
    })
}
