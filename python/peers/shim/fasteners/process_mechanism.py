"""fasteners' private flock helper, which its tests use to probe a file
from outside the lock: a plain flock, as fasteners has it."""
import fcntl


class _FcntlMechanism:
    @staticmethod
    def trylock(lockfile):
        fcntl.flock(lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)

    @staticmethod
    def unlock(lockfile):
        fcntl.flock(lockfile, fcntl.LOCK_UN)


_interprocess_mechanism = _FcntlMechanism()
