"""Fixtures of the tests of the installed wheel: a fresh baton dir per test,
the `baton` command the wheel installed, and holder processes."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import baton

# The tests run against the installed wheel, never the source tree.
assert "site-packages" in baton.__file__, f"baton imported from {baton.__file__}, not a wheel"


@pytest.fixture
def bdir(tmp_path):
    """A fresh baton dir (the tests never use the user's own)."""
    d = tmp_path / "baton"
    return str(d)


@pytest.fixture(scope="session")
def baton_bin():
    """The `baton` command the wheel installed in this venv's scripts dir."""
    found = shutil.which("baton", path=os.path.dirname(sys.executable))
    assert found, f"no baton next to {sys.executable}: the wheel did not install its command"
    return found


def cli(baton_bin, bdir, *args, **kw):
    """Runs `baton --dir BDIR ARGS...`; returns the CompletedProcess."""
    return subprocess.run(
        [baton_bin, "--dir", bdir, *args],
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


class Holder:
    """A Python process that holds a lock until its stdin closes (or it is
    killed); `token` is its fencing token."""

    def __init__(self, name, bdir, **lock_kw):
        code = textwrap.dedent(
            f"""
            import sys, baton
            lock = baton.Lock({name!r}, baton_dir={bdir!r}, **{lock_kw!r})
            print("held", lock.acquire(), flush=True)
            sys.stdin.read()
            lock.release()
            """
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["held"], f"holder did not acquire: {line}"
        self.token = int(line[1])
        self.pid = self.proc.pid

    def release(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=60)


@pytest.fixture
def holders():
    """Starts Holder processes; ends those still running after the test."""
    started = []

    def start(name, bdir, **kw):
        h = Holder(name, bdir, **kw)
        started.append(h)
        return h

    yield start
    for h in started:
        if h.proc.poll() is None:
            h.kill()
