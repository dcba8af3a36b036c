"""A typed program using each of baton's Python APIs; test_typing runs
`mypy --strict` over it (the docs' patterns must type-check)."""

import asyncio
from typing import IO, Any, Optional

import baton
from baton import portalocker


def with_return(path: str) -> int:
    with baton.Lock("example", baton_dir=path) as lock:
        return lock.token or 0  # a return inside `with` (needs __exit__ -> None)


def acquire_as_context(path: str) -> Optional[int]:
    lock = baton.Lock("example", baton_dir=path, reentrant=True)
    with lock.acquire(timeout=10) as held:
        token: int = lock.acquire(blocking=False)
        lock.release()
        assert held is lock
        return token


def cancellable(path: str) -> None:
    cancel = baton.Cancel()
    try:
        baton.Lock("example", baton_dir=path).acquire(timeout=float("inf"), cancel=cancel)
    except baton.Cancelled:
        pass
    except baton.Busy as e:
        print(e)


def file_locks(path: str) -> bool:
    lock = baton.FileLock(path + ".lock", timeout=5)
    try:
        with lock.acquire(timeout=10):
            return lock.is_locked and lock.lock_counter == 1
    except baton.Timeout as e:
        print(e.lock_file)
        return False


async def async_lock(path: str) -> bool:
    lock = baton.AsyncFileLock(path + ".lock")
    async with lock:
        return lock.is_locked


def portalocker_api(path: str) -> None:
    with portalocker.Lock(path, "w", timeout=1) as fh:
        fh.write("x")
    rlock = portalocker.RLock(path)
    f: IO[Any] = rlock.acquire()
    rlock.release()
    f2 = open(path, "a")
    try:
        portalocker.lock(f2, portalocker.LOCK_EX | portalocker.LOCK_NB)
    except portalocker.AlreadyLocked:
        pass
    finally:
        portalocker.unlock(f2)
        f2.close()
    sem = portalocker.BoundedSemaphore(2, "example")
    if sem.acquire(timeout=1) is not None:
        sem.release()
    status: dict[str, Any] = baton.status("example")
    print(f, status["held"])


def reserved_paths(path: str, repo: str) -> int:
    try:
        with baton.reserve(["src", "docs/*.md"], timeout=5, reason="x", repo=repo, baton_dir=path) as r:
            died: bool = r.previous_holder_died
            previous: Optional[dict[str, Any]] = r.previous_holder
            paths: list[str] = r.paths
            print(died, previous, paths, r.mode, r.held)
            return r.token
    except baton.Busy as e:
        print(e)
        return 0
    finally:
        rows: list[dict[str, Any]] = baton.reservations(repo, baton_dir=path)
        print(rows)


if __name__ == "__main__":
    asyncio.run(async_lock("/tmp/x"))
