"""`mypy --strict` accepts a program using each API of the installed wheel
(its stubs and typed modules)."""

import os
import shutil
import subprocess
import sys


def test_mypy_strict_accepts_the_typed_example_and_the_package(tmp_path):
    import baton

    example = os.path.join(os.path.dirname(__file__), "typed", "example.py")
    # A copy of the installed package (mypy will not check a directory
    # under site-packages as a source root).
    package = str(tmp_path / "baton")
    shutil.copytree(os.path.dirname(baton.__file__), package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), example, package],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
