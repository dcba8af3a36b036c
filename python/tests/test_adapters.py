"""baton.FileLock / baton.AsyncFileLock (filelock's API) and
baton.portalocker (portalocker's API): their semantics, and exclusion of
processes still using the real filelock and portalocker on the same path."""

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import baton
from baton import portalocker as pl


@pytest.fixture(autouse=True)
def _batondir(bdir, monkeypatch):
    monkeypatch.setenv("BATON_DIR", bdir)


def test_filelock_counts_holds_and_releases_idempotently(tmp_path):
    path = str(tmp_path / "a.lock")
    lock = baton.FileLock(path, timeout=1)
    assert not lock.is_locked and lock.lock_counter == 0
    with lock.acquire(timeout=10) as held:
        assert held is lock and lock.is_locked and lock.lock_counter == 1
        with lock:
            assert lock.lock_counter == 2
        assert lock.lock_counter == 1 and lock.token is not None
    assert not lock.is_locked
    lock.release()  # not held: nothing happens
    lock.acquire()
    lock.acquire()
    lock.release(force=True)
    assert not lock.is_locked


def test_filelock_times_out_against_another_holder(tmp_path):
    path = str(tmp_path / "t.lock")
    a, b = baton.FileLock(path), baton.FileLock(path)
    with a:
        with pytest.raises(baton.Timeout) as e:
            b.acquire(timeout=0.1)
        assert isinstance(e.value, TimeoutError) and e.value.lock_file == path
        assert str(e.value) == f"The file lock '{path}' could not be acquired."
        with pytest.raises(baton.Timeout):
            b.acquire(blocking=False)
    with b.acquire(timeout=0):
        assert b.is_locked


def test_filelock_gives_each_thread_its_own_hold(tmp_path):
    lock = baton.FileLock(str(tmp_path / "th.lock"))
    lock.acquire()
    seen = []

    def other():
        seen.append(lock.is_locked)
        try:
            lock.acquire(timeout=0.1)
            seen.append("acquired")
        except baton.Timeout:
            seen.append("timeout")

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [False, "timeout"]
    lock.release()
    shared = baton.FileLock(str(tmp_path / "sh.lock"), thread_local=False)
    shared.acquire()
    t = threading.Thread(target=lambda: seen.append(shared.lock_counter))
    t.start()
    t.join()
    assert seen[-1] == 1
    shared.release()


def test_filelock_singletons(tmp_path):
    path = str(tmp_path / "s.lock")
    a = baton.FileLock(path, is_singleton=True)
    assert baton.FileLock(path, is_singleton=True) is a
    with pytest.raises(ValueError):
        baton.FileLock(path, timeout=3, is_singleton=True)


PEER = {
    "filelock": "import filelock; l = filelock.FileLock({path!r}); l.acquire()",
    "portalocker": "import portalocker; fh = open({path!r}, 'a'); portalocker.lock(fh, portalocker.LOCK_EX)",
}


@pytest.mark.parametrize("peer", sorted(PEER))
def test_a_process_still_on_the_old_library_is_excluded(tmp_path, peer):
    path = str(tmp_path / "mig.lock")
    code = PEER[peer].format(path=path) + "\nimport sys; print('held', flush=True); sys.stdin.read()"
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        lock = baton.FileLock(path)
        with pytest.raises(baton.Timeout):
            lock.acquire(timeout=0.3)
        fh = open(path, "a")
        with pytest.raises(pl.AlreadyLocked):
            pl.Lock(path, timeout=0.3).acquire()
        fh.close()
        p.stdin.close()
        p.wait(timeout=30)
        with lock.acquire(timeout=10):
            # And the old library sees baton's holder.
            check = PEER[peer].replace("l.acquire()", "l.acquire(timeout=0.2)").replace(
                "portalocker.LOCK_EX)", "portalocker.LOCK_EX | portalocker.LOCK_NB)"
            )
            r = subprocess.run([sys.executable, "-c", check.format(path=path)], capture_output=True, text=True)
            assert r.returncode != 0 and ("Timeout" in r.stderr or "AlreadyLocked" in r.stderr or "LockException" in r.stderr), r.stderr
    finally:
        p.kill()
        p.wait()


def test_async_filelock_never_blocks_the_loop_and_a_cancel_holds_nothing(tmp_path, bdir, holders):
    path = str(tmp_path / "as.lock")
    holder = baton.FileLock(path, thread_local=False)
    holder.acquire()

    async def main():
        lock = baton.AsyncFileLock(path)
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        waiter = asyncio.ensure_future(lock.acquire())
        await asyncio.sleep(0.3)
        assert ticks >= 10, ticks  # the loop ran while the lock was awaited
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not lock.is_locked
        status = baton.status(baton.filelock.lock_name(path))
        assert status["waiters"] == 0
        holder.release()
        async with lock as held:
            assert held is lock and lock.is_locked
        assert not lock.is_locked
        with pytest.raises(NotImplementedError):
            with lock:
                pass
        ticker.cancel()

    asyncio.run(main())


def test_portalocker_lock_returns_the_handle_and_raises_already_locked(tmp_path):
    path = str(tmp_path / "p.lock")
    a = pl.Lock(path, "w", timeout=0.1)
    fh = a.acquire()
    fh.write("x")
    assert a.acquire() is fh
    with pytest.raises(pl.AlreadyLocked):
        pl.Lock(path, fail_when_locked=True).acquire()
    with pytest.raises(pl.LockException):
        pl.Lock(path, timeout=0.1).acquire()
    a.release()
    a.release()
    with pl.Lock(path, timeout=1) as fh2:
        assert not fh2.closed


def test_portalocker_rlock_semaphore_and_handles(tmp_path):
    path = str(tmp_path / "r.lock")
    r = pl.RLock(path)
    fh = r.acquire()
    assert r.acquire() is fh
    r.release()
    with pytest.raises(pl.AlreadyLocked):
        pl.Lock(path, timeout=0).acquire()
    r.release()
    with pytest.raises(pl.LockException):
        r.release()
    s1, s2, s3 = (pl.BoundedSemaphore(2, "sem", directory=str(tmp_path)) for _ in range(3))
    assert s1.acquire() and s2.acquire()
    with pytest.raises(pl.AlreadyLocked):
        s3.acquire(timeout=0.1)
    s3.fail_when_locked = False
    assert s3.acquire(timeout=0.1) is None
    s1.release()
    assert s3.acquire(timeout=1)
    s2.release()
    s3.release()
    f1, f2 = open(path, "a"), open(path, "a")
    pl.lock(f1, pl.LOCK_EX | pl.LOCK_NB)
    with pytest.raises(pl.AlreadyLocked):
        pl.lock(f2, pl.LOCK_EX | pl.LOCK_NB)
    pl.unlock(f1)
    pl.lock(f2, pl.LOCK_SH | pl.LOCK_NB)
    pl.lock(f1, pl.LOCK_SH | pl.LOCK_NB)
    pl.unlock(f1)
    pl.unlock(f2)
    f1.close()
    f2.close()
