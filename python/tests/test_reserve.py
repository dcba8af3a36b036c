"""`baton.reserve` and `baton.reservations` against real processes and real
git repositories (an origin and two clones): the same reservations as the
`baton reserve` command, exclusion between processes, release on SIGKILL
with `previous_holder_died` for the next holder, all or none."""

import os
import subprocess
import sys
import textwrap
import threading

import pytest

import baton

from conftest import cli


def git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def clones(tmp_path):
    """`origin` (src/lib.rs, docs/a.md) and its clones `a` and `b`."""
    origin = tmp_path / "origin"
    (origin / "src").mkdir(parents=True)
    (origin / "src" / "lib.rs").write_text("// lib\n")
    (origin / "docs").mkdir()
    (origin / "docs" / "a.md").write_text("# a\n")
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", ".")
    git(origin, "commit", "-q", "-m", "seed")
    git(tmp_path, "clone", "-q", "origin", "a")
    git(tmp_path, "clone", "-q", "origin", "b")
    return str(tmp_path / "a"), str(tmp_path / "b")


class Reserver:
    """A Python process that reserves `paths` in `repo` and holds them until
    its stdin closes (or it is killed)."""

    def __init__(self, paths, repo, bdir, **kw):
        code = textwrap.dedent(
            f"""
            import sys, baton
            r = baton.reserve({paths!r}, repo={repo!r}, baton_dir={bdir!r}, **{kw!r})
            print("held", r.token, flush=True)
            sys.stdin.read()
            r.release()
            """
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["held"], f"the reserver did not get its paths: {line}"
        self.token = int(line[1])

    def release(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=60)


def test_overlap_excludes_another_process_disjoint_does_not_wait(clones, bdir, baton_bin):
    a, b = clones
    holder = Reserver(["src"], a, bdir, reason="refactor", agent="alice")
    try:
        # From the other clone: the same repository.
        with pytest.raises(baton.Busy) as e:
            baton.reserve(["src/lib.rs"], timeout=0, repo=b, baton_dir=bdir)
        assert "'src' is reserved exclusive by alice" in str(e.value)
        assert "refactor" in str(e.value)
        with pytest.raises(baton.Busy):
            baton.reserve(["src/**/*.rs"], timeout=0.2, repo=b, baton_dir=bdir)
        with baton.reserve(["docs"], timeout=0, repo=b, baton_dir=bdir) as docs:
            assert docs.held and docs.paths == ["docs"] and docs.mode == "exclusive"
            assert docs.token > holder.token
            assert not docs.previous_holder_died and docs.previous_holder is None
            rows = baton.reservations(b, baton_dir=bdir)
            assert [r["patterns"] for r in rows] == [["src"], ["docs"]]
            assert rows[0]["holder"]["agent"] == "alice"
            assert rows[0]["token"] == holder.token
        assert not docs.held
        assert [r["patterns"] for r in baton.reservations(a, "src/x", baton_dir=bdir)] == [["src"]]
        # The command sees what Python took.
        out = cli(baton_bin, bdir, "reserve", "--check", "src/lib.rs", cwd=b)
        assert out.returncode == 75, out.stderr
        assert "alice" in out.stderr
    finally:
        holder.release()
    assert baton.reservations(a, baton_dir=bdir) == []
    out = cli(baton_bin, bdir, "reserve", "--check", "src/lib.rs", cwd=b)
    assert out.returncode == 0, out.stderr


def test_kill_9_of_the_holder_grants_a_waiter_which_is_told_it_died(clones, bdir):
    a, b = clones
    holder = Reserver(["src"], a, bdir)
    got = {}

    def wait():
        got["r"] = baton.reserve(["src/lib.rs"], timeout=60, repo=b, baton_dir=bdir)

    waiter = threading.Thread(target=wait)
    waiter.start()
    while not any(not r["granted"] for r in baton.reservations(a, baton_dir=bdir)):
        pass
    holder.kill()
    waiter.join(timeout=60)
    r = got["r"]
    assert r.previous_holder_died
    assert r.previous_holder["patterns"] == ["src"]
    assert r.previous_holder["token"] == holder.token
    r.release()
    with pytest.raises(baton.Error, match="not held"):
        r.release()


def test_several_paths_are_taken_all_or_none_and_bad_paths_are_refused(clones, bdir, tmp_path):
    a, b = clones
    holder = Reserver(["docs"], a, bdir)
    try:
        with pytest.raises(baton.Busy):
            baton.reserve(["src", "docs"], timeout=0, repo=b, baton_dir=bdir)
        # Nothing of the refused request is held.
        with baton.reserve(["src"], timeout=0, repo=b, baton_dir=bdir):
            pass
        for bad in ["../x", str(tmp_path / "elsewhere")]:
            with pytest.raises(baton.Error, match="cannot reserve"):
                baton.reserve([bad], timeout=0, repo=b, baton_dir=bdir)
        with pytest.raises(baton.Error, match="invalid mode"):
            baton.reserve(["src"], mode="mine", repo=b, baton_dir=bdir)
        with pytest.raises(baton.Error, match="no path given"):
            baton.reserve([], repo=b, baton_dir=bdir)
        shared = [baton.reserve(["src"], mode="shared", timeout=0, repo=b, baton_dir=bdir) for _ in range(2)]
        assert [s.mode for s in shared] == ["shared", "shared"]
        with pytest.raises(baton.Busy):
            baton.reserve(["src"], timeout=0, repo=b, baton_dir=bdir)
        for s in shared:
            s.release()
    finally:
        holder.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is Unix-only")
def test_a_forked_child_does_not_hold_or_release_its_parents_reservation(clones, bdir):
    a, b = clones
    r = baton.reserve(["src"], timeout=0, repo=a, baton_dir=bdir)
    pid = os.fork()
    if pid == 0:
        ok = not r.held
        try:
            r.release()
            ok = False
        except baton.Error:
            pass
        r.__exit__(None, None, None)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert r.held
    with pytest.raises(baton.Busy):
        baton.reserve(["src"], timeout=0, repo=b, baton_dir=bdir)
    r.release()
