"""portalocker's API over baton's locks: change ``import portalocker`` to
``from baton import portalocker`` and nothing else.

``Lock``, ``RLock``, ``BoundedSemaphore``, ``lock(fh, flags)`` /
``unlock(fh)``, ``LOCK_EX | LOCK_SH | LOCK_NB | LOCK_UN`` (``LockFlags``),
``LockException``, ``AlreadyLocked``, with portalocker's arguments, return
values and defaults (``timeout=5``, ``check_interval=0.25``, ``flags=LOCK_EX
| LOCK_NB``). Each lock is baton's lock named ``filelock/<sha256 of the
absolute path>`` (the name ``baton.FileLock`` uses for the same path, so the
two exclude each other): released by the kernel when its holder dies, FIFO
waiting, a fencing token; a wait (``LOCK_NB`` absent, or a timeout) is
interrupted by Ctrl-C at once. The open handle also gets the path's own
``flock(2)`` after baton's lock (on POSIX), so processes still using
portalocker or filelock on that path are excluded during a migration (cost:
one ``flock`` call per lock; a wait for such a process polls every
``check_interval``).

``BoundedSemaphore(maximum, name, directory=...)`` is baton's semaphore of
``maximum`` slots named after ``directory`` and ``name``; it does not lock
portalocker's per-slot files (``{name}.{number:02d}.lock``), so mixing it
with portalocker's own semaphore on the same name does not exclude.
"""

import contextlib
import enum
import hashlib
import os
import tempfile
import threading
import time
import typing
import weakref
from types import TracebackType
from typing import IO, Any, Literal, Optional, Type, Union

from ._errors import Busy
from ._lock import Lock as _BatonLock
from .filelock import lock_name

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

_Path = Union[str, "os.PathLike[str]"]


class LockFlags(enum.IntFlag):
    """portalocker's lock flags (the values of ``fcntl.LOCK_*``)."""

    EXCLUSIVE = 2
    SHARED = 1
    NON_BLOCKING = 4
    UNBLOCK = 8


LOCK_EX = LockFlags.EXCLUSIVE
LOCK_SH = LockFlags.SHARED
LOCK_NB = LockFlags.NON_BLOCKING
LOCK_UN = LockFlags.UNBLOCK

DEFAULT_TIMEOUT = 5.0
DEFAULT_CHECK_INTERVAL = 0.25
DEFAULT_FAIL_WHEN_LOCKED = False
LOCK_METHOD = LockFlags.EXCLUSIVE | LockFlags.NON_BLOCKING


class BaseLockException(Exception):
    """The base of portalocker's exceptions; ``fh`` is the file handle."""

    LOCK_FAILED = 1

    def __init__(self, *args: Any, fh: Optional[IO[Any]] = None, **kwargs: Any) -> None:
        self.fh = fh
        super().__init__(*args)


class LockException(BaseLockException):
    """The lock could not be taken or released."""


class AlreadyLocked(LockException):
    """The lock is held by another holder (a non-blocking lock, or the
    timeout passed)."""


class FileToLarge(LockException):
    """Kept for portalocker's API; never raised here."""


# The baton lock of each locked handle (handles are kept weakly).
_held: "weakref.WeakKeyDictionary[Any, _BatonLock]" = weakref.WeakKeyDictionary()
_held_mutex = threading.Lock()


def _path_of(file_obj: Any) -> str:
    name = getattr(file_obj, "name", None)
    if isinstance(name, (str, bytes)) and not isinstance(name, int):
        return os.fsdecode(name)
    fd = file_obj if isinstance(file_obj, int) else file_obj.fileno()
    return os.readlink(f"/proc/self/fd/{fd}")


def lock(file_obj: Union[IO[Any], int], flags: int) -> None:
    """Locks the open file ``file_obj`` (``LOCK_EX`` or ``LOCK_SH``,
    ``| LOCK_NB`` not to wait): baton's lock of its path, then the file's
    own ``flock``. Raises ``AlreadyLocked`` if ``LOCK_NB`` and it is held;
    ``LOCK_UN`` unlocks."""
    if flags & LOCK_UN:
        unlock(file_obj)
        return
    _lock(file_obj, flags, 0.0 if flags & LOCK_NB else None, DEFAULT_CHECK_INTERVAL)


def _lock(file_obj: Union[IO[Any], int], flags: int, wait: Optional[float], poll: float) -> None:
    """Locks ``file_obj`` waiting at most ``wait`` seconds (None: forever,
    0: not at all): in line for baton's lock, then polling the ``flock``
    (held only by processes that do not use baton)."""
    mode: Literal["exclusive", "shared"] = "shared" if flags & LOCK_SH and not flags & LOCK_EX else "exclusive"
    fh: Any = file_obj
    handle = None if isinstance(fh, int) else fh
    start = time.monotonic()
    with _held_mutex:
        current = _held.get(fh)
    if current is not None and current.mode != mode:
        with _held_mutex:
            _held.pop(fh, None)
        current.release()
        current = None
    if current is None:
        bl = _BatonLock(lock_name(_path_of(file_obj)), mode=mode, operation="portalocker lock")
        try:
            if wait is not None and wait <= 0:
                bl.acquire(blocking=False)
            else:
                bl.acquire(timeout=wait)
        except Busy as e:
            raise AlreadyLocked(LockException.LOCK_FAILED, str(e), fh=handle) from e
        with _held_mutex:
            _held[fh] = bl
    else:
        bl = current
    if fcntl is None:
        return
    op = fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX
    try:
        while True:
            try:
                fcntl.flock(fh, op | fcntl.LOCK_NB)
                return
            except BlockingIOError as e:
                left = None if wait is None else wait - (time.monotonic() - start)
                if left is not None and left <= 0:
                    raise AlreadyLocked(LockException.LOCK_FAILED, str(e), fh=handle) from e
                time.sleep(poll if left is None else min(poll, left))
    except OSError as e:
        _forget(fh, bl)
        raise LockException(LockException.LOCK_FAILED, str(e), fh=handle) from e
    except BaseException:
        _forget(fh, bl)
        raise


def _forget(fh: Any, bl: _BatonLock) -> None:
    with _held_mutex:
        _held.pop(fh, None)
    if bl.held:
        bl.release()


def unlock(file_obj: Union[IO[Any], int]) -> None:
    """Unlocks ``file_obj`` (nothing happens if it is not locked)."""
    fh: Any = file_obj
    if fcntl is not None:
        with contextlib.suppress(OSError, ValueError):
            fcntl.flock(fh, fcntl.LOCK_UN)
    with _held_mutex:
        bl = _held.pop(fh, None)
    if bl is not None and bl.held:
        bl.release()


class LockBase:
    """What portalocker's lock classes share: timeouts and ``with``."""

    def __init__(
        self,
        timeout: Optional[float] = None,
        check_interval: Optional[float] = None,
        fail_when_locked: Optional[bool] = None,
    ) -> None:
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.check_interval = DEFAULT_CHECK_INTERVAL if check_interval is None else check_interval
        self.fail_when_locked = DEFAULT_FAIL_WHEN_LOCKED if fail_when_locked is None else fail_when_locked

    def _timeout_generator(self, timeout: Optional[float], check_interval: Optional[float]) -> typing.Iterator[int]:
        f_timeout = self.timeout if timeout is None else timeout
        f_check = self.check_interval if check_interval is None else check_interval
        start = time.perf_counter()
        i = 0
        while True:
            yield i
            i += 1
            left = f_timeout - (time.perf_counter() - start)
            if left <= 0:
                return
            time.sleep(min(f_check, left))


class Lock(LockBase):
    """portalocker's ``Lock``: opens ``filename`` (``mode``) and locks it;
    ``acquire()`` returns the open handle."""

    def __init__(
        self,
        filename: _Path,
        mode: str = "a",
        timeout: Optional[float] = None,
        check_interval: float = DEFAULT_CHECK_INTERVAL,
        fail_when_locked: bool = DEFAULT_FAIL_WHEN_LOCKED,
        flags: int = LOCK_METHOD,
        **file_open_kwargs: Any,
    ) -> None:
        if "w" in mode:
            truncate = True
            mode = mode.replace("w", "a")
        else:
            truncate = False
        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        elif not (flags & LOCK_NB):
            import warnings

            warnings.warn("timeout has no effect in blocking mode", stacklevel=1)
        self.fh: Optional[IO[Any]] = None
        self.filename = str(filename)
        self.mode = mode
        self.truncate = truncate
        self.flags = flags
        self.file_open_kwargs = file_open_kwargs
        super().__init__(timeout, check_interval, fail_when_locked)

    def acquire(
        self,
        timeout: Optional[float] = None,
        check_interval: Optional[float] = None,
        fail_when_locked: Optional[bool] = None,
    ) -> IO[Any]:
        """Opens and locks the file; returns the handle (the same one if
        already locked). Raises ``AlreadyLocked`` if not acquired in time
        (at once with ``fail_when_locked``)."""
        if fail_when_locked is None:
            fail_when_locked = self.fail_when_locked
        if self.fh:
            return self.fh
        fh: IO[Any] = open(self.filename, self.mode, **self.file_open_kwargs)  # noqa: SIM115
        try:
            if not (self.flags & LOCK_NB):
                lock(fh, self.flags)
            elif fail_when_locked:
                _lock(fh, self.flags, 0.0, self.check_interval)
            else:
                wait = self.timeout if timeout is None else timeout
                poll = self.check_interval if check_interval is None else check_interval
                _lock(fh, self.flags, max(0.0, wait), poll)
        except BaseException:
            fh.close()
            raise
        if self.truncate:
            fh.seek(0)
            fh.truncate(0)
        self.fh = fh
        return fh

    def release(self) -> None:
        """Unlocks and closes the file (nothing happens if not locked)."""
        fh, self.fh = self.fh, None
        if fh is not None:
            unlock(fh)
            fh.close()

    def __enter__(self) -> IO[Any]:
        return self.acquire()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


class RLock(Lock):
    """portalocker's ``RLock``: ``Lock`` with a counter; each ``acquire``
    needs its ``release``."""

    def __init__(
        self,
        filename: _Path,
        mode: str = "a",
        timeout: float = DEFAULT_TIMEOUT,
        check_interval: float = DEFAULT_CHECK_INTERVAL,
        fail_when_locked: bool = False,
        flags: int = LOCK_METHOD,
    ) -> None:
        super().__init__(filename, mode, timeout, check_interval, fail_when_locked, flags)
        self._acquire_count = 0

    def acquire(
        self,
        timeout: Optional[float] = None,
        check_interval: Optional[float] = None,
        fail_when_locked: Optional[bool] = None,
    ) -> IO[Any]:
        if self._acquire_count >= 1 and self.fh is not None:
            fh = self.fh
        else:
            fh = super().acquire(timeout, check_interval, fail_when_locked)
        self._acquire_count += 1
        return fh

    def release(self) -> None:
        if self._acquire_count == 0:
            raise LockException("Cannot release more times than acquired")
        if self._acquire_count == 1:
            super().release()
        self._acquire_count -= 1


class BoundedSemaphore(LockBase):
    """portalocker's ``BoundedSemaphore``: at most ``maximum`` holders of
    ``name`` at once (baton's semaphore; see the module's docs)."""

    def __init__(
        self,
        maximum: int,
        name: str = "bounded_semaphore",
        filename_pattern: str = "{name}.{number:02d}.lock",
        directory: str = tempfile.gettempdir(),
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        check_interval: Optional[float] = DEFAULT_CHECK_INTERVAL,
        fail_when_locked: Optional[bool] = True,
    ) -> None:
        self.maximum = maximum
        self.name = name
        self.filename_pattern = filename_pattern
        self.directory = directory
        self.lock: Optional[_BatonLock] = None
        self._key = "semaphore/" + hashlib.sha256(os.fsencode(os.path.join(os.path.abspath(directory), name))).hexdigest()[:40]
        super().__init__(timeout, check_interval, fail_when_locked)

    def acquire(
        self,
        timeout: Optional[float] = None,
        check_interval: Optional[float] = None,
        fail_when_locked: Optional[bool] = None,
    ) -> Optional[_BatonLock]:
        """Takes a slot; returns the lock, or None when none was free in
        time and ``fail_when_locked`` is false (else ``AlreadyLocked``)."""
        assert not self.lock, "Already locked"
        if fail_when_locked is None:
            fail_when_locked = self.fail_when_locked
        wait = self.timeout if timeout is None else timeout
        bl = _BatonLock(self._key, slots=self.maximum, operation=f"semaphore {self.name}")
        try:
            if wait <= 0:
                bl.acquire(blocking=False)
            else:
                bl.acquire(timeout=wait)
        except Busy as e:
            if fail_when_locked:
                raise AlreadyLocked(e) from e
            return None
        self.lock = bl
        return bl

    def release(self) -> None:
        """Releases the slot (nothing happens if none is held)."""
        bl, self.lock = self.lock, None
        if bl is not None and bl.held:
            bl.release()

    def __enter__(self) -> Optional[_BatonLock]:
        return self.acquire()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()


def open_atomic(filename: _Path, binary: bool = True) -> typing.ContextManager[IO[Any]]:
    """portalocker's ``open_atomic``: writes a temporary file next to
    ``filename`` and renames it into place on success."""

    @contextlib.contextmanager
    def cm() -> typing.Iterator[IO[Any]]:
        path = os.fspath(filename)
        assert not os.path.exists(path), f"{path} exists already"
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d)
        fh = os.fdopen(fd, "wb" if binary else "w")
        try:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            os.rename(tmp, path)
        finally:
            if not fh.closed:
                fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)

    return cm()


__all__ = [
    "LOCK_EX",
    "LOCK_NB",
    "LOCK_SH",
    "LOCK_UN",
    "AlreadyLocked",
    "BaseLockException",
    "BoundedSemaphore",
    "FileToLarge",
    "Lock",
    "LockException",
    "LockFlags",
    "RLock",
    "lock",
    "open_atomic",
    "unlock",
]
