#!/usr/bin/env python3
"""Git workspaces and pushes: baton against plain git.

    python3 bench/git_bench.py [--files 3000] [--trials 7] [--agents 10] [--rounds 3]
                               [--skip-build] [--baton PATH] [--skip-creation]

Creation: on a generated repository of --files files (a few directories deep,
~1 KiB each, one commit), the median time over --trials of
  baton workspace create --strategy clone      (clone --local --no-checkout under the repo lock, checkout)
  baton workspace create --strategy worktree   (worktree add --no-checkout under the repo lock, checkout)
  git worktree add --detach                    (plain git, no lock, no registry)
  git clone (full, --no-local)                 (what a naive per-agent checkout costs)
Each created workspace is removed outside the timed part.

Pushes: --agents agents each have their own clone with one new commit of their
own file, and all start pushing to one bare remote at one instant:
  baton git push                               (run in each clone with its own default baton dir,
                                                <clone>/.git/baton, as agents do: the push queue must
                                                still be one per remote branch)
  baton git push, one shared BATON_DIR         (the same with every pusher in one baton dir)
  naive loop                                   (for 3 attempts: git push || git pull --rebase)
  baton git push, separate machines            (the remote served by `git daemon` over git://, each
                                                pusher its own baton dir and per-user temp dir: on
                                                separate machines nothing local is shared)
  baton git push, separate machines, BATON_BACKEND  (the same, with the push queue on PostgreSQL:
                                                --backend URL, or a database made on 127.0.0.1 and
                                                dropped after; rows skipped without psql)
reported as commits landed on the remote, push attempts (max over agents) and
wall time, median of --rounds.

--baton PATH measures a prebuilt binary (e.g. one of another commit, for a
before/after comparison) instead of building this checkout's.

git never sees the user's configuration (temp HOME, GIT_CONFIG_GLOBAL,
GIT_CONFIG_NOSYSTEM). Standard library only; markdown table on stdout,
progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from run import bin_dir  # bench/run.py: where cargo puts the binaries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def git_env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and not k.startswith("BATON_")}
    env.update(
        HOME=home,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.path.join(home, "gitconfig"),
        GIT_AUTHOR_NAME="Agent",
        GIT_AUTHOR_EMAIL="agent@example.com",
        GIT_COMMITTER_NAME="Agent",
        GIT_COMMITTER_EMAIL="agent@example.com",
    )
    return env


class Bench:
    def __init__(self, tmp: str, baton: str):
        self.tmp = tmp
        self.baton = baton
        self.env = git_env(tmp)
        with open(os.path.join(tmp, "gitconfig"), "w") as f:
            f.write("[init]\n\tdefaultBranch = main\n")
        self.dir = os.path.join(tmp, "baton")

    def run(self, args: list[str], cwd: str | None = None) -> str:
        p = subprocess.run(args, cwd=cwd or self.tmp, env=self.env, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout.strip()

    def git(self, *args: str, cwd: str | None = None) -> str:
        return self.run(["git", *args], cwd)

    def b(self, *args: str, cwd: str | None = None) -> str:
        return self.run([self.baton, "--dir", self.dir, *args], cwd)

    def make_repo(self, files: int) -> tuple[str, str]:
        remote = os.path.join(self.tmp, "remote.git")
        base = os.path.join(self.tmp, "base")
        self.git("init", "-q", "--bare", remote)
        self.git("init", "-q", base)
        for i in range(files):
            d = os.path.join(base, f"pkg{i % 20}", f"mod{i % 7}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"file{i}.txt"), "w") as f:
                f.write((f"line {i} " * 16 + "\n") * 8)
        self.git("add", ".", cwd=base)
        self.git("commit", "-qm", "generated", cwd=base)
        self.git("remote", "add", "origin", remote, cwd=base)
        self.git("push", "-q", "origin", "main", cwd=base)
        return remote, base


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def creation(bench: Bench, base: str, trials: int) -> list[tuple[str, float]]:
    results: dict[str, list[float]] = {}
    scratch = os.path.join(bench.tmp, "scratch")
    os.makedirs(scratch, exist_ok=True)
    for t in range(trials):
        log(f"creation trial {t + 1}/{trials}")
        for strategy in ("clone", "worktree"):
            out: list[str] = []
            results.setdefault(f"baton workspace create --strategy {strategy}", []).append(
                timed(lambda: out.append(bench.b("workspace", "create", "--repo", base, "--strategy", strategy, "--id", f"w{t}")))
            )
            bench.b("workspace", "remove", f"w{t}")
        path = os.path.join(scratch, f"wt{t}")
        results.setdefault("git worktree add --detach (plain)", []).append(
            timed(lambda: bench.git("worktree", "add", "-q", "--detach", path, "HEAD", cwd=base))
        )
        bench.git("worktree", "remove", "--force", path, cwd=base)
        path = os.path.join(scratch, f"cl{t}")
        results.setdefault("git clone --no-local (full clone)", []).append(
            timed(lambda: bench.git("clone", "-q", "--no-local", base, path))
        )
        shutil.rmtree(path)
    return [(k, statistics.median(v)) for k, v in results.items()]


def push_round(bench: Bench, remote: str, base: str, agents: int, tool: str, rnd: int) -> tuple[int, float, int]:
    # Fresh remote branch state: reset remote main to the base commit.
    start_commit = bench.git("rev-parse", "main", cwd=base)
    bench.git("update-ref", "refs/heads/main", start_commit, cwd=remote)
    dirs = []
    for i in range(agents):
        d = os.path.join(bench.tmp, f"push-{tool}-{rnd}-{i}")
        bench.git("clone", "-q", "--local", remote, d)
        with open(os.path.join(d, f"agent_{i}.txt"), "w") as f:
            f.write(f"{i}\n")
        bench.git("add", ".", cwd=d)
        bench.git("commit", "-qm", f"agent {i}", cwd=d)
        dirs.append(d)
    shared = os.path.join(bench.tmp, f"shared-{rnd}")
    if tool.startswith("machines"):
        # Separate machines: the network remote, a baton dir and a per-user
        # temp dir (the machine-wide queue's place) each.
        for d in dirs:
            bench.git("remote", "set-url", "origin", bench.daemon_url, cwd=d)
        backend = f'BATON_BACKEND="{bench.backend}" ' if tool == "machines-backend" else ""
        cmd = (f'mkdir -p ../{{name}}.tmp && {backend}TMPDIR="$PWD/../{{name}}.tmp" BATON_DIR="$PWD/../{{name}}.baton" '
               f'exec "{bench.baton}" git push --branch main --json > ../{{name}}.json')
    elif tool == "baton":
        # No --dir, no BATON_DIR: each clone's default baton dir.
        cmd = f'exec "{bench.baton}" git push --branch main --json > ../{{name}}.json'
    elif tool == "baton-shared":
        cmd = f'BATON_DIR="{shared}" exec "{bench.baton}" git push --branch main --json > ../{{name}}.json'
    else:
        cmd = (
            "for i in 1 2 3; do git push -q origin HEAD:main 2>/dev/null && exit 0; "
            "git pull -q --rebase origin main >/dev/null 2>&1 || { git rebase --abort >/dev/null 2>&1; exit 2; }; done; exit 1"
        )
    if tool == "serial":
        # The optimum: one process pushes the same commits one after another
        # (fetch, rebase onto what landed, push each): no waiting, no
        # rejected attempt, nothing but the git work itself.
        steps = " && ".join(
            f'cd "{d}" && git fetch -q origin main && git rebase -q FETCH_HEAD && git push -q origin HEAD:main'
            for d in dirs
        )
        t = time.perf_counter()
        subprocess.run(["sh", "-c", steps], env=bench.env, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        log_lines = bench.git("log", "--format=%s", "main", cwd=remote).splitlines()
        for d in dirs:
            shutil.rmtree(d)
        return sum(1 for line in log_lines if line.startswith("agent ")), wall, 1
    # All agents block on one pipe and start when it closes.
    r, w = os.pipe()
    procs = [
        subprocess.Popen(["sh", "-c", f"read _ <&3; {cmd.replace('{name}', os.path.basename(d))}"], cwd=d, env=bench.env, pass_fds=(r,),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=lambda: os.dup2(r, 3))
        for d in dirs
    ]
    time.sleep(0.3)
    t = time.perf_counter()
    os.close(w)
    for p in procs:
        p.wait()
    wall = time.perf_counter() - t
    os.close(r)
    log_lines = bench.git("log", "--format=%s", "main", cwd=remote).splitlines()
    landed = sum(1 for line in log_lines if line.startswith("agent "))
    attempts = 0
    for d in dirs:
        shutil.rmtree(d)
        for extra in (d + ".tmp", d + ".baton"):
            shutil.rmtree(extra, ignore_errors=True)
        report = d + ".json"
        if os.path.exists(report):
            with open(report) as f:
                text = f.read().strip()
            if text:
                attempts = max(attempts, json.loads(text)["attempts"])
            os.remove(report)
    return landed, wall, attempts


def psql(sql: str) -> bool:
    p = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc", sql],
                       capture_output=True, text=True)
    return p.returncode == 0


def make_database() -> str | None:
    name = f"baton_git_bench_{os.getpid()}"
    return name if shutil.which("psql") and psql(f"CREATE DATABASE {name}") else None


def start_daemon(root: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """`git daemon` serving `root` (pushes allowed) on a free local port."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
                             "--listen=127.0.0.1", f"--port={port}", f"--base-path={root}", root],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.time() > deadline:
                raise SystemExit("git daemon never listened")
            time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--baton", help="measure this prebuilt baton binary")
    ap.add_argument("--skip-creation", action="store_true", help="measure pushes only")
    ap.add_argument("--backend", help="PostgreSQL URL for the separate-machines row (default: a database made here)")
    args = ap.parse_args()
    if args.baton:
        baton = os.path.abspath(args.baton)
    else:
        if not args.skip_build:
            log("building baton (release)")
            subprocess.run(["cargo", "build", "--release", "-q", "-p", "baton"], cwd=ROOT, check=True)
        baton = str(bin_dir() / "baton")
    with tempfile.TemporaryDirectory(prefix="baton-git-bench-") as tmp:
        bench = Bench(tmp, baton)
        log(f"generating a repository of {args.files} files")
        remote, base = bench.make_repo(args.files)
        rows = [] if args.skip_creation else creation(bench, base, args.trials)
        daemon = start_daemon(tmp, bench.env)
        bench.daemon_url = f"git://127.0.0.1:{daemon[1]}/remote.git"
        made_db = None
        bench.backend = args.backend
        if not bench.backend:
            made_db = make_database()
            bench.backend = made_db and f"postgres://postgres@127.0.0.1:5432/{made_db}"
        tools = ("serial", "baton", "baton-shared", "naive", "machines") + (("machines-backend",) if bench.backend else ())
        if not bench.backend:
            log("no PostgreSQL (psql failed): the BATON_BACKEND row is skipped")
        pushes = {tool: [] for tool in tools}
        # Interleaved (A B C D A B C D ...): a change of load hits all alike.
        for r in range(args.rounds):
            for tool in tools:
                pushes[tool].append(push_round(bench, remote, base, args.agents, tool, r))
        for tool, runs in pushes.items():
            log(f"{tool}: {runs}")
        daemon[0].kill()
        daemon[0].wait()
        if made_db:
            psql(f"DROP DATABASE IF EXISTS {made_db} WITH (FORCE)")
    if rows:
        worktree = dict(rows)["git worktree add --detach (plain)"]
        print(f"Workspace creation, repository of {args.files} files, median of {args.trials}:\n")
        print("| method | median | vs plain `git worktree add` |")
        print("|---|---:|---:|")
        for name, secs in rows:
            print(f"| {name} | {secs * 1000:.1f} ms | {secs / worktree:.2f}x |")
        print()
    print(f"{args.agents} agents pushing one commit each to one bare remote at once, {args.rounds} rounds:\n")
    print("| method | commits landed (per round) | attempts, max (per round) | wall time, median | vs the serial optimum |")
    print("|---|---|---|---:|---:|")
    labels = {"serial": "optimum: one process pushes the same commits one after another (fetch, rebase, push each)",
              "baton": "`baton git push`, each clone its own default baton dir",
              "baton-shared": "`baton git push`, one shared `BATON_DIR`",
              "naive": "naive loop: 3 x (`git push` \\|\\| `git pull --rebase`)",
              "machines": "`baton git push`, separate machines (git:// remote, own baton dir and temp dir)",
              "machines-backend": "`baton git push`, separate machines, `BATON_BACKEND` (queue on PostgreSQL)"}
    optimum = statistics.median(w for _, w, _ in pushes["serial"])
    for tool, runs in pushes.items():
        landed = ", ".join(f"{n}/{args.agents}" for n, _, _ in runs)
        attempts = ", ".join(str(a) for _, _, a in runs) if tool not in ("naive", "serial") else "-"
        wall = statistics.median(w for _, w, _ in runs)
        print(f"| {labels[tool]} | {landed} | {attempts} | {wall * 1000:.0f} ms | {wall / optimum:.2f}x |")
    ratio = statistics.median(w for _, w, _ in pushes["baton"]) / optimum
    verdict = "PASS" if ratio <= 1.2 else "FAIL"
    print(f"\n- **{verdict}** `baton git push` in the default setting within 1.2x of the serial optimum: {ratio:.2f}x")


if __name__ == "__main__":
    main()
