"""Type stubs of baton's native module (re-exported by ``baton``)."""

import os
import pathlib
from types import TracebackType
from typing import Any, Dict, List, Literal, Optional, Sequence, Type, TypeVar, Union

_Path = Union[str, "os.PathLike[str]"]
_L = TypeVar("_L", bound="Lock")

class Lock:
    """A named lock shared by every process of the user on the machine (and
    by the ``baton`` command): exclusive, shared, or a semaphore of ``slots``.

    One object is one holder: ``acquire()`` waits in line (first come, first
    served) and returns the fencing token; ``release()`` lets go; ``with
    lock:`` does both. Threads that want to exclude each other each use
    their own ``Lock`` object.

    Raises ``baton.Error`` for an invalid name, mode or slot count, or a
    baton dir that cannot be used (it is resolved here, created if needed).
    """

    def __new__(
        cls: Type[_L],
        name: str,
        *,
        mode: Literal["exclusive", "shared"] = "exclusive",
        slots: Optional[int] = None,
        baton_dir: Optional[_Path] = None,
        owner: Optional[str] = None,
        operation: Optional[str] = None,
    ) -> _L: ...
    def acquire(
        self,
        timeout: Optional[float] = None,
        blocking: bool = True,
        *,
        cancel: Optional["Cancel"] = None,
    ) -> int:
        """Waits in line for the lock: forever (``timeout=None`` or
        ``float("inf")``), at most
        ``timeout`` seconds, or not at all (``blocking=False``, or
        ``timeout=0``). Returns the fencing token. Raises ``baton.Busy`` if
        not acquired in time, ``baton.Cancelled`` if ``cancel`` was
        cancelled, ``KeyboardInterrupt`` on Ctrl-C, ``baton.Error`` if this object already holds
        the lock or the lock cannot be used (another mode or slot count in
        use, an ancestor process holds it, I/O)."""
    def release(self) -> None:
        """Releases the lock. Raises ``baton.Error`` if this process does not
        hold it through this object (in a forked child, it never does)."""
    def __enter__(self) -> "Lock": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    @property
    def held(self) -> bool:
        """Whether this process holds the lock through this object."""
    @property
    def token(self) -> Optional[int]:
        """The fencing token of the current grant, or None when not held."""
    @property
    def previous_holder(self) -> Optional[Dict[str, Any]]:
        """The holder before the current grant if it ended without releasing
        (died, or its script exited): its work may be half done."""
    @property
    def previous_outcome(self) -> Optional[str]:
        """How the holder before the current grant ended: "released",
        "failed:<code>", "killed:<signal>" or "died"; None when not held or
        for the first grant of the lock."""
    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> Literal["exclusive", "shared"]: ...
    @property
    def slots(self) -> Optional[int]: ...
    @property
    def baton_dir(self) -> "pathlib.Path": ...

class Cancel:
    """Cancels waits: ``lock.acquire(cancel=c)`` raises ``baton.Cancelled``
    (holding nothing) once ``c.cancel()`` is called, from any thread."""

    def __init__(self) -> None: ...
    def cancel(self) -> None:
        """Cancels every wait using this handle, now and later (idempotent)."""
    @property
    def cancelled(self) -> bool: ...

def status(name: str, baton_dir: Optional[_Path] = None) -> Dict[str, Any]:
    """What ``baton lock status NAME --json`` prints, as a dict: name, held,
    mode, max, holder, holders, waiters, last_holder_died, last_holder,
    previous_holder_died, previous_holder, last_token, content, ..."""

class Reservation:
    """Paths of a repository reserved by ``baton.reserve(...)``: released by
    ``release()``, by leaving ``with``, when the object is collected, or by
    the kernel when this process dies."""

    def release(self) -> None:
        """Releases it. Raises ``baton.Error`` if it was released already
        (in a forked child, it never holds it)."""
    def __enter__(self) -> "Reservation": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    @property
    def held(self) -> bool:
        """Whether this process still holds it."""
    @property
    def token(self) -> int:
        """The fencing token of the grant (larger than every earlier grant's
        in the repository)."""
    @property
    def paths(self) -> List[str]:
        """What it covers, normalized: repo-relative, ``/``-separated."""
    @property
    def mode(self) -> Literal["exclusive", "shared"]: ...
    @property
    def previous_holder_died(self) -> bool:
        """Whether the holder of an overlapping reservation before it died
        holding it: its work may be half done."""
    @property
    def previous_holder(self) -> Optional[Dict[str, Any]]:
        """That holder's reservation, as ``baton reservations --json`` lists
        one, or None."""

def reserve(
    paths: Sequence[str],
    *,
    mode: Literal["exclusive", "shared"] = "exclusive",
    timeout: Optional[float] = None,
    reason: Optional[str] = None,
    repo: Optional[_Path] = None,
    agent: Optional[str] = None,
    baton_dir: Optional[_Path] = None,
) -> Reservation:
    """Reserves ``paths`` (paths or globs relative to the repository's root,
    or absolute inside it) of the repository at ``repo`` (default: the
    working directory's), all or none, waiting forever (``timeout=None``),
    at most ``timeout`` seconds, or not at all (``timeout=0``). Raises
    ``baton.Busy`` naming the holder if not granted in time,
    ``KeyboardInterrupt`` on Ctrl-C (holding nothing), ``baton.Error`` for a
    path outside the repository or a repository that cannot be used.
    ``agent`` is shown to others (default ``$BATON_AGENT``, else
    ``user@host``)."""

def reservations(
    repo: Optional[_Path] = None,
    path: Optional[str] = None,
    baton_dir: Optional[_Path] = None,
) -> List[Dict[str, Any]]:
    """The repository's live reservations, in arrival order (only those
    overlapping ``path`` if given): what ``baton reservations --json``
    prints (ticket, token, patterns, mode, granted, holder)."""

def after_fork_in_child() -> None:
    """Registered with ``os.register_at_fork``; not for direct use."""
