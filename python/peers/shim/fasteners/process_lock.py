"""`fasteners.process_lock`: baton's adapter."""
from baton.fasteners import *  # noqa: F403
