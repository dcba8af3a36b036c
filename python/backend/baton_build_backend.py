"""The PEP 517 build backend of baton-locks: maturin's, plus the programs.

maturin builds the native module (crates/baton-py) and the wheel, but one
wheel cannot hold both a pyo3 module and other crates' programs through
maturin alone. This backend first builds the `baton` and `baton-service`
programs (crates/baton-cli) with cargo, with the same profile, target and
lock-file flags that maturin gets, copies them into maturin's `data`
directory (python/pyproject.toml, `wheel-data/scripts/`), then lets maturin
build the wheel; pip and uv install a wheel's `<name>.data/scripts/` on
PATH. Every other hook is maturin's, unchanged.

So `pip wheel ./python`, `pip install ./python`, `uv pip install ./python`,
`python -m build ./python` and a build from the sdist all work the same way,
from a checkout or from the unpacked sdist (maturin packs the programs'
crates into the sdist because crates/baton-py names crates/baton-cli as a
dev-dependency), with or without CARGO_TARGET_DIR: cargo reports where it
put the programs (`--message-format=json`), nothing guesses a target dir.

    MATURIN_PEP517_ARGS="--profile dev --locked" pip wheel ./python

The options that reach the programs' build: `--profile P` (default:
release, maturin's default), `--target T`, `--locked`, `--frozen`,
`--offline`; from MATURIN_PEP517_ARGS or the config setting
`maturin.build-args`, as maturin reads them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import maturin
from maturin import (
    build_sdist as _maturin_build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable as _maturin_prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel as _maturin_prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

# The programs the wheel installs on PATH (crates/baton-cli's binaries).
PROGRAMS = ("baton", "baton-service")
# Cargo's options that maturin also takes and that must be the same for the
# programs: those with a value, then the flags.
_VALUE_OPTIONS = ("--profile", "--target")
_FLAGS = ("--locked", "--frozen", "--offline")


class BuildError(Exception):
    """The programs could not be built or staged; the message says why."""


def _fail(message: str) -> None:
    sys.stderr.write(f"baton build backend: {message}\n")
    sys.exit(1)


def _data_dir() -> Path:
    # PEP 517 runs every hook in the directory of pyproject.toml.
    data = maturin.get_config().get("data")
    if not isinstance(data, str):
        raise BuildError("python/pyproject.toml has no [tool.maturin] data directory")
    return Path(data)


def _ensure_data_dir() -> Path:
    # maturin refuses a `data` directory that does not exist, in every hook.
    data = _data_dir()
    (data / "scripts").mkdir(parents=True, exist_ok=True)
    return data


def _programs_manifest() -> Path:
    # In a checkout pyproject.toml is python/ and the manifest
    # ../crates/baton-py/Cargo.toml; in the unpacked sdist both sit at its
    # root (maturin rewrites manifest-path). The programs' crate is beside.
    manifest = maturin.get_config().get("manifest-path")
    if not isinstance(manifest, str):
        raise BuildError("python/pyproject.toml has no [tool.maturin] manifest-path")
    cli = Path(manifest).parent.parent / "baton-cli" / "Cargo.toml"
    if not cli.is_file():
        raise BuildError(f"the programs' crate is missing: no {cli}")
    return cli


def _cargo_options(config_settings: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """The programs' profile and cargo options, from maturin's own build arguments."""
    args = maturin.get_maturin_pep517_args(config_settings)
    profile = "release"
    options: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in _VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(args):
                    raise BuildError(f"maturin build argument {name} has no value")
                i += 1
                value = args[i]
            if name == "--profile":
                profile = value
            else:
                options += [name, value]
        elif arg == "--release":
            profile = "release"
        elif arg in _FLAGS:
            options.append(arg)
        i += 1
    return profile, options


def _build_programs(profile: str, options: list[str]) -> dict[str, Path]:
    """Builds the programs with cargo; returns where cargo put each one."""
    cargo = os.environ.get("CARGO", "cargo")
    command = [
        cargo, "build", "--manifest-path", str(_programs_manifest()), "-p", "baton",
        *(arg for p in PROGRAMS for arg in ("--bin", p)),
        "--profile", profile, *options, "--message-format=json-render-diagnostics",
    ]
    print("Running `{}`".format(" ".join(command)), flush=True)
    try:
        # Diagnostics go to stderr as cargo renders them; stdout is JSON.
        result = subprocess.run(command, stdout=subprocess.PIPE, check=False)
    except OSError as e:
        raise BuildError(f"cannot run {cargo}: {e}") from e
    if result.returncode != 0:
        raise BuildError(f"cargo failed to build the programs (exit {result.returncode})")
    built: dict[str, Path] = {}
    for line in result.stdout.decode(errors="replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        name = message.get("target", {}).get("name")
        if name in PROGRAMS:
            built[name] = Path(message["executable"])
    missing = [p for p in PROGRAMS if p not in built]
    if missing:
        raise BuildError(f"cargo reported no executable for {', '.join(missing)}")
    return built


def _stage_programs(config_settings: Mapping[str, Any] | None) -> None:
    profile, options = _cargo_options(config_settings)
    built = _build_programs(profile, options)
    scripts = _ensure_data_dir() / "scripts"
    shutil.rmtree(scripts)
    scripts.mkdir()
    strip = shutil.which("strip") if sys.platform.startswith("linux") else None
    for path in built.values():
        dest = scripts / path.name
        if strip and profile != "release":
            # A debug build's debug info (170 MB) would make every wheel slow
            # to pack and install; release builds carry none (Cargo.toml).
            subprocess.run([strip, "--strip-debug", "-o", str(dest), str(path)], check=True)
        else:
            shutil.copy2(path, dest)


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 517: the programs, then maturin's wheel with them as its scripts."""
    try:
        _stage_programs(config_settings)
    except (BuildError, subprocess.CalledProcessError, OSError) as e:
        _fail(str(e))
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 660: as build_wheel; the programs are copies (rebuild to update them)."""
    try:
        _stage_programs(config_settings)
    except (BuildError, subprocess.CalledProcessError, OSError) as e:
        _fail(str(e))
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    """PEP 517: maturin's sdist (it holds the programs' crates, not the programs)."""
    try:
        _ensure_data_dir()
    except (BuildError, OSError) as e:
        _fail(str(e))
    return _maturin_build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    """PEP 517: maturin's metadata (its `data` directory must exist)."""
    try:
        _ensure_data_dir()
    except (BuildError, OSError) as e:
        _fail(str(e))
    return _maturin_prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    """PEP 660: as prepare_metadata_for_build_wheel."""
    try:
        _ensure_data_dir()
    except (BuildError, OSError) as e:
        _fail(str(e))
    return _maturin_prepare_metadata_for_build_editable(metadata_directory, config_settings)
