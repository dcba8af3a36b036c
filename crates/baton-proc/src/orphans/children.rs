//! The children of this process, from the kernel's lists
//! (`/proc/self/task/<tid>/children`) where it has them.

use std::sync::OnceLock;

use crate::procfs;

/// This process's children: from `/proc/self/task/*/children` where the
/// kernel has them (listed again when a thread came or went meanwhile, as
/// a thread's children move to another when it exits), else from a scan.
fn children() -> Vec<i32> {
    static PER_TASK: OnceLock<bool> = OnceLock::new();
    let me = std::process::id();
    let per_task = *PER_TASK
        .get_or_init(|| std::path::Path::new(&format!("/proc/self/task/{me}/children")).exists());
    if per_task {
        for _ in 0..3 {
            let tasks = threads();
            let mut pids = Vec::new();
            for tid in &tasks {
                if let Ok(list) = std::fs::read_to_string(format!("/proc/self/task/{tid}/children"))
                {
                    pids.extend(
                        list.split_whitespace()
                            .filter_map(|p| p.parse::<i32>().ok()),
                    );
                }
            }
            if threads() == tasks {
                return pids;
            }
        }
    }
    let me = me as i32;
    procfs::scan(|_, st| st.ppid == me)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

fn threads() -> Vec<String> {
    let mut tids: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

/// The children of this process's main thread, where orphans arrive (all
/// its children where the kernel does not list a thread's). An orphan is
/// re-parented to the first live thread of this process (the kernel's
/// `find_new_reaper` takes `find_alive_thread` of the subreaper: the
/// thread group's leader, its main thread, unless that is exiting), as are
/// the children of a thread that exits; commands are cloned by other
/// threads (the spawner, blocking threads), so that list is usually empty
/// (one small read).
pub(super) fn main_children() -> Vec<i32> {
    static MAIN: OnceLock<String> = OnceLock::new();
    let main = MAIN.get_or_init(|| format!("/proc/self/task/{}/children", std::process::id()));
    match std::fs::read(main) {
        Ok(list) => pids_in(&list),
        Err(_) => children(),
    }
}

/// The pids in a `children` list (decimal numbers separated by spaces).
fn pids_in(list: &[u8]) -> Vec<i32> {
    let mut pids = Vec::new();
    let mut pid: Option<i32> = None;
    for &b in list {
        match b {
            b'0'..=b'9' => {
                let digit = i32::from(b - b'0');
                pid = Some(pid.unwrap_or(0).saturating_mul(10).saturating_add(digit));
            }
            _ => pids.extend(pid.take()),
        }
    }
    pids.extend(pid);
    pids
}

#[cfg(test)]
mod tests {
    use super::pids_in;

    #[test]
    fn a_children_list_is_read_as_its_pids() {
        assert_eq!(pids_in(b"12 345 7 "), [12, 345, 7]);
        assert_eq!(pids_in(b"4194304"), [4_194_304]);
        assert!(pids_in(b"").is_empty());
        assert!(pids_in(b" \n").is_empty());
    }
}
