"""``baton.Lock``: the native lock (``baton._baton.Lock``) with ``acquire()``
usable in ``with`` and optional re-entrancy for the holding thread."""

import os
import threading
from types import TracebackType
from typing import Literal, Optional, Type, Union

from . import _baton
from ._errors import Error

_Path = Union[str, "os.PathLike[str]"]


class Acquired(int):
    """What ``Lock.acquire`` returns: the fencing token (an ``int``), which
    is also a context manager that releases the lock on exit::

        with lock.acquire(timeout=10):
            ...
    """

    _lock: "Lock"

    def __enter__(self) -> "Lock":
        return self._lock

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._lock.release()


class Lock(_baton.Lock):
    """A named lock shared by every process of the user on the machine (and
    by the ``baton`` command): exclusive, shared, or a semaphore of ``slots``.

    One object is one holder: ``acquire()`` waits in line (first come, first
    served) and returns the fencing token (an ``Acquired``, usable as
    ``with lock.acquire(timeout=10):``); ``release()`` lets go; ``with
    lock:`` does both. Threads that want to exclude each other each use
    their own ``Lock`` object.

    ``reentrant=True``: the thread holding the lock through this object may
    acquire it again (a counter; each ``acquire`` needs its ``release``, and
    the lock is let go at the last one). Otherwise acquiring it again
    through the same object raises ``baton.Error``.

    Raises ``baton.Error`` for an invalid name, mode or slot count, or a
    baton dir that cannot be used (it is resolved here, created if needed).
    """

    __slots__ = ("_reentrant", "_depth", "_thread")

    _reentrant: bool
    _depth: int
    _thread: Optional[int]

    def __new__(
        cls,
        name: str,
        *,
        mode: Literal["exclusive", "shared"] = "exclusive",
        slots: Optional[int] = None,
        baton_dir: Optional[_Path] = None,
        owner: Optional[str] = None,
        operation: Optional[str] = None,
        reentrant: bool = False,
    ) -> "Lock":
        self = super().__new__(
            cls,
            name,
            mode=mode,
            slots=slots,
            baton_dir=baton_dir,
            owner=owner,
            operation=operation,
        )
        self._reentrant = bool(reentrant)
        self._depth = 0
        self._thread = None
        return self

    @property
    def reentrant(self) -> bool:
        """Whether the holding thread may acquire the lock again."""
        return self._reentrant

    @property
    def depth(self) -> int:
        """How many times the lock is held through this object (0 or 1
        unless ``reentrant``)."""
        return self._depth if self.held else 0

    def acquire(
        self,
        timeout: Optional[float] = None,
        blocking: bool = True,
        *,
        cancel: Optional[_baton.Cancel] = None,
    ) -> Acquired:
        """Waits in line for the lock: forever (``timeout=None`` or
        ``float("inf")``), at most ``timeout`` seconds, or not at all
        (``blocking=False``, or ``timeout=0``). Returns the fencing token as
        an ``Acquired`` (an ``int`` and a context manager). Raises
        ``baton.Busy`` if not acquired in time, ``baton.Cancelled`` if
        ``cancel`` was cancelled, ``KeyboardInterrupt`` on Ctrl-C (within
        milliseconds, holding nothing), ``baton.Error`` if this object
        already holds the lock (unless ``reentrant`` and this is the holding
        thread) or the lock cannot be used."""
        me = threading.get_ident()
        if self._reentrant and self._depth > 0 and self._thread == me and self.held:
            self._depth += 1
            token = self.token
            return self._acquired(0 if token is None else token)
        token = super().acquire(timeout, blocking, cancel=cancel)
        self._depth = 1
        self._thread = me
        return self._acquired(token)

    def _acquired(self, token: int) -> Acquired:
        a = Acquired(token)
        a._lock = self
        return a

    def release(self) -> None:
        """Releases the lock (with ``reentrant``, the last of the holding
        thread's acquisitions does). Raises ``baton.Error`` if this process
        does not hold it through this object (in a forked child, it never
        does)."""
        if self._reentrant and self._depth > 1 and self.held:
            if self._thread != threading.get_ident():
                raise Error(f"lock '{self.name}' is held by another thread through this Lock object")
            self._depth -= 1
            return
        self._depth = 0
        self._thread = None
        super().release()

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.held:
            self.release()
        else:
            super().__exit__(exc_type, exc, tb)
