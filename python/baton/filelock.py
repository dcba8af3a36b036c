"""filelock's API over baton's locks: change ``from filelock import
FileLock`` to ``from baton import FileLock`` (or ``from baton.filelock
import ...``) and nothing else.

Same arguments, return values and behaviour as filelock 3.x: ``timeout``
(-1 waits forever, 0 tries once), ``blocking``, ``thread_local`` (each
thread its own hold, the default), ``is_singleton``, a re-entrancy counter
(``lock_counter``; each ``acquire`` needs its ``release``), ``is_locked``,
``with lock.acquire(timeout=10):``, ``release()`` of a lock not held does
nothing, ``release(force=True)``, ``Timeout`` (a ``TimeoutError`` and a
``baton.Busy``). Underneath, baton's guarantees: the lock is released by the
kernel when its holder dies, waiters are served first come first served,
every grant has a fencing token (``lock.token``) and its holder is recorded
(``lock.previous_holder`` when the one before died); ``Ctrl-C`` ends a wait
at once, holding nothing.

The lock is baton's lock named ``filelock/<sha256 of the absolute path>``
(in the baton dir: ``$BATON_DIR``, else this user's dir), not a byte range
of the file itself. For a migration in steps, while other processes still
lock the same path with filelock or portalocker, a holder also takes the
path's own ``flock(2)`` after baton's lock (on POSIX; ``interop=False``
turns it off): those processes are excluded too. Cost: the file is created
at the path (as filelock does) and each first acquisition opens it and
locks it (a few microseconds uncontended); a wait for such a process polls
every ``poll_interval``, as filelock does.
"""

import contextlib
import hashlib
import logging
import os
import threading
import time
import warnings
import weakref
from abc import ABCMeta, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Type, TypeVar, Union

from ._baton import Cancel
from ._errors import Busy, Cancelled
from ._lock import Lock

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Executor

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__version__ = "3.16.1"

_Path = Union[str, "os.PathLike[str]"]
_T = TypeVar("_T", bound="BaseFileLock")

# filelock's logger: a program's logging configuration for it keeps working.
_LOGGER = logging.getLogger("filelock")


class Timeout(Busy):
    """Raised when the lock could not be acquired in time (filelock's
    ``Timeout``; also a ``TimeoutError`` and a ``baton.Busy``)."""

    def __init__(self, lock_file: str) -> None:
        super().__init__()
        self._lock_file = lock_file

    def __reduce__(self) -> Any:
        return self.__class__, (self._lock_file,)

    def __str__(self) -> str:
        return f"The file lock '{self._lock_file}' could not be acquired."

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.lock_file!r})"

    @property
    def lock_file(self) -> str:
        """The path of the lock that could not be acquired."""
        return self._lock_file


def lock_name(path: _Path) -> str:
    """The baton lock name of the file lock at ``path``."""
    full = os.path.abspath(os.fspath(path))
    full = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
    return "filelock/" + hashlib.sha256(os.fsencode(full)).hexdigest()[:40]


class _Context:
    """One hold (per thread, or shared): the baton lock, the path's flock and
    the counter."""

    def __init__(self) -> None:
        self.lock: Optional[Lock] = None
        self.fd: Optional[int] = None
        self.counter = 0


class _ThreadContext(threading.local, _Context):
    pass


class AcquireReturnProxy:
    """What ``acquire`` returns: ``with lock.acquire(timeout=10):``."""

    def __init__(self, lock: "BaseFileLock") -> None:
        self.lock = lock

    def __enter__(self) -> "BaseFileLock":
        return self.lock

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.lock.release()


class _LockMeta(ABCMeta):
    """Makes ``is_singleton=True`` return the path's existing object,
    without calling ``__init__`` again (as filelock does)."""

    def __call__(cls, lock_file: _Path, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("is_singleton", False):
            return super().__call__(lock_file, *args, **kwargs)
        key = os.path.abspath(os.fspath(lock_file))
        instances: "weakref.WeakValueDictionary[str, BaseFileLock]" = cls._instances  # type: ignore[attr-defined]
        with _singletons:
            found = instances.get(key)
            if found is None:
                made: BaseFileLock = super().__call__(lock_file, *args, **kwargs)
                instances[key] = made
                return made
        if not isinstance(found, cls):
            raise TypeError(f"{key} is locked by another lock class")
        names = ("timeout", "mode", "thread_local")
        wanted = dict(zip(names, args))
        wanted.update({k: v for k, v in kwargs.items() if k in (*names, "blocking")})
        have = {"timeout": found._timeout, "mode": found._mode, "thread_local": found._thread_local, "blocking": found._blocking}
        diff = {k: (have[k], v) for k, v in wanted.items() if have[k] != v}
        if diff:
            msg = "Singleton lock instances cannot be initialized with differing arguments"
            msg += "\nNon-matching arguments: " + ", ".join(f"{k} (existing: {a}, new: {b})" for k, (a, b) in diff.items())
            raise ValueError(msg)
        return found


_singletons = threading.Lock()


class BaseFileLock(contextlib.ContextDecorator, metaclass=_LockMeta):
    """filelock's ``FileLock`` over baton's lock (see the module's docs)."""

    _instances: "weakref.WeakValueDictionary[str, BaseFileLock]"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances = weakref.WeakValueDictionary()

    @abstractmethod
    def _kind(self) -> str:
        """What kind of file lock this is (for messages)."""

    def __init__(
        self,
        lock_file: _Path,
        timeout: float = -1,
        mode: int = 0o644,
        thread_local: bool = True,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
        baton_dir: Optional[_Path] = None,
        interop: bool = True,
        **kwargs: Any,
    ) -> None:
        self._lock_file = os.fspath(lock_file)
        self._timeout = float(timeout)
        self._mode = mode
        self._thread_local = bool(thread_local)
        self._blocking = blocking
        self._is_singleton = is_singleton
        self._baton_dir = baton_dir
        self._interop = interop and fcntl is not None
        self._name = lock_name(lock_file)
        self._context: _Context = _ThreadContext() if thread_local else _Context()

    def is_thread_local(self) -> bool:
        """Whether each thread has its own hold."""
        return self._thread_local

    @property
    def is_singleton(self) -> bool:
        """Whether one object is kept per path."""
        return self._is_singleton

    @property
    def lock_file(self) -> str:
        """The path of the lock."""
        return self._lock_file

    @property
    def timeout(self) -> float:
        """The default timeout in seconds (-1: wait forever)."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: Union[float, str]) -> None:
        self._timeout = float(value)

    @property
    def blocking(self) -> bool:
        """Whether ``acquire`` waits by default."""
        return self._blocking

    @blocking.setter
    def blocking(self, value: bool) -> None:
        self._blocking = value

    @property
    def mode(self) -> int:
        """The permissions of the lock file."""
        return self._mode

    @property
    def is_locked(self) -> bool:
        """Whether the lock is held (by this thread, with ``thread_local``)."""
        return self._context.counter > 0

    @property
    def lock_counter(self) -> int:
        """How many ``acquire`` calls wait for their ``release``."""
        return self._context.counter

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the current hold, else None."""
        lk = self._context.lock
        return lk.token if lk is not None and self.is_locked else None

    @property
    def previous_holder(self) -> Optional[Dict[str, Any]]:
        """The holder before this one when it ended without releasing."""
        lk = self._context.lock
        return lk.previous_holder if lk is not None and self.is_locked else None

    def _baton_lock(self) -> Lock:
        ctx = self._context
        if ctx.lock is None:
            ctx.lock = Lock(self._name, baton_dir=self._baton_dir, operation=f"file lock {self._lock_file}")
        return ctx.lock

    def acquire(
        self,
        timeout: Optional[float] = None,
        poll_interval: float = 0.05,
        *,
        poll_intervall: Optional[float] = None,
        blocking: Optional[bool] = None,
        cancel_check: Optional[Callable[[], bool]] = None,
        cancel: Optional[Cancel] = None,
    ) -> AcquireReturnProxy:
        """Acquires the lock (or counts one more hold): waits ``timeout``
        seconds (default: the object's; -1 waits forever, 0 tries once), not
        at all with ``blocking=False``. Raises ``Timeout`` if not acquired in
        time."""
        ctx = self._context
        if ctx.counter > 0:
            ctx.counter += 1
            return AcquireReturnProxy(self)
        if timeout is None:
            timeout = self._timeout
        if blocking is None:
            blocking = self._blocking
        if poll_intervall is not None:
            warnings.warn(
                "use poll_interval instead of poll_intervall", DeprecationWarning, stacklevel=2
            )
            poll_interval = poll_intervall
        deadline = None if timeout < 0 else time.monotonic() + timeout
        lock_id, lock_filename = id(self), self._lock_file
        _LOGGER.debug("Attempting to acquire lock %s on %s", lock_id, lock_filename)
        lk = self._baton_lock()
        watcher = None
        if cancel_check is not None:
            cancel = cancel or Cancel()
            watcher = _watch(cancel_check, cancel)
        try:
            if not blocking or timeout == 0:
                lk.acquire(blocking=False)
            else:
                lk.acquire(timeout=None if deadline is None else max(0.0, timeout), cancel=cancel)
        except (Cancelled, Busy):
            _LOGGER.debug("Timeout on acquiring lock %s on %s", lock_id, lock_filename)
            raise Timeout(self._lock_file) from None
        finally:
            if watcher is not None:
                watcher()
        stop: Optional[Callable[[], bool]] = None
        if cancel_check is not None or cancel is not None:
            c, cc = cancel, cancel_check
            stop = lambda: (c is not None and c.cancelled) or (cc is not None and cc())  # noqa: E731
        try:
            if self._interop:
                ctx.fd = self._flock(deadline if blocking else time.monotonic(), poll_interval, stop)
        except BaseException:
            lk.release()
            raise
        ctx.counter = 1
        _LOGGER.debug("Lock %s acquired on %s", lock_id, lock_filename)
        return AcquireReturnProxy(self)

    def _flock(self, deadline: Optional[float], poll: float, stop: Optional[Callable[[], bool]]) -> int:
        assert fcntl is not None
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        parent = os.path.dirname(self._lock_file)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(self._lock_file, flags, self._mode)
        try:
            with contextlib.suppress(PermissionError):
                os.fchmod(fd, self._mode)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    pass
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout(self._lock_file)
                if stop is not None and stop():
                    raise Timeout(self._lock_file)
                time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
        except BaseException:
            os.close(fd)
            raise

    def release(self, force: bool = False) -> None:
        """Counts one hold less, and releases the lock at the last (at once
        with ``force``). Does nothing when not held."""
        ctx = self._context
        if ctx.counter == 0:
            return
        ctx.counter = 0 if force else ctx.counter - 1
        if ctx.counter > 0:
            return
        lock_id, lock_filename = id(self), self._lock_file
        _LOGGER.debug("Attempting to release lock %s on %s", lock_id, lock_filename)
        fd, ctx.fd = ctx.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing drops the flock
        if ctx.lock is not None and ctx.lock.held:
            ctx.lock.release()
        _LOGGER.debug("Lock %s released on %s", lock_id, lock_filename)

    def __enter__(self: _T) -> _T:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release(force=True)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self._lock_file!r}, locked={self.is_locked})"


def _watch(check: Callable[[], bool], cancel: Cancel) -> Callable[[], None]:
    """Polls ``check`` every 10 ms in a thread; cancels ``cancel`` when it is
    true. Returns the function that stops the watcher."""
    done = threading.Event()

    def run() -> None:
        while not done.wait(0.01):
            if check():
                cancel.cancel()
                return

    t = threading.Thread(target=run, daemon=True, name="baton-cancel-check")
    t.start()

    def stop() -> None:
        done.set()
        t.join()

    return stop


class FileLock(BaseFileLock):
    """filelock's ``FileLock`` over baton's lock (see the module's docs)."""

    def _kind(self) -> str:
        return "file lock"


UnixFileLock = FileLock
WindowsFileLock = FileLock
SoftFileLock = FileLock


class AsyncAcquireReturnProxy:
    """What ``AsyncFileLock.acquire`` returns: ``async with await
    lock.acquire():``, or ``async with lock.acquire()``-free forms."""

    def __init__(self, lock: "BaseAsyncFileLock") -> None:
        self.lock = lock

    async def __aenter__(self) -> "BaseAsyncFileLock":
        return self.lock

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.lock.release()


class BaseAsyncFileLock(BaseFileLock):
    """filelock's ``AsyncFileLock``: the same lock, awaited. A wait runs in
    an executor thread and never blocks the event loop; cancelling the task
    cancels the wait, and a grant that raced the cancel is released, so
    nothing is held afterwards."""

    def __init__(
        self,
        lock_file: _Path,
        timeout: float = -1,
        mode: int = 0o644,
        thread_local: bool = False,
        *,
        blocking: bool = True,
        is_singleton: bool = False,
        loop: "Optional[asyncio.AbstractEventLoop]" = None,
        run_in_executor: bool = True,
        executor: "Optional[Executor]" = None,
        **kwargs: Any,
    ) -> None:
        if thread_local and run_in_executor:
            raise ValueError("run_in_executor is not supported when thread_local is True")
        super().__init__(lock_file, timeout, mode, thread_local, blocking=blocking, is_singleton=is_singleton, **kwargs)
        self._loop = loop
        self._run_in_executor = run_in_executor
        self._executor = executor

    @property
    def run_in_executor(self) -> bool:
        """Whether waits run in an executor (always, in effect)."""
        return self._run_in_executor

    @property
    def executor(self) -> "Optional[Executor]":
        """The executor waits run in (None: the loop's default)."""
        return self._executor

    @executor.setter
    def executor(self, value: "Optional[Executor]") -> None:
        self._executor = value

    @property
    def loop(self) -> "Optional[asyncio.AbstractEventLoop]":
        """The event loop given, if any."""
        return self._loop

    async def acquire(  # type: ignore[override]
        self,
        timeout: Optional[float] = None,
        poll_interval: float = 0.05,
        *,
        blocking: Optional[bool] = None,
    ) -> AsyncAcquireReturnProxy:
        """Acquires the lock without blocking the event loop (see
        ``FileLock.acquire``). Cancelling the awaiting task leaves nothing
        held."""
        if self._context.counter > 0:
            self._context.counter += 1
            return AsyncAcquireReturnProxy(self)
        sync = super().acquire
        if not self._run_in_executor:
            sync(timeout, poll_interval, blocking=blocking)
            return AsyncAcquireReturnProxy(self)
        import asyncio

        loop = asyncio.get_running_loop()
        cancel = Cancel()
        fut = loop.run_in_executor(
            self._executor, lambda: sync(timeout, poll_interval, blocking=blocking, cancel=cancel)
        )
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            cancel.cancel()
            with contextlib.suppress(BaseException):
                await fut
                # The grant raced the cancel: let it go.
                BaseFileLock.release(self, force=True)
            raise
        except Timeout:
            raise
        return AsyncAcquireReturnProxy(self)

    async def release(self, force: bool = False) -> None:  # type: ignore[override]
        """Releases the lock (see ``FileLock.release``)."""
        BaseFileLock.release(self, force)

    def __enter__(self) -> Any:
        raise NotImplementedError("Do not use `with` for asyncio locks, use `async with` instead.")

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        raise NotImplementedError("Do not use `with` for asyncio locks, use `async with` instead.")

    async def __aenter__(self) -> "BaseAsyncFileLock":
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            BaseFileLock.release(self, force=True)


class AsyncFileLock(BaseAsyncFileLock):
    """filelock's ``AsyncFileLock`` over baton's lock."""

    def _kind(self) -> str:
        return "asyncio file lock"


AsyncUnixFileLock = AsyncFileLock
AsyncWindowsFileLock = AsyncFileLock
AsyncSoftFileLock = AsyncFileLock

__all__ = [
    "AcquireReturnProxy",
    "AsyncAcquireReturnProxy",
    "AsyncFileLock",
    "AsyncSoftFileLock",
    "AsyncUnixFileLock",
    "AsyncWindowsFileLock",
    "BaseAsyncFileLock",
    "BaseFileLock",
    "FileLock",
    "SoftFileLock",
    "Timeout",
    "UnixFileLock",
    "WindowsFileLock",
    "__version__",
    "lock_name",
]
