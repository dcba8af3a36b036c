//! `baton-bench-worker`: the per-process side of baton's benchmark.
//!
//! `bench/run.py` starts P copies of one subcommand at once and reads what
//! they write. Subcommands:
//!
//! * `lib`: the contention loop on baton's library. M times: acquire, read
//!   the counter file, +1, write it back, hold H, release.
//! * `crit`: the critical section of the CLI variants, run *under* a lock
//!   tool (`baton run` or `flock(1)`): prints its CLOCK_MONOTONIC start in
//!   nanoseconds to stdout, then reads/increments/writes the counter and
//!   holds H.
//! * `cli`: the per-process driver of a CLI variant: M times, launches the
//!   tool with `crit` as its command and records the wait as
//!   (`crit`'s start stamp) - (CLOCK_MONOTONIC just before the launch). The
//!   wait of a CLI variant therefore includes the tool's own start-up, its
//!   locking, and the exec of `crit`: everything a script pays before its
//!   critical section runs. `--tool cmd` launches any lock tool: the words
//!   after `--` (say `etcdctl --endpoints=URL lock NAME --`), then `crit`.
//! * `overhead`: times N sequential runs of a command (uncontended
//!   per-invocation cost).
//! * `grab`: the handoff probe: acquire, print `held NS`, then wait for a
//!   line on stdin; on `release` print `releasing NS` and release. The
//!   runner SIGKILLs one holder, or releases it, while a second `grab`
//!   waits, and subtracts the stamps.
//!
//! `lib` and `cli` write one line per iteration to `--out`: the wait in
//! nanoseconds, and for `lib` also the CLOCK_MONOTONIC instants at which the
//! lock was held and at which its release began (`WAIT HELD RELEASING`), then
//! one line `elapsed ELAPSED_NS START_NS END_NS` (CLOCK_MONOTONIC: the same
//! clock in every process, so the runner can compare them). With `--gate`, a process first reads its stdin to EOF,
//! so the runner can release all P processes at the same instant by closing
//! one shared pipe.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use baton_lock::{acquire, BatonDir, LockName, LockRequest};
use rustix::time::{clock_gettime, ClockId};

const USAGE: &str = "\
usage:
  baton-bench-worker lib --dir D --lock NAME --counter FILE --iterations M --hold-us H --out FILE [--gate]
  baton-bench-worker crit --counter FILE --hold-us H
  baton-bench-worker cli --tool baton|flock|cmd [--baton PATH] [--dir D] [--lock NAME] [--lockfile F]
                         --counter FILE --iterations M --hold-us H --out FILE [--gate]
                         [-- TOOL ARGS...  (--tool cmd: crit's argv is appended)]
  baton-bench-worker grab --dir D --lock NAME
  baton-bench-worker overhead --n N [--warmup W] [--out FILE] -- CMD [ARGS...]";

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((sub, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match sub.as_str() {
        "lib" => Opts::parse(rest).and_then(|o| cmd_lib(&o)),
        "crit" => Opts::parse(rest).and_then(|o| cmd_crit(&o)),
        "cli" => Opts::parse(rest).and_then(|o| cmd_cli(&o)),
        "overhead" => Opts::parse(rest).and_then(|o| cmd_overhead(&o)),
        "grab" => Opts::parse(rest).and_then(|o| cmd_grab(&o)),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => Err(format!("unknown subcommand {other:?}\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("baton-bench-worker {sub}: {msg}");
            ExitCode::from(1)
        }
    }
}

/// Hand-parsed `--key value` options, `--flag`s and a trailing `-- CMD...`.
struct Opts {
    values: HashMap<String, String>,
    flags: Vec<String>,
    command: Vec<String>,
}

const FLAGS: &[&str] = &["--gate"];

impl Opts {
    fn parse(args: &[String]) -> Res<Opts> {
        let mut opts = Opts {
            values: HashMap::new(),
            flags: Vec::new(),
            command: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--" {
                opts.command = it.cloned().collect();
                break;
            }
            if FLAGS.contains(&a.as_str()) {
                opts.flags.push(a.clone());
            } else if let Some(key) = a.strip_prefix("--") {
                let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
                opts.values.insert(key.to_string(), v.clone());
            } else {
                return Err(format!("unexpected argument {a:?}\n{USAGE}"));
            }
        }
        Ok(opts)
    }

    fn str(&self, key: &str) -> Res<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("missing --{key}"))
    }

    fn str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.values.get(key).map_or(default, String::as_str)
    }

    fn path(&self, key: &str) -> Res<PathBuf> {
        self.str(key).map(PathBuf::from)
    }

    fn u64(&self, key: &str) -> Res<u64> {
        let s = self.str(key)?;
        s.parse()
            .map_err(|_| format!("--{key}: not a non-negative integer: {s:?}"))
    }

    fn u64_or(&self, key: &str, default: u64) -> Res<u64> {
        if self.values.contains_key(key) {
            self.u64(key)
        } else {
            Ok(default)
        }
    }

    fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process, and the
/// one `Instant` uses on Linux (which cannot be converted to a number).
fn mono_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    // Monotonic time is never negative.
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// With `--gate`, blocks until stdin reaches EOF (the runner closes the
/// shared pipe once every process is started).
fn wait_gate(opts: &Opts) -> Res<()> {
    if opts.flag("--gate") {
        let mut sink = Vec::new();
        io::stdin()
            .read_to_end(&mut sink)
            .map_err(|e| format!("reading the start gate (stdin): {e}"))?;
    }
    Ok(())
}

/// Read the counter (missing = 0), add one, write it back. The value is
/// written in place at offset 0, zero-padded to a fixed width, without
/// truncating and without fsync: truncating a file to zero makes ext4 flush
/// it on close (`auto_da_alloc`), which would add a large, noisy, disk-bound
/// cost to every critical section. The point here is exclusion, not
/// durability.
fn bump_counter(path: &Path) -> Res<u64> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let text = text.trim();
    let n = if text.is_empty() {
        0
    } else {
        text.parse::<u64>().map_err(|_| {
            format!(
                "counter {} holds {text:?}: torn write, exclusion broken?",
                path.display()
            )
        })?
    };
    let line = format!("{:0width$}\n", n + 1, width = COUNTER_WIDTH);
    file.write_all_at(line.as_bytes(), 0)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(n + 1)
}

/// Digits of the counter file (u64 max has 20).
const COUNTER_WIDTH: usize = 20;

fn hold(hold_us: u64) {
    if hold_us > 0 {
        thread::sleep(Duration::from_micros(hold_us));
    }
}

/// One iteration's record: the wait, and (library and C variants only) the
/// CLOCK_MONOTONIC instants at which the lock was held and at which its
/// release began, from which the runner computes handoff times.
struct Cycle {
    wait_ns: u64,
    held_at: Option<(u64, u64)>,
}

/// Writes one line per iteration (`WAIT_NS [ACQUIRED_NS RELEASING_NS]`) and
/// the `elapsed` line.
fn write_out(path: &Path, cycles: &[Cycle], start_ns: u64, end_ns: u64) -> Res<()> {
    let mut s = String::with_capacity(cycles.len() * 40 + 64);
    for c in cycles {
        match c.held_at {
            Some((acq, rel)) => s.push_str(&format!("{} {acq} {rel}\n", c.wait_ns)),
            None => s.push_str(&format!("{}\n", c.wait_ns)),
        }
    }
    s.push_str(&format!(
        "elapsed {} {start_ns} {end_ns}\n",
        end_ns.saturating_sub(start_ns)
    ));
    fs::write(path, s).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The `--dir` baton dir and the `--lock` name (as given, and parsed).
fn open_lock(o: &Opts) -> Res<(BatonDir, &str, LockName)> {
    let dir_path = o.path("dir")?;
    let dir = BatonDir::open(&dir_path)
        .map_err(|e| format!("opening baton dir {}: {e}", dir_path.display()))?;
    let lock = o.str("lock")?;
    let name: LockName = lock
        .parse()
        .map_err(|e| format!("bad lock name {lock:?}: {e}"))?;
    Ok((dir, lock, name))
}

fn cmd_lib(o: &Opts) -> Res<()> {
    let (dir, lock, name) = open_lock(o)?;
    let req = LockRequest::new(name);
    let counter = o.path("counter")?;
    let iterations = o.u64("iterations")?;
    let hold_us = o.u64("hold-us")?;
    let out = o.path("out")?;
    wait_gate(o)?;

    let mut cycles = Vec::with_capacity(iterations as usize);
    let start_ns = mono_ns();
    for _ in 0..iterations {
        let t0 = mono_ns();
        let guard = acquire(&dir, &req).map_err(|e| format!("acquire {lock}: {e}"))?;
        let t1 = mono_ns();
        bump_counter(&counter)?;
        hold(hold_us);
        let t2 = mono_ns();
        guard
            .release()
            .map_err(|e| format!("release {lock}: {e}"))?;
        cycles.push(Cycle {
            wait_ns: t1 - t0,
            held_at: Some((t1, t2)),
        });
    }
    let end_ns = mono_ns();
    write_out(&out, &cycles, start_ns, end_ns)
}

fn cmd_grab(o: &Opts) -> Res<()> {
    let (dir, lock, name) = open_lock(o)?;
    let guard =
        acquire(&dir, &LockRequest::new(name)).map_err(|e| format!("acquire {lock}: {e}"))?;
    let held = mono_ns();
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "held {held}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing to stdout: {e}"))?;
    let mut line = String::new();
    let _ = io::stdin().read_line(&mut line);
    if line.trim() == "release" {
        writeln!(stdout, "releasing {}", mono_ns())
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("writing to stdout: {e}"))?;
    }
    guard.release().map_err(|e| format!("release {lock}: {e}"))
}

fn cmd_crit(o: &Opts) -> Res<()> {
    let started = mono_ns();
    let counter = o.path("counter")?;
    let hold_us = o.u64("hold-us")?;
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "{started}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing the start stamp to stdout: {e}"))?;
    bump_counter(&counter)?;
    hold(hold_us);
    Ok(())
}

fn cmd_cli(o: &Opts) -> Res<()> {
    let tool = o.str("tool")?;
    let counter = o.path("counter")?;
    let iterations = o.u64("iterations")?;
    let hold_us = o.u64("hold-us")?;
    let out = o.path("out")?;
    let me = std::env::current_exe().map_err(|e| format!("locating this executable: {e}"))?;
    let hold_arg = hold_us.to_string();
    let crit: Vec<&std::ffi::OsStr> = vec![
        me.as_os_str(),
        "crit".as_ref(),
        "--counter".as_ref(),
        counter.as_os_str(),
        "--hold-us".as_ref(),
        hold_arg.as_ref(),
    ];
    let mut cmd = match tool {
        "baton" => {
            let mut c = Command::new(o.str_or("baton", "baton"));
            c.arg("--dir").arg(o.str("dir")?).args([
                "run",
                "--lock",
                o.str_or("lock", "bench"),
                "--",
            ]);
            c
        }
        "flock" => {
            let mut c = Command::new("flock");
            c.arg(o.str("lockfile")?);
            c
        }
        "cmd" => {
            let (prog, args) = o
                .command
                .split_first()
                .ok_or_else(|| format!("--tool cmd needs -- TOOL [ARGS...]\n{USAGE}"))?;
            let mut c = Command::new(prog);
            c.args(args);
            c
        }
        other => return Err(format!("--tool must be baton, flock or cmd, not {other:?}")),
    };
    cmd.args(&crit)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    wait_gate(o)?;

    let mut cycles = Vec::with_capacity(iterations as usize);
    let start_ns = mono_ns();
    for i in 0..iterations {
        let launched = mono_ns();
        let child = cmd.spawn().map_err(|e| format!("launching {tool}: {e}"))?;
        let output = child
            .wait_with_output()
            .map_err(|e| format!("waiting for {tool}: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "iteration {i}: {tool} exited with {}",
                output.status
            ));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let stamp: u64 = text.trim().parse().map_err(|_| {
            format!("iteration {i}: expected crit's start stamp on stdout, got {text:?}")
        })?;
        cycles.push(Cycle {
            wait_ns: stamp.saturating_sub(launched),
            held_at: None,
        });
    }
    let end_ns = mono_ns();
    write_out(&out, &cycles, start_ns, end_ns)
}

fn cmd_overhead(o: &Opts) -> Res<()> {
    let n = o.u64("n")?;
    let warmup = o.u64_or("warmup", 5)?;
    let (prog, args) = o
        .command
        .split_first()
        .ok_or_else(|| format!("overhead needs -- CMD [ARGS...]\n{USAGE}"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..warmup + n {
        let t0 = Instant::now();
        let status = cmd.status().map_err(|e| format!("running {prog}: {e}"))?;
        let dt = t0.elapsed().as_nanos() as u64;
        if !status.success() {
            return Err(format!("run {i}: {prog} exited with {status}"));
        }
        if i >= warmup {
            times.push(dt);
        }
    }
    if let Ok(out) = o.path("out") {
        let mut s = String::new();
        for t in &times {
            s.push_str(&t.to_string());
            s.push('\n');
        }
        fs::write(&out, s).map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    let mut sorted = times.clone();
    sorted.sort_unstable();
    let mean = if sorted.is_empty() {
        0
    } else {
        sorted.iter().sum::<u64>() / sorted.len() as u64
    };
    println!(
        "n={} mean_ns={mean} p50_ns={} p99_ns={}",
        sorted.len(),
        percentile(&sorted, 50.0),
        percentile(&sorted, 99.0)
    );
    Ok(())
}

/// Nearest-rank percentile of sorted data (0 when empty).
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
