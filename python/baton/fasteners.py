"""fasteners' process locks over baton's locks: change ``from fasteners
import InterProcessLock`` to ``from baton.fasteners import InterProcessLock``.

``InterProcessLock`` and ``InterProcessReaderWriterLock`` with fasteners'
arguments and return values (``acquire`` returns False when not acquired in
time; ``release`` of a lock not held raises ``threading.ThreadError``), and
the ``interprocess_locked`` / ``interprocess_read_locked`` /
``interprocess_write_locked`` decorators. Each lock is baton's lock of the
path (the name ``baton.FileLock`` uses), shared for readers; then, for
processes still using fasteners on the path, the path's own ``flock(2)``
(``lockfile``, ``trylock()``, ``unlock()`` as fasteners has them).
"""

import contextlib
import functools
import os
import threading
import time
from types import TracebackType
from typing import IO, Any, Callable, Iterator, Literal, Optional, Type, TypeVar

from ._errors import Busy
from ._lock import Lock
from .filelock import lock_name

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

_F = TypeVar("_F", bound=Callable[..., Any])


class _PathLock:
    """baton's lock of a path, then the path's flock."""

    _flock_op = 2  # LOCK_EX
    _mode: Literal["exclusive", "shared"] = "exclusive"

    def __init__(self, path: "os.PathLike[str] | str", sleep_func: Callable[[float], None] = time.sleep, logger: Any = None) -> None:
        self.lockfile: Optional[IO[Any]] = None
        self.path = os.fspath(path)
        self.sleep_func = sleep_func
        self.logger = logger
        self.acquired = False
        self._baton: Optional[Lock] = None

    def _lock(self, blocking: bool, delay: float, max_delay: float, timeout: Optional[float]) -> bool:
        if delay < 0:
            raise ValueError("Delay must be greater than or equal to zero")
        if timeout is not None and timeout < 0:
            raise ValueError("Timeout must be greater than or equal to zero")
        if delay >= max_delay:
            max_delay = delay
        start = time.monotonic()
        bl = Lock(lock_name(self.path), mode=self._mode, operation=f"fasteners lock {self.path}")
        try:
            if not blocking:
                bl.acquire(blocking=False)
            else:
                bl.acquire(timeout=timeout)
        except Busy:
            return False
        try:
            self._do_open()
            while True:
                try:
                    self._flock(self._flock_op | 4)  # | LOCK_NB
                    break
                except BlockingIOError:
                    left = None if timeout is None else timeout - (time.monotonic() - start)
                    if not blocking or (left is not None and left <= 0):
                        self._close()
                        bl.release()
                        return False
                    self.sleep_func(delay if left is None else min(delay, left))
                    delay = min(delay * 2, max_delay)
        except BaseException:
            self._close()
            bl.release()
            raise
        self._baton = bl
        self.acquired = True
        return True

    def _do_open(self) -> None:
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if self.lockfile is None or self.lockfile.closed:
            self.lockfile = open(self.path, "a")  # noqa: SIM115

    def _flock(self, op: int) -> None:
        if fcntl is not None and self.lockfile is not None:
            fcntl.flock(self.lockfile, op)

    def _close(self) -> None:
        if self.lockfile is not None:
            with contextlib.suppress(OSError):
                self.lockfile.close()
        self.lockfile = None

    def _unlock(self) -> None:
        if not self.acquired:
            raise threading.ThreadError("Unable to release an unacquired lock")
        with contextlib.suppress(OSError, ValueError):
            self._flock(8)  # LOCK_UN
        self._close()
        bl, self._baton = self._baton, None
        self.acquired = False
        if bl is not None and bl.held:
            bl.release()

    def trylock(self) -> None:
        """fasteners' ``trylock``: a non-blocking flock of ``lockfile``
        (raises ``IOError`` when held)."""
        self._flock(self._flock_op | 4)

    def unlock(self) -> None:
        """fasteners' ``unlock``: unlocks ``lockfile``'s flock."""
        self._flock(8)

    def exists(self) -> bool:
        """Whether the lock file exists."""
        return os.path.exists(self.path)


class InterProcessLock(_PathLock):
    """fasteners' ``InterProcessLock`` over baton's lock."""

    def acquire(self, blocking: bool = True, delay: float = 0.01, max_delay: float = 0.1, timeout: Optional[float] = None) -> bool:
        """Acquires the lock; False if not acquired (``blocking=False``, or
        ``timeout`` seconds passed)."""
        return self._lock(blocking, delay, max_delay, timeout)

    def release(self) -> None:
        """Releases the lock; ``threading.ThreadError`` if not held."""
        self._unlock()

    def __enter__(self) -> "InterProcessLock":
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()


class _ReadSide(_PathLock):
    _flock_op = 1  # LOCK_SH
    _mode: Literal["exclusive", "shared"] = "shared"


class InterProcessReaderWriterLock:
    """fasteners' ``InterProcessReaderWriterLock`` over baton's shared lock:
    any number of readers, or one writer."""

    def __init__(self, path: "os.PathLike[str] | str", sleep_func: Callable[[float], None] = time.sleep, logger: Any = None) -> None:
        self.path = os.fspath(path)
        self._read = _ReadSide(path, sleep_func, logger)
        self._write = _PathLock(path, sleep_func, logger)

    def acquire_read_lock(self, blocking: bool = True, delay: float = 0.01, max_delay: float = 0.1, timeout: Optional[float] = None) -> bool:
        """Acquires a read hold; False if not acquired in time."""
        return self._read._lock(blocking, delay, max_delay, timeout)

    def acquire_write_lock(self, blocking: bool = True, delay: float = 0.01, max_delay: float = 0.1, timeout: Optional[float] = None) -> bool:
        """Acquires the write hold; False if not acquired in time."""
        return self._write._lock(blocking, delay, max_delay, timeout)

    def release_read_lock(self) -> None:
        """Releases the read hold; ``threading.ThreadError`` if not held."""
        self._read._unlock()

    def release_write_lock(self) -> None:
        """Releases the write hold; ``threading.ThreadError`` if not held."""
        self._write._unlock()

    @contextlib.contextmanager
    def read_lock(self, delay: float = 0.01, max_delay: float = 0.1) -> Iterator[None]:
        """Holds a read hold for the ``with`` block."""
        self.acquire_read_lock(blocking=True, delay=delay, max_delay=max_delay)
        try:
            yield
        finally:
            self.release_read_lock()

    @contextlib.contextmanager
    def write_lock(self, delay: float = 0.01, max_delay: float = 0.1) -> Iterator[None]:
        """Holds the write hold for the ``with`` block."""
        self.acquire_write_lock(blocking=True, delay=delay, max_delay=max_delay)
        try:
            yield
        finally:
            self.release_write_lock()


def interprocess_locked(path: str) -> Callable[[_F], _F]:
    """Runs the decorated function holding ``InterProcessLock(path)``."""

    def decorator(f: _F) -> _F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with InterProcessLock(path):
                return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def interprocess_read_locked(path: str) -> Callable[[_F], _F]:
    """Runs the decorated function holding a read hold of ``path``."""

    def decorator(f: _F) -> _F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with InterProcessReaderWriterLock(path).read_lock():
                return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def interprocess_write_locked(path: str) -> Callable[[_F], _F]:
    """Runs the decorated function holding the write hold of ``path``."""

    def decorator(f: _F) -> _F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with InterProcessReaderWriterLock(path).write_lock():
                return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


__all__ = [
    "InterProcessLock",
    "InterProcessReaderWriterLock",
    "interprocess_locked",
    "interprocess_read_locked",
    "interprocess_write_locked",
]
