"""`mypy --strict` accepts a program using each API of the installed wheel
(its stubs and typed modules)."""

import os
import subprocess
import sys


def test_mypy_strict_accepts_the_typed_example(tmp_path):
    example = os.path.join(os.path.dirname(__file__), "typed", "example.py")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path), example],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
