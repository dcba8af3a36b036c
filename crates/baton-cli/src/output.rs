//! Printing results: human-readable tables, or JSON with `--json`.
//!
//! JSON shapes are those of the serialized library types (`LockStatus`,
//! `Held`, `ReleaseReport`, `BreakReport`); they are a stable contract,
//! covered by the CLI tests.

use baton_lock::{Content, HolderInfo, LockStatus};
use baton_run::hold::{BreakReport, Held, ReleaseReport};
use serde::Serialize;

use crate::exit_codes::BATON_FAILED;

/// How a `--json` document is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Indented, for reports (`lock status`, `workspace list`, ...).
    Pretty,
    /// One line, for values that scripts pipe on (`state get`, `state edit`).
    Line,
}

/// The one JSON printer of the CLI; returns the exit code.
pub(crate) fn print_json<T: Serialize + ?Sized>(value: &T) -> u8 {
    write_json(value, Layout::Pretty)
}

/// Prints `value` as JSON laid out as asked; returns the exit code.
pub(crate) fn write_json<T: Serialize + ?Sized>(value: &T, layout: Layout) -> u8 {
    let text = match layout {
        Layout::Pretty => serde_json::to_string_pretty(value),
        Layout::Line => serde_json::to_string(value),
    };
    match text {
        Ok(s) => {
            outln!("{s}");
            0
        }
        Err(e) => {
            errln!("baton: cannot encode JSON: {e}");
            BATON_FAILED
        }
    }
}

fn state(st: &LockStatus) -> String {
    if !st.held_through_replaced_file.is_empty() && st.holders.is_empty() {
        "held on a deleted or replaced lock file".into()
    } else if st.held {
        let mode = st.mode.as_deref().unwrap_or("held");
        if st.max > 1 {
            format!("held ({mode}, {}/{} slots)", st.holders.len(), st.max)
        } else if st.holders.len() > 1 {
            format!("held ({mode}, {} holders)", st.holders.len())
        } else {
            format!("held ({mode})")
        }
    } else if st.last_holder_died {
        "free, last holder died".into()
    } else {
        "free".into()
    }
}

fn who(h: &HolderInfo) -> String {
    use baton_lock::Liveness;
    let ns = match (h.pid_ns, h.local_pid) {
        (Some(ns), Some(here)) if here != h.pid => {
            format!(" in PID namespace {ns} (pid {here} here)")
        }
        (Some(ns), None) if h.liveness == Liveness::NotVisible => {
            format!(" in PID namespace {ns}")
        }
        _ => String::new(),
    };
    let alive = match h.liveness {
        Liveness::Alive => " (alive)",
        Liveness::Unknown => "",
        Liveness::Dead => " (dead)",
        Liveness::NotVisible => " (alive in another PID namespace, not visible from here)",
        Liveness::Inherited => " (gone; the lock file it left open still holds the lock)",
    };
    format!("pid {}{ns} on {}{alive}", h.pid, h.host)
}

/// A holder that no longer holds the lock (the kernel says so), whatever
/// can be told about its process from here.
fn who_last(h: &HolderInfo) -> String {
    let ns = h
        .pid_ns
        .filter(|_| h.liveness == baton_lock::Liveness::NotVisible)
        .map(|ns| format!(" in PID namespace {ns}"))
        .unwrap_or_default();
    format!("pid {}{ns} on {}", h.pid, h.host)
}

/// `baton lock status NAME`.
pub fn status(st: &LockStatus, json: bool) -> u8 {
    if json {
        return print_json(st);
    }
    outln!("lock        {}", st.name);
    outln!("state       {}", state(st));
    outln!("waiters     {}", st.waiters);
    for h in &st.holders {
        outln!(
            "holder      {}, owner {}, token {}",
            who(h),
            h.owner,
            h.token
        );
        outln!("            run {}, since {}", h.run_id, h.acquired_at);
        if let Some(op) = &h.operation {
            outln!("            operation: {op}");
        }
    }
    if let Some(h) = &st.last_holder {
        outln!(
            "last holder {} died without releasing (owner {}, token {}, since {})",
            who_last(h),
            h.owner,
            h.token,
            h.acquired_at
        );
    }
    for k in &st.kernel_holders {
        outln!(
            "held by     pid {} ({}) according to the kernel (its open lock file holds slot {})",
            k.pid,
            k.command,
            k.slots
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for f in &st.held_through_replaced_file {
        outln!(
            "            held through lock file {f}, no longer at this path (deleted or replaced); new holders wait for it"
        );
    }
    outln!("last token  {}", st.last_token);
    match st.content {
        Content::Unreadable => outln!(
            "metadata    unreadable ({}); the next holder rewrites it",
            st.content_error.as_deref().unwrap_or("unknown reason")
        ),
        Content::Missing => outln!("metadata    none (never used)"),
        _ => {}
    }
    outln!("file        {}", st.path.display());
    0
}

/// `baton lock list` and `baton lock status` without a name.
pub fn list(all: &[LockStatus], json: bool) -> u8 {
    if json {
        return print_json(all);
    }
    if all.is_empty() {
        outln!("no locks");
        return 0;
    }
    let rows: Vec<[String; 6]> = all
        .iter()
        .map(|st| {
            let h = st.holder.as_ref().or(st.last_holder.as_ref());
            let shown = match (&st.holder, &st.last_holder) {
                (Some(h), _) => who(h),
                (None, Some(last)) => who_last(last),
                (None, None) => "-".into(),
            };
            [
                st.name.clone(),
                state(st),
                st.waiters.to_string(),
                shown,
                h.map(|h| h.owner.clone()).unwrap_or_else(|| "-".into()),
                h.and_then(|h| h.operation.clone())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = ["NAME", "STATE", "WAITERS", "HOLDER", "OWNER", "OPERATION"];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths.iter()).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        outln!("{}", s.trim_end());
    };
    line(header);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
    }
    0
}

/// `baton lock acquire`: the token alone, for `TOKEN=$(...)`.
pub fn acquired(held: &Held, json: bool) -> u8 {
    if json {
        return print_json(held);
    }
    outln!("{}", held.token);
    0
}

/// `baton lock release`.
pub fn released(r: &ReleaseReport, json: bool) -> u8 {
    if json {
        return print_json(r);
    }
    outln!(
        "released lock '{}' (token {}, holder pid {})",
        r.name,
        r.token,
        r.holder_pid
    );
    0
}

/// `baton lock break`.
pub fn broke(r: &BreakReport, json: bool) -> u8 {
    if json {
        return print_json(r);
    }
    if !r.was_held {
        outln!("lock '{}' is not held; nothing to do", r.name);
        return 0;
    }
    for s in &r.stopped {
        outln!(
            "lock '{}': holder {} (owner {}, token {}): {}",
            r.name,
            who(&s.holder),
            s.holder.owner,
            s.holder.token,
            s.action
        );
    }
    if r.free_now {
        outln!("lock '{}' is free now", r.name);
        0
    } else {
        outln!(
            "lock '{}' is still held (taken again by a waiter, or the holder is stuck)",
            r.name
        );
        0
    }
}

/// `baton group status`.
pub fn groups(all: &[baton_run::GroupStatus], one: bool, json: bool) -> u8 {
    if json {
        return if one {
            match all.first() {
                Some(g) => print_json(g),
                None => print_json(&serde_json::Value::Null),
            }
        } else {
            print_json(all)
        };
    }
    if all.is_empty() {
        outln!("no groups");
        return 0;
    }
    for g in all {
        let mode = g.mode.map(|m| m.as_str()).unwrap_or("idle");
        let counters = if g.counted {
            format!(
                "  completed {}  superseded {}  skipped {}",
                g.completed, g.superseded, g.skipped
            )
        } else {
            String::new()
        };
        outln!(
            "group {}  mode {}{}{counters}",
            g.key,
            mode,
            if g.max > 1 {
                format!(" (max {})", g.max)
            } else {
                String::new()
            },
        );
        for r in &g.running {
            outln!(
                "  running  run {}  pid {}  since {}  {}",
                r.run_id,
                r.process.pid,
                r.started_at.as_deref().unwrap_or("-"),
                r.command
            );
        }
        for (i, r) in g.waiting.iter().enumerate() {
            outln!(
                "  waiting  #{}  run {}  pid {}  since {}  {}{}",
                i + 1,
                r.run_id,
                r.process.pid,
                r.queued_at,
                r.command,
                r.superseded_by
                    .as_deref()
                    .map(|b| format!("  (superseded by {b})"))
                    .unwrap_or_default()
            );
        }
    }
    0
}

/// `pid 12 (sleep), pid 13 (sh, had left the process group)`.
pub fn leftovers(all: &[baton_proc::Leftover]) -> String {
    all.iter()
        .map(|l| {
            let escaped = if l.escaped {
                ", had left the process group"
            } else {
                ""
            };
            format!("pid {} ({}{escaped})", l.pid, l.command)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
