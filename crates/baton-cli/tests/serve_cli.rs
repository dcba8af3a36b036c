#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton job ...`, the CLI client of the job service, against a real
//! `baton serve` on 127.0.0.1; and groups shared by jobs and `baton run
//! --group` on the same baton dir (one group namespace per baton dir).

use crate::serve_common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::Server;

/// A service whose default template runs its prompt as a shell script.
fn server() -> Server {
    server_with("")
}

fn server_with(extra: &str) -> Server {
    Server::start(
        &format!(
            r#"
default_template = "sh"
{extra}
[templates.sh]
command = ["sh", "-c", "{{prompt}}"]
cwd = "{{tmp}}"
"#
        ),
        &[],
    )
}

/// `baton job --server <the server> ARGS`.
fn job(s: &Server, args: &[&str]) -> Command {
    let url = s.url("");
    let mut c = s.baton(&["job", "--server", &url]);
    c.args(args);
    c
}

fn run(mut c: Command) -> Output {
    c.stdin(Stdio::null()).output().expect("run baton")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that the command failed with `want` and one line on stderr, and
/// returns that line.
fn one_line_error(o: &Output, want: i32) -> String {
    assert_eq!(code(o), want, "stdout: {} stderr: {}", out(o), err(o));
    let e = err(o);
    assert_eq!(e.lines().count(), 1, "not one line: {e:?}");
    assert!(e.starts_with("baton: "), "{e:?}");
    e
}

fn submit_id(s: &Server, args: &[&str]) -> String {
    let o = run(job(s, &[&["submit"], args].concat()));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let id = out(&o).trim().to_string();
    assert!(
        !id.is_empty() && !id.contains(char::is_whitespace),
        "{id:?}"
    );
    id
}

fn json_of(o: &Output) -> Value {
    assert_eq!(code(o), 0, "{}", err(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", out(o)))
}

#[test]
fn submit_status_list_cancel_and_log_through_the_cli() {
    let s = server();
    let done = submit_id(&s, &["echo out; echo err >&2"]);
    let j = s.wait_final(&done);
    assert_eq!(j["status"], "succeeded", "{j}");

    let st = run(job(&s, &["status", &done]));
    assert_eq!(code(&st), 0, "{}", err(&st));
    assert!(
        out(&st).contains("status:        succeeded"),
        "{}",
        out(&st)
    );
    let st = json_of(&run(job(&s, &["status", &done, "--json"])));
    assert_eq!(st["id"], done.as_str());
    assert_eq!(st["output"], "out\n");

    let log = run(job(&s, &["log", &done]));
    assert_eq!(
        (code(&log), out(&log)),
        (0, "out\n".to_string()),
        "{}",
        err(&log)
    );
    let log = run(job(&s, &["log", &done, "--stderr"]));
    assert_eq!(out(&log), "err\n");

    let started = s.path("started");
    let running = submit_id(&s, &["--group", "g/1", "touch started; exec sleep 60"]);
    wait_exists(&started);
    let table = out(&run(job(&s, &["list"])));
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID "), "{table}");
    assert!(
        lines[1].starts_with(&running) && lines[1].contains("running"),
        "{table}"
    );
    assert!(
        lines[2].starts_with(&done) && lines[2].contains("succeeded"),
        "{table}"
    );
    let only = json_of(&run(job(&s, &["list", "--group", "g/1", "--json"])));
    let ids: Vec<&str> = only["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [running.as_str()]);
    let by_status = json_of(&run(job(&s, &["list", "--status", "succeeded", "--json"])));
    assert_eq!(by_status["jobs"][0]["id"], done.as_str());
    assert_eq!(by_status["jobs"].as_array().unwrap().len(), 1);

    let c = run(job(&s, &["cancel", &running]));
    assert_eq!(code(&c), 0, "{}", err(&c));
    assert_eq!(out(&c), format!("job {running}: cancelled\n"));
    assert_eq!(s.job(&running)["status"], "cancelled");
    // Cancelling again: it has ended; the server's 409 in one line.
    let again = one_line_error(&run(job(&s, &["cancel", &running])), 125);
    assert!(again.contains("already ended (cancelled)"), "{again}");
    let unknown = one_line_error(&run(job(&s, &["status", "0123456789abcdef"])), 125);
    assert!(unknown.contains("no job '0123456789abcdef'"), "{unknown}");
}

#[test]
fn the_prompt_comes_from_the_argument_a_file_or_stdin() {
    let s = server();
    let file = s.path("prompt.txt");
    std::fs::write(&file, "echo from-file").unwrap();
    let id = submit_id(&s, &["--prompt-file", file.to_str().unwrap()]);
    assert_eq!(s.wait_final(&id)["output"], "from-file\n");

    let mut c = job(&s, &["submit", "--wait", "-"]);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"echo from-stdin").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
    let id = out(&o).trim().to_string();
    assert_eq!(s.job(&id)["output"], "from-stdin\n");

    let missing = one_line_error(
        &run(job(&s, &["submit", "--prompt-file", "/nonexistent/p"])),
        125,
    );
    assert!(
        missing.contains("cannot read the prompt '/nonexistent/p'"),
        "{missing}"
    );
}

#[test]
fn submit_wait_exits_with_the_jobs_code() {
    let s = server();
    let ok = run(job(&s, &["submit", "--wait", "true"]));
    assert_eq!(code(&ok), 0, "{}", err(&ok));
    assert_eq!(out(&ok).lines().count(), 1, "the id only: {}", out(&ok));

    let failed = run(job(&s, &["submit", "--wait", "exit 3"]));
    assert_eq!(code(&failed), 3, "{}", err(&failed));
    assert!(
        err(&failed).contains("failed: exited with 3"),
        "{}",
        err(&failed)
    );

    let timed_out = run(job(
        &s,
        &["submit", "--wait", "--timeout", "200ms", "exec sleep 60"],
    ));
    assert_eq!(code(&timed_out), 124, "{}", err(&timed_out));
    assert!(err(&timed_out).contains("timed_out"), "{}", err(&timed_out));

    let j = json_of(&run(job(&s, &["submit", "--wait", "--json", "echo hi"])));
    assert_eq!(
        (j["status"].as_str(), j["output"].as_str()),
        (Some("succeeded"), Some("hi\n"))
    );

    // Cancelled while it waits: 79.
    let (mut waiter, id) = spawn_submit(
        &s,
        &["submit", "--wait", "touch cancel.started; exec sleep 60"],
    );
    wait_exists(&s.path("cancel.started"));
    let c = run(job(&s, &["cancel", &id]));
    assert_eq!(code(&c), 0, "{}", err(&c));
    let status = waiter.wait().unwrap();
    assert_eq!(status.code(), Some(79));
    let mut e = String::new();
    waiter
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut e)
        .unwrap();
    assert!(e.contains(&format!("job {id} cancelled")), "{e}");
}

#[test]
fn log_follow_shows_output_while_the_job_runs_and_ends_when_it_ends() {
    let s = server();
    let id = submit_id(
        &s,
        &["echo first; while [ ! -e go ]; do sleep 0.02; done; echo second"],
    );
    let mut follower = job(&s, &["log", &id, "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert_eq!(first, "first\n");
    // The job waits for `go`: it still runs, and so does the follower.
    assert_eq!(s.job(&id)["status"], "running");
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower ended before the job"
    );
    std::fs::write(s.path("go"), "").unwrap();
    let mut rest = String::new();
    lines.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(follower.wait().unwrap().success());
    assert_eq!(s.job(&id)["status"], "succeeded");

    // submit --follow: the same, with the job's exit code.
    let o = run(job(&s, &["submit", "--follow", "echo a; echo b; exit 4"]));
    assert_eq!(
        (code(&o), out(&o)),
        (4, "a\nb\n".to_string()),
        "{}",
        err(&o)
    );
}

/// Regression: a follower of a running job that printed something and then
/// went quiet woke up at once, again and again (a cloned watch receiver
/// never marks a value as seen), so the service spun a core per follower
/// and starved its own other tasks.
#[test]
fn following_a_quiet_job_does_not_spin_the_service() {
    let s = server();
    let id = submit_id(&s, &["echo first; while [ ! -e go ]; do sleep 0.05; done"]);
    let mut follower = job(&s, &["log", &id, "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert_eq!(first, "first\n");
    let cpu = |pid: i32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    let before = cpu(s.pid());
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu(s.pid()) - before;
    std::fs::write(s.path("go"), "").unwrap();
    // (Spinning also starved the service's other tasks: the job's end was
    // never stored and the follower never ended.)
    assert_eq!(wait_exit(&mut follower), 0);
    // Spinning used more than a third of a core (100+ ticks in 3 s); idle
    // waiting, a few ticks. 50 ticks is half a second of CPU.
    assert!(
        used < 50,
        "the service used {used} clock ticks of CPU in 3 s of following a quiet job"
    );
}

#[test]
fn an_unreachable_server_is_one_line_and_exit_125() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = server();
    let url = format!("http://127.0.0.1:{port}");
    let o = run(s.baton(&["job", "--server", &url, "list"]));
    let e = one_line_error(&o, 125);
    assert!(
        e.contains(&format!("cannot reach the job service at {url}")),
        "{e}"
    );
    // From BATON_SERVER, for every command.
    for args in [
        &["status", "x"][..],
        &["submit", "--wait", "true"],
        &["log", "x", "--follow"],
    ] {
        let mut c = s.baton(&["job"]);
        c.args(args).env("BATON_SERVER", &url);
        let e = one_line_error(&run(c), 125);
        assert!(e.contains("cannot reach the job service"), "{args:?}: {e}");
    }
    let bad = one_line_error(
        &run(s.baton(&["job", "--server", "https://x", "list"])),
        125,
    );
    assert!(bad.contains("invalid server URL 'https://x'"), "{bad}");
}

#[test]
fn a_missing_or_wrong_token_is_a_clear_error() {
    let s = server_with(r#"token = "s3cret-token""#);
    let none = one_line_error(&run(job(&s, &["list"])), 125);
    assert!(none.contains("set BATON_TOKEN or --token-file"), "{none}");
    let mut wrong = job(&s, &["list"]);
    wrong.env("BATON_TOKEN", "nope");
    let wrong = one_line_error(&run(wrong), 125);
    assert!(wrong.contains("is not the service's"), "{wrong}");
    assert!(
        !wrong.contains("nope"),
        "the token is never printed: {wrong}"
    );

    let mut right = job(&s, &["submit", "--wait", "echo ok"]);
    right.env("BATON_TOKEN", "s3cret-token");
    let o = run(right);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let file = s.path("token");
    std::fs::write(&file, "s3cret-token\n").unwrap();
    let o = run(job(&s, &["--token-file", file.to_str().unwrap(), "list"]));
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(out(&o).contains("succeeded"), "{}", out(&o));
}

#[test]
fn a_full_service_is_exit_75_and_says_when_to_retry() {
    let s = server_with("max_concurrency = 1\nmax_queue_depth = 1");
    let id = submit_id(
        &s,
        &["touch started; while [ ! -e go ]; do sleep 0.02; done"],
    );
    wait_exists(&s.path("started"));
    let e = one_line_error(&run(job(&s, &["submit", "true"])), 75);
    assert!(
        e.contains("the queue is full") && e.contains("retry in 1 s"),
        "{e}"
    );
    let bad = one_line_error(
        &run(job(&s, &["submit", "--template", "nope", "true"])),
        125,
    );
    assert!(bad.contains("no template 'nope'"), "{bad}");
    std::fs::write(s.path("go"), "").unwrap();
    assert_eq!(s.wait_final(&id)["status"], "succeeded");
}

/// Waits (at most 60 s) for a file to exist (markers are empty files).
fn wait_exists(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `baton job ARGS` (a `submit --wait`) and reads the job id it
/// prints first; the process goes on waiting.
fn spawn_submit(s: &Server, args: &[&str]) -> (std::process::Child, String) {
    let mut child = job(s, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut id)
        .unwrap();
    (child, id.trim().to_string())
}

/// Waits (at most 60 s) for a spawned process to exit.
fn wait_exit(child: &mut std::process::Child) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().expect("exited");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "process did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_job_supersedes_a_cli_run_of_its_group_on_the_same_baton_dir() {
    let s = server();
    // The "cron script": a CLI run in group issue/42 on the service's baton dir.
    let mut cron = s
        .baton(&[
            "run",
            "--group",
            "issue/42",
            "--mode",
            "supersede",
            "--grace",
            "5s",
            "--",
            "sh",
            "-c",
            "touch cron.started; exec sleep 60",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_exists(&s.path("cron.started"));
    let id = s.submit(json!({"group": "issue/42", "mode": "supersede", "prompt": "echo job ran"}));
    assert_eq!(wait_exit(&mut cron), 79, "the CLI run is superseded");
    let j = s.wait_final(&id);
    assert_eq!(
        (j["status"].as_str(), j["output"].as_str()),
        (Some("succeeded"), Some("job ran\n")),
        "{j}"
    );
}

#[test]
fn a_cli_run_supersedes_a_running_job_of_its_group() {
    let s = server();
    let id = s.submit(json!({
        "group": "issue/42", "mode": "supersede",
        "prompt": "touch job.started; exec sleep 60"
    }));
    wait_exists(&s.path("job.started"));
    let o = run(s.baton(&[
        "run",
        "--group",
        "issue/42",
        "--mode",
        "supersede",
        "--",
        "sh",
        "-c",
        "echo $BATON_RUN_ID > cli.run_id",
    ]));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let run_id = std::fs::read_to_string(s.path("cli.run_id")).unwrap();
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "superseded", "{j}");
    assert_eq!(j["superseded_by"], run_id.trim(), "{j}");
    // And the CLI client reports it as 79.
    let st = json_of(&run(job(&s, &["status", &id, "--json"])));
    assert_eq!(st["status"], "superseded");
}

#[test]
fn a_queue_mode_job_waits_for_a_cli_run_of_its_group() {
    let s = server();
    let mut cli = s
        .baton(&[
            "run",
            "--group",
            "issue/42",
            "--",
            "sh",
            "-c",
            "touch cli.started; while [ ! -e cli.go ]; do sleep 0.02; done; touch cli.done",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_exists(&s.path("cli.started"));
    let (mut waiter, id) = spawn_submit(
        &s,
        &[
            "submit",
            "--wait",
            "--group",
            "issue/42",
            "if [ -e cli.done ]; then echo after; else echo before; fi",
        ],
    );
    // It holds a service slot but waits for the group.
    s.wait_job(&id, Duration::from_secs(30), |v| v["status"] == "running");
    assert!(!Path::new(&s.path("cli.done")).exists());
    std::fs::write(s.path("cli.go"), "").unwrap();
    assert_eq!(wait_exit(&mut cli), 0);
    assert_eq!(wait_exit(&mut waiter), 0);
    assert_eq!(
        s.job(&id)["output"],
        "after\n",
        "the job's command started before the CLI run ended"
    );
}

/// A supervisor that closed its end of the service's stdout before the
/// service said where it listens (`baton serve | true`): the service runs
/// all the same, and a clean stop (SIGTERM, drained) still exits 0, not
/// 125 for a line nobody could read.
#[test]
fn a_stdout_closed_by_its_reader_does_not_fail_a_clean_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("serve.toml");
    std::fs::write(&config, serve_common::sh_config("")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--dir")
        .arg(tmp.path().join("baton"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let answered = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut c| {
            use std::io::Write;
            write!(
                c,
                "GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            )?;
            let mut answer = String::new();
            c.read_to_string(&mut answer)?;
            Ok(answer)
        });
        match answered {
            Ok(a) if a.starts_with("HTTP/1.1 200") => break,
            _ if start.elapsed() > Duration::from_secs(60) => {
                let _ = child.kill();
                panic!("baton serve never answered /health: {answered:?}");
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
