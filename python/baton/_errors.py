"""The exceptions of baton's Python API (raised by the native module)."""


class Error(Exception):
    """Bad input (a lock name, a mode, a timeout), an I/O error, or a request
    baton refuses; the message is the one the ``baton`` command prints after
    ``baton: ``."""


class Busy(Error, TimeoutError):
    """The lock was not acquired in time (``blocking=False``, or ``timeout``
    elapsed): what makes ``baton lock acquire --no-wait`` exit 75."""


class Cancelled(Error):
    """The wait was cancelled through ``acquire(cancel=...)`` (a
    ``baton.Cancel`` whose ``cancel()`` was called); nothing is held."""
