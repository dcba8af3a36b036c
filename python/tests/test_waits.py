"""baton.Lock's waits: interruptible by Ctrl-C and by a Cancel, busy (not an
error) against another object of this process, bounded or not, and the
`baton` command run by a Python holder."""

import math
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import baton

from conftest import cli


def test_another_object_of_this_thread_makes_a_bounded_wait_busy(bdir):
    a, b = baton.Lock("x", baton_dir=bdir), baton.Lock("x", baton_dir=bdir)
    a.acquire()
    with pytest.raises(baton.Busy):
        b.acquire(blocking=False)
    with pytest.raises(baton.Busy):
        b.acquire(timeout=0.2)
    # Waiting forever for itself would never end: refused.
    with pytest.raises(baton.Error) as e:
        b.acquire()
    assert not isinstance(e.value, baton.Busy)
    assert not b.held
    a.release()
    b.acquire(blocking=False)
    b.release()


@pytest.mark.parametrize("timeout", [None, 30.0, math.inf])
def test_ctrl_c_ends_a_wait_at_once_holding_nothing(bdir, holders, timeout):
    h = holders("c", bdir)
    code = textwrap.dedent(
        f"""
        import sys, time, baton
        lock = baton.Lock("c", baton_dir={bdir!r})
        print("waiting", flush=True)
        try:
            lock.acquire(timeout={timeout!r})
            print("granted", flush=True)
        except KeyboardInterrupt:
            print("interrupted", lock.held, flush=True)
        st = baton.status("c", baton_dir={bdir!r})
        print("after", st["waiters"], flush=True)
        sys.stdin.read()
        print("then", lock.acquire(blocking=False) > 0, flush=True)
        """
    ).replace("inf", "float('inf')")
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "waiting"
        while baton.status("c", baton_dir=bdir)["waiters"] == 0:
            time.sleep(0.01)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().split()
        took = time.monotonic() - sent
        # Before: the wait ran to its end (forever, or 30 s) and the
        # interrupt surfaced only after it.
        assert line == ["interrupted", "False"], line
        assert took < 5, f"the interrupt took {took:.2f}s"
        assert p.stdout.readline().split() == ["after", "0"]
        h.release()
        p.stdin.close()
        assert p.stdout.readline().split() == ["then", "True"]
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.wait()


def test_a_cancel_ends_a_wait_from_another_thread(bdir, holders):
    holders("k", bdir)
    lock = baton.Lock("k", baton_dir=bdir)
    c = baton.Cancel()
    errors = []

    def wait():
        try:
            lock.acquire(cancel=c)
        except baton.Cancelled as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    while baton.status("k", baton_dir=bdir)["waiters"] == 0:
        time.sleep(0.01)
    c.cancel()
    t.join(timeout=30)
    assert not t.is_alive() and len(errors) == 1 and c.cancelled
    assert isinstance(errors[0], baton.Error) and not lock.held
    assert baton.status("k", baton_dir=bdir)["waiters"] == 0
    with pytest.raises(baton.Cancelled):
        lock.acquire(cancel=c)


def test_an_infinite_timeout_waits_forever(bdir, holders):
    h = holders("inf", bdir)
    lock = baton.Lock("inf", baton_dir=bdir)
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=float("inf"))))
    t.start()
    while baton.status("inf", baton_dir=bdir)["waiters"] == 0:
        if not t.is_alive():
            break
        time.sleep(0.01)
    assert t.is_alive(), "timeout=inf was refused"
    h.release()
    t.join(timeout=60)
    assert got and lock.held
    lock.release()
    for bad in (-1.0, math.nan):
        with pytest.raises(baton.Error, match="invalid timeout"):
            lock.acquire(timeout=bad)


def test_a_name_with_a_lone_surrogate_is_an_error(bdir):
    with pytest.raises(baton.Error, match="lone surrogate"):
        baton.Lock("a\udcff", baton_dir=bdir)
    with pytest.raises(baton.Error):
        baton.status("a\udcff", baton_dir=bdir)


def test_the_baton_command_run_by_a_python_holder_is_refused(bdir, baton_bin):
    lock = baton.Lock("self", baton_dir=bdir)
    with lock:
        # Before: it waited for this process, which waits for it: forever.
        r = cli(baton_bin, bdir, "lock", "acquire", "self", "--wait", "30s")
        assert r.returncode == 125, r
        assert "ancestor" in r.stderr
    r = cli(baton_bin, bdir, "lock", "status", "self", "--json")
    assert r.returncode == 0


def test_a_python_child_still_waits_for_its_parent(bdir):
    # A library request (a child using baton.Lock) may wait for its parent,
    # which may release while the child runs.
    code = textwrap.dedent(
        f"""
        import baton
        print(baton.Lock("p", baton_dir={bdir!r}).acquire(timeout=30) > 0)
        """
    )
    with baton.Lock("p", baton_dir=bdir):
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        while baton.status("p", baton_dir=bdir)["waiters"] == 0:
            assert child.poll() is None, child.stdout.read()
            time.sleep(0.01)
    assert child.stdout.read().strip() == "True"
    assert child.wait(timeout=60) == 0


def test_acquire_is_a_context_manager(bdir):
    lock = baton.Lock("cm", baton_dir=bdir)
    with lock.acquire(timeout=10) as held:
        assert held is lock and lock.held
    assert not lock.held
    token = lock.acquire()
    assert isinstance(token, int) and token == lock.token
    lock.release()


def test_a_reentrant_lock_counts_its_holds(bdir):
    lock = baton.Lock("re", baton_dir=bdir, reentrant=True)
    other = baton.Lock("re", baton_dir=bdir)
    t1 = lock.acquire()
    with lock:
        assert lock.acquire(blocking=False) == t1 and lock.depth == 3
        lock.release()
    assert lock.held and lock.depth == 1
    with pytest.raises(baton.Busy):
        other.acquire(blocking=False)
    lock.release()
    assert not lock.held and lock.depth == 0
    with pytest.raises(baton.Error):
        lock.release()
    plain = baton.Lock("re2", baton_dir=bdir)
    plain.acquire()
    with pytest.raises(baton.Error, match="already held"):
        plain.acquire()
    plain.release()
