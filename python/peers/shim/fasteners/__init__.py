"""`import fasteners` for fasteners' own test suite: baton's adapter."""
from baton.fasteners import *  # noqa: F403
from . import process_lock  # noqa: F401
