//! git's automatic maintenance runs in the foreground in a run's command.
//!
//! Since git 2.47, `git commit` (and fetch, merge, am, rebase) starts `git
//! maintenance run --auto --detach`: a daemon in its own session that
//! usually exits at once but can repack for minutes. In a run, such a
//! process is a leftover of the command, and the run stops it before it
//! releases its locks (docs/src/design/architecture.md, decision 11): every commit in a run
//! warned "left 1 process(es) running (git)" and a repack could be killed
//! half-way. So the command gets `maintenance.autoDetach=false` and
//! `gc.autoDetach=false` through git's `GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_n`
//! / `GIT_CONFIG_VALUE_n` variables, appended after any the caller set:
//! git then does its maintenance inside the command that triggered it, and
//! it is over, and done under the run's locks, when the command ends.

use std::ffi::OsString;

/// The configuration the command's git gets.
const FOREGROUND: [(&str, &str); 2] = [
    ("maintenance.autoDetach", "false"),
    ("gc.autoDetach", "false"),
];

/// The variables that add [`FOREGROUND`] to the configuration git sees in
/// an environment made of `env` (later entries win) over this process's
/// own (unless `clear_env`). None when the caller's `GIT_CONFIG_COUNT` is
/// not a number: git would refuse it anyway, and it is the caller's to fix.
pub(crate) fn foreground_maintenance(
    env: &[(OsString, OsString)],
    clear_env: bool,
) -> Vec<(OsString, OsString)> {
    let given = env
        .iter()
        .rev()
        .find(|(k, _)| k == "GIT_CONFIG_COUNT")
        .map(|(_, v)| v.clone())
        .or_else(|| {
            (!clear_env)
                .then(|| std::env::var_os("GIT_CONFIG_COUNT"))
                .flatten()
        });
    let first = match given {
        None => 0,
        Some(v) if v.is_empty() => 0,
        Some(v) => match v.to_str().and_then(|s| s.trim().parse::<usize>().ok()) {
            Some(n) => n,
            None => return Vec::new(),
        },
    };
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    for (i, (key, value)) in FOREGROUND.iter().enumerate() {
        out.push((
            format!("GIT_CONFIG_KEY_{}", first + i).into(),
            (*key).into(),
        ));
        out.push((
            format!("GIT_CONFIG_VALUE_{}", first + i).into(),
            (*value).into(),
        ));
    }
    out.push((
        "GIT_CONFIG_COUNT".into(),
        (first + FOREGROUND.len()).to_string().into(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a [(OsString, OsString)], key: &str) -> Option<&'a str> {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.to_str())
    }

    #[test]
    fn entries_are_appended_after_the_callers_own() {
        let caller: Vec<(OsString, OsString)> = vec![
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "user.name".into()),
            ("GIT_CONFIG_VALUE_0".into(), "Agent".into()),
        ];
        let added = foreground_maintenance(&caller, true);
        assert_eq!(get(&added, "GIT_CONFIG_COUNT"), Some("3"));
        assert_eq!(
            get(&added, "GIT_CONFIG_KEY_1"),
            Some("maintenance.autoDetach")
        );
        assert_eq!(get(&added, "GIT_CONFIG_VALUE_2"), Some("false"));
        assert_eq!(get(&added, "GIT_CONFIG_KEY_0"), None, "the caller's stay");
        let alone = foreground_maintenance(&[], true);
        assert_eq!(get(&alone, "GIT_CONFIG_COUNT"), Some("2"));
        assert_eq!(
            get(&alone, "GIT_CONFIG_KEY_0"),
            Some("maintenance.autoDetach")
        );
        assert_eq!(get(&alone, "GIT_CONFIG_KEY_1"), Some("gc.autoDetach"));
        let bad = [("GIT_CONFIG_COUNT".into(), "x".into())];
        assert!(foreground_maintenance(&bad, true).is_empty());
    }
}
