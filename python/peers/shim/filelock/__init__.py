"""`import filelock` for filelock's own test suite: baton's adapter."""
from baton.filelock import *  # noqa: F403
from baton.filelock import __version__  # noqa: F401
