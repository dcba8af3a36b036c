"""Named locks that the kernel releases when a holder dies.

``baton`` is baton's lock engine in this process (a native module, no
subprocess per call), on the same lock names and baton dir as the ``baton``
command, which the same package installs::

    import baton

    with baton.Lock("memory/tasks.json", operation="update tasks") as lock:
        ...  # critical section; pass lock.token to stores that check fencing

    try:
        lock = baton.Lock("deploy")
        lock.acquire(timeout=5)
    except baton.Busy as e:
        print(e)  # lock 'deploy' is busy (held by pid ... ); gave up after 5s (...)

A lock is a kernel byte-range lock on a file in the baton dir (``baton_dir``,
else ``$BATON_DIR``, else this user's dir on the machine,
``<temp dir>/baton-<uid>``): when its holder dies, even by SIGKILL, the lock
is free at once. Waiters line up first come, first served; every grant has a
fencing token larger than any before. ``baton.status(name)`` returns what
``baton lock status NAME --json`` prints.

Path reservations of a repository, as ``baton reserve`` takes them (every
clone and worktree of one origin meets in one namespace; a path covers
everything below it; globs such as ``src/**/*.ts``)::

    with baton.reserve(["src/api", "docs/*.md"], timeout=30, reason="refactor") as r:
        if r.previous_holder_died:
            ...  # its work may be half done
        ...  # edit; pass r.token to stores that check fencing

    baton.reservations()  # what ``baton reservations --json`` prints

Overlapping requests are served first come, first served; several paths are
taken all or none; a holder that dies releases at once. Reservations are
advisory: they bind those who ask (and, at commit time, baton's pre-commit
guard). They live in the baton dir (this machine); ``baton reserve
--backend`` keeps them in PostgreSQL instead, which this module does not
reach yet.

Moving from filelock or portalocker: ``baton.FileLock``, ``baton.Timeout``
and ``baton.AsyncFileLock`` are filelock's API (``baton.filelock``), and
``baton.portalocker`` is portalocker's; change the import and nothing else
(see those modules for what differs underneath, and how they exclude
processes still using the old library on the same path).

What the module does to this process
------------------------------------
- Threads: none. A wait blocks the calling thread in the kernel with the GIL
  released, so other Python threads run meanwhile.
- Files: one open lock file per held lock (and per wait in progress), opened
  close-on-exec, so programs started with ``subprocess`` or ``os.exec*`` do
  not inherit it; a thread that waits for a semaphore keeps one inotify
  descriptor (close-on-exec) for as long as it lives.
- Signals and timers: no signal handler and no timer while it only waits
  without a deadline (``timeout=None``). A wait with a deadline that has to
  block (``timeout=`` a number, on a busy lock; rarely, a bounded wait of
  microseconds for another process's bookkeeping) creates a POSIX timer for
  the waiting thread, deleted when the wait ends, that interrupts it with one
  real-time signal sent to that thread only; the first such wait installs a
  handler that does nothing for that signal (the highest real-time signal
  whose disposition is still the default, so no handler of yours is
  replaced) and leaves it installed. Python itself uses no real-time signal.
- fork(): a child never holds what its parent held. The package registers
  one ``os.register_at_fork(after_in_child=...)`` hook which, in the child,
  closes the child's copies of held locks' files without releasing anything
  (the kernel lock belongs to the parent's open file, which the child would
  otherwise share: the child could release the parent's lock, and keep it
  held after the parent died). In the child, ``held`` is False, ``token`` is
  None, leaving ``with`` does nothing and ``release()`` raises ``Error``;
  the child may ``acquire()`` the lock itself (and waits for its parent).
  A lock that another thread was acquiring at the moment of the fork stays
  open in the child until it exits. A ``Reservation`` in a forked child is
  not held (``held`` is False, leaving ``with`` does nothing); its lock file
  stays open in the child until it exits or execs, so a reservation whose
  holder died while a forked child of it still runs is released when that
  child ends.
- Acquiring a lock whose previous holder was a ``baton run`` that died may
  stop what is left of that run's command (its process group, after an
  identity check), as the ``baton`` command does: a run's processes never
  outlive its hold.
- ``KeyboardInterrupt`` (and any exception a signal handler raises) ends
  every wait within milliseconds, with or without a timeout, holding nothing:
  a wait on a busy lock runs in a short-lived helper thread (named
  ``baton-wait``) while the calling thread checks for signals every 10 ms;
  the helper leaves the line when the caller stops waiting. A free lock is
  taken on the calling thread, without a helper. ``acquire(cancel=c)`` with
  a ``baton.Cancel`` ends the wait the same way when ``c.cancel()`` is
  called from another thread (``baton.Cancelled``).
- Nothing else: the environment variables read are ``BATON_DIR``,
  ``TMPDIR`` and ``USER`` (the default owner, ``user@host``); nothing is
  written outside the baton dir.
"""

import os as _os
from typing import TYPE_CHECKING

from . import _baton
from ._baton import Cancel, Reservation, reservations, reserve, status
from ._errors import Busy, Cancelled, Error
from ._lock import Acquired, Lock

__all__ = [
    "Acquired",
    "AsyncFileLock",
    "Busy",
    "Cancel",
    "Cancelled",
    "Error",
    "FileLock",
    "Lock",
    "Reservation",
    "Timeout",
    "portalocker",
    "reservations",
    "reserve",
    "status",
]


def __getattr__(name: str) -> object:
    # The adapters load on first use: `import baton` stays light (a process
    # started by multiprocessing's spawn imports it again).
    if name in ("FileLock", "AsyncFileLock", "Timeout"):
        from . import filelock

        return getattr(filelock, name)
    if name == "portalocker":
        import importlib

        return importlib.import_module(".portalocker", __name__)
    raise AttributeError(f"module 'baton' has no attribute {name!r}")


if TYPE_CHECKING:
    from . import portalocker
    from .filelock import AsyncFileLock, FileLock, Timeout

if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_baton.after_fork_in_child)
