"""`import portalocker` for portalocker's own test suite: baton's adapter."""
from baton.portalocker import *  # noqa: F403
from baton.portalocker import (  # noqa: F401
    DEFAULT_CHECK_INTERVAL,
    DEFAULT_FAIL_WHEN_LOCKED,
    DEFAULT_TIMEOUT,
    LOCK_METHOD,
    LockBase,
    open_atomic,
)
from baton import portalocker as _p

exceptions = _p
constants = _p
utils = _p
__version__ = "2.10.1"
