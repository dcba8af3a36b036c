"""baton.Lock on its own: waiting, modes, errors, threads."""

import subprocess
import sys
import textwrap
import threading
import time

import pytest

import baton


def test_timeout_raises_busy_after_waiting(bdir, holders):
    holders("t", bdir)
    lock = baton.Lock("t", baton_dir=bdir)
    start = time.monotonic()
    with pytest.raises(baton.Busy) as e:
        lock.acquire(timeout=0.3)
    assert time.monotonic() - start >= 0.3
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, baton.Error)
    assert "gave up after" in str(e.value)
    with pytest.raises(baton.Busy):
        lock.acquire(blocking=False)
    with pytest.raises(baton.Busy):
        lock.acquire(timeout=0)
    assert not lock.held


def test_a_waiter_gets_the_lock_when_the_holder_releases(bdir, holders):
    h = holders("w", bdir)
    lock = baton.Lock("w", baton_dir=bdir)
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=60)))
    t.start()
    while baton.status("w", baton_dir=bdir)["waiters"] == 0:
        time.sleep(0.01)
    h.release()
    t.join(timeout=60)
    assert got and got[0] > h.token and lock.held
    lock.release()


def test_the_gil_is_released_while_waiting(bdir, holders):
    # In a process of its own: a wait that kept the GIL would freeze it, and
    # the test must fail (at the timeout), not hang.
    h = holders("gil", bdir)
    code = textwrap.dedent(
        f"""
        import threading, time, baton
        lock = baton.Lock("gil", baton_dir={bdir!r})
        waiter = threading.Thread(target=lock.acquire)
        waiter.start()
        while baton.status("gil", baton_dir={bdir!r})["waiters"] == 0:
            time.sleep(0.01)
        counted = sum(1 for _ in range(100_000))  # while the waiter waits
        print(counted, waiter.is_alive(), lock.held, flush=True)
        waiter.join()
        print("granted", lock.held, flush=True)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        out = []
        reader = threading.Thread(target=lambda: out.append(p.stdout.readline()))
        reader.start()
        reader.join(timeout=60)
        assert out == ["100000 True False\n"], f"no other thread ran while one waited: {out}"
        h.release()
        assert p.stdout.readline() == "granted True\n"
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_shared_holders_exclude_an_exclusive_one(bdir, holders):
    holders("rw", bdir, mode="shared")
    reader = baton.Lock("rw", baton_dir=bdir, mode="shared")
    reader.acquire(blocking=False)
    assert reader.mode == "shared" and reader.held
    st = baton.status("rw", baton_dir=bdir)
    assert st["mode"] == "shared" and len(st["holders"]) == 2
    # An exclusive holder (another thread: this one holds the lock already).
    writer = []

    def write():
        try:
            baton.Lock("rw", baton_dir=bdir).acquire(blocking=False)
            writer.append("acquired")
        except baton.Busy:
            writer.append("busy")

    t = threading.Thread(target=write)
    t.start()
    t.join()
    assert writer == ["busy"]
    reader.release()


def test_slots_admit_that_many_holders(bdir):
    locks = [baton.Lock("pool", baton_dir=bdir, slots=2) for _ in range(3)]
    got = []

    def take(lock):
        try:
            got.append(lock.acquire(blocking=False))
        except baton.Busy:
            got.append(None)

    # One thread per holder: a thread cannot take one lock twice.
    for lock in locks:
        t = threading.Thread(target=take, args=(lock,))
        t.start()
        t.join()
    assert [g is not None for g in got] == [True, True, False]
    assert locks[0].slots == 2
    st = baton.status("pool", baton_dir=bdir)
    assert st["max"] == 2 and len(st["holders"]) == 2
    with pytest.raises(baton.Error, match="in use as"):
        baton.Lock("pool", baton_dir=bdir, slots=3).acquire(blocking=False)
    for lock in locks[:2]:
        lock.release()


def test_context_manager_releases_on_an_exception(bdir):
    lock = baton.Lock("cm", baton_dir=bdir)
    with pytest.raises(KeyError):
        with lock as entered:
            assert entered is lock and lock.held and lock.token
            raise KeyError("x")
    assert not lock.held and lock.token is None
    assert baton.status("cm", baton_dir=bdir)["held"] is False


def test_misuse_is_an_error(bdir):
    lock = baton.Lock("m", baton_dir=bdir)
    with pytest.raises(baton.Error, match="not held"):
        lock.release()
    lock.acquire()
    with pytest.raises(baton.Error, match="already held through this Lock object"):
        lock.acquire(blocking=False)
    # Another object in the same thread: the library refuses the deadlock.
    with pytest.raises(baton.Error, match="already held by this thread"):
        baton.Lock("m", baton_dir=bdir).acquire()
    lock.release()
    for kw, msg in [
        ({"mode": "write"}, "invalid mode"),
        ({"mode": "shared", "slots": 2}, "slots cannot be given"),
        ({"slots": 0}, "invalid slots 0"),
        ({"slots": -1}, "invalid slots -1"),
    ]:
        with pytest.raises(baton.Error, match=msg):
            baton.Lock("m", baton_dir=bdir, **kw)
    with pytest.raises(baton.Error, match="invalid timeout -1"):
        lock.acquire(timeout=-1)
    with pytest.raises(baton.Error, match="blocking=False"):
        lock.acquire(timeout=1, blocking=False)
    assert not lock.held


def test_an_unusable_baton_dir_is_an_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(baton.Error, match="baton dir|cannot"):
        baton.Lock("x", baton_dir=f)
