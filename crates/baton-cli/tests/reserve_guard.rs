//! `baton git guard`: the pre-commit hook of path reservations, in a real
//! repository with a linked worktree, real commits and a hook already there.
#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::{code, git, stderr, wait_for_file, Env};

/// `git ARGS` in `dir`, whatever its outcome (a commit the hook refuses).
fn git_out(env: &Env, dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn edit_and_stage(env: &Env, dir: &Path, file: &str, text: &str) {
    std::fs::write(dir.join(file), text).unwrap();
    let out = git_out(env, dir, &["add", file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn the_guard_refuses_commits_on_paths_others_reserved_and_passes_the_rest() {
    let env = Env::new();
    let (a, wt) = (env.path("a"), env.path("a-wt"));
    std::fs::create_dir_all(a.join("src")).unwrap();
    std::fs::create_dir_all(a.join("docs")).unwrap();
    std::fs::write(a.join("src/lib.rs"), "// lib\n").unwrap();
    std::fs::write(a.join("docs/a.md"), "# a\n").unwrap();
    git(&a, &["init", "-q", "-b", "main"]);
    git(&a, &["add", "."]);
    git(&a, &["commit", "-q", "-m", "seed"]);
    git(&a, &["worktree", "add", "-q", "../a-wt", "-b", "wt"]);
    // A hook already there: it records each run, and fails when asked to.
    let (ran, fail_flag) = (env.path("hook-ran"), env.path("hook-fails"));
    let hooks = a.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let original = format!(
        "#!/bin/sh\necho ran >> '{}'\n[ ! -e '{}' ]\n",
        ran.display(),
        fail_flag.display()
    );
    std::fs::write(hooks.join("pre-commit"), &original).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            hooks.join("pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    for _ in 0..2 {
        let out = env.run(&["git", "guard", "install", "--repo", wt.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    // Installed once, in the common hooks dir, the old hook kept once.
    let hook = std::fs::read_to_string(hooks.join("pre-commit")).unwrap();
    assert!(hook.contains("baton git guard"), "{hook}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit.baton-chained")).unwrap(),
        original
    );
    assert_eq!(
        std::fs::read_dir(&hooks)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("baton"))
            .count(),
        1
    );

    // Another holder reserves src; its own command commits under it when told to.
    let (started, go, committed) = (env.path("started"), env.path("go"), env.path("committed"));
    let script = format!(
        "touch '{started}'; while [ ! -e '{go}' ]; do sleep 0.01; done; \
         echo '// mine' >> src/lib.rs && git add src/lib.rs && \
         git -c user.email=t@t -c user.name=t commit -q -m 'holder commit'; echo $? > '{committed}'",
        started = started.display(),
        go = go.display(),
        committed = committed.display()
    );
    let mut holder = env
        .baton(&[
            "reserve", "src", "--agent", "alice", "--reason", "rewrite", "--", "sh", "-c", &script,
        ])
        .current_dir(&a)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started);

    // 1. A commit in the other worktree touching src/lib.rs is refused, naming both.
    edit_and_stage(&env, &wt, "src/lib.rs", "// theirs\n");
    let out = git_out(&env, &wt, &["commit", "-q", "-m", "theirs"]);
    assert_ne!(code(&out), 0, "the commit went through");
    let msg = stderr(&out);
    assert!(
        msg.contains("'src/lib.rs'") && msg.contains("alice") && msg.contains("rewrite"),
        "{msg}"
    );
    assert!(msg.contains(&format!("pid {}", holder.id())), "{msg}");
    let out = git_out(&env, &wt, &["reset", "-q"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = git_out(&env, &wt, &["checkout", "--", "src/lib.rs"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // 2. A commit touching nothing reserved passes, and the old hook ran first.
    let before = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .count();
    edit_and_stage(&env, &wt, "docs/a.md", "# b\n");
    let out = git_out(&env, &wt, &["commit", "-q", "-m", "docs"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap().lines().count(),
        before + 1
    );

    // 3. The old hook's failure still fails a commit.
    std::fs::write(&fail_flag, "").unwrap();
    edit_and_stage(&env, &wt, "docs/a.md", "# c\n");
    let out = git_out(&env, &wt, &["commit", "-q", "-m", "docs again"]);
    assert_ne!(
        code(&out),
        0,
        "a failing chained hook let the commit through"
    );
    std::fs::remove_file(&fail_flag).unwrap();

    // 4. The holder's own commit, under its reservation, passes.
    std::fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(&committed).unwrap().trim(), "0");

    // Free again: the other worktree may commit src now.
    edit_and_stage(&env, &wt, "src/lib.rs", "// theirs\n");
    let out = git_out(&env, &wt, &["commit", "-q", "-m", "theirs"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Uninstalling puts the old hook back.
    let out = env.run(&["git", "guard", "uninstall", "--repo", a.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit")).unwrap(),
        original
    );
    assert!(!hooks.join("pre-commit.baton-chained").exists());
}

#[test]
fn the_guard_follows_core_hooks_path_and_installs_without_an_old_hook() {
    let env = Env::new();
    let a = env.path("a");
    std::fs::create_dir_all(&a).unwrap();
    git(&a, &["init", "-q"]);
    git(&a, &["config", "core.hooksPath", "my-hooks"]);
    let out = env.run(&["git", "guard", "install", "--repo", a.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(a.join("my-hooks/pre-commit").exists());
    assert!(!a.join(".git/hooks/pre-commit").exists());
    let out = env.run(&["git", "guard", "uninstall", "--repo", a.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!a.join("my-hooks/pre-commit").exists());
}
