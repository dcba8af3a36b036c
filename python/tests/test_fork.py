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


_FORK_STORM = """
import os, sys, threading, time, baton
bdir, forks, held = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keep = [baton.Lock(f"held-{i}", baton_dir=bdir) for i in range(held)]
for lock in keep:
    lock.acquire()
stop = threading.Event()
cycles = [0, 0, 0]

def loop(i):
    lock = baton.Lock(f"loop-{i}", baton_dir=bdir)
    while not stop.is_set():
        lock.acquire()
        lock.release()
        cycles[i] += 1

threads = [threading.Thread(target=loop, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
hung = 0
for _ in range(forks):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + 10
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            hung += 1
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            break
        time.sleep(0.0005)
stop.set()
for t in threads:
    t.join()
assert sum(cycles) > 0, "the threads never acquired"
print(hung)
"""


def _fork_storm(bdir, forks, held):
    r = subprocess.run(
        [sys.executable, "-c", _FORK_STORM, bdir, str(forks), str(held)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def test_children_forked_while_threads_acquire_and_release_never_hang(bdir):
    # Issue 37, item 1: a fork while another thread was inside the
    # re-entrancy table copied it locked, and the fork hook hung on it
    # (5 of 1,500 forks before the fix).
    assert _fork_storm(bdir, 500, 0) == 0


def test_children_forked_while_100_locks_are_held_never_hang(bdir):
    # 43 of 1,500 forks hung before the fix.
    assert _fork_storm(bdir, 300, 100) == 0
