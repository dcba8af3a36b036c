"""A fork()ed child never holds what its parent held."""

import ctypes
import os
import subprocess
import sys
import textwrap

import baton
from conftest import cli


def _in_child(fork, body):
    """Runs body() in a child made by `fork`; returns its exit status."""
    pid = fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _child_checks(lock):
    def body():
        assert not lock.held and lock.token is None
        try:
            lock.release()
            return 3
        except baton.Error:
            pass
        lock.__exit__(None, None, None)  # leaving `with` in the child: nothing
        return 0

    return body


def test_os_fork_child_does_not_hold_or_release_the_parents_lock(baton_bin, bdir):
    lock = baton.Lock("f", baton_dir=bdir)
    token = lock.acquire()
    assert _in_child(os.fork, _child_checks(lock)) == 0
    assert lock.held and lock.token == token
    st = baton.status("f", baton_dir=bdir)
    assert st["held"] and st["holder"]["pid"] == os.getpid()
    assert cli(baton_bin, bdir, "run", "--lock", "f", "--no-wait", "--", "true").returncode == 75
    lock.release()


def test_a_child_forked_without_python_hooks_does_not_release_either(baton_bin, bdir):
    # libc's fork() directly: Python's at-fork hooks do not run; the pid
    # recorded with the hold tells the child apart.
    libc_fork = ctypes.CDLL(None, use_errno=True).fork
    lock = baton.Lock("cf", baton_dir=bdir)
    lock.acquire()
    assert _in_child(libc_fork, _child_checks(lock)) == 0
    assert lock.held
    assert cli(baton_bin, bdir, "run", "--lock", "cf", "--no-wait", "--", "true").returncode == 75
    lock.release()


def test_a_child_may_acquire_after_its_parent_releases(bdir):
    lock = baton.Lock("ca", baton_dir=bdir)
    lock.acquire()
    r, w = os.pipe()

    def body():
        os.close(w)
        os.read(r, 1)  # the parent has released
        return 0 if lock.acquire(timeout=30) and lock.held else 4

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    os.close(r)
    lock.release()
    os.write(w, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_killed_parent_frees_the_lock_while_its_forked_child_lives(baton_bin, bdir):
    # Without closing the child's copy of the lock file, the lock would stay
    # held until the child exits.
    code = textwrap.dedent(
        f"""
        import os, sys, time, baton
        lock = baton.Lock("orphan", baton_dir={bdir!r})
        lock.acquire()
        child = os.fork()
        if child == 0:
            sys.stdin.read()
            os._exit(0)
        print(child, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert cli(baton_bin, bdir, "run", "--lock", "orphan", "--no-wait", "--", "true").returncode == 75
        parent.kill()
        parent.wait(timeout=60)
        os.kill(child, 0)  # still alive, with the parent's files
        r = cli(baton_bin, bdir, "run", "--lock", "orphan", "--no-wait", "--", "true")
        assert r.returncode == 0, r.stderr
    finally:
        parent.stdin.close()
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass
