"""install.sh against a release archive served on 127.0.0.1: made here with
the layout release.yml gives it, from the programs the wheel installed."""

import atexit
import functools
import hashlib
import http.server
import os
import platform
import shutil
import subprocess
import tarfile
import threading

import pytest

INSTALL_SH = os.path.join(os.environ["BATON_REPO"], "install.sh")
VERSION = "v9.9.9-test"


def this_target():
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[
        platform.machine().lower()
    ]
    return f"{arch}-unknown-linux-musl" if platform.system() == "Linux" else f"{arch}-apple-darwin"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make_release(dest, baton_bin, tamper=None):
    """baton-VERSION-TARGET.tar.gz and its .sha256 in dest, as release.yml
    makes them (the good one made once per session, then copied)."""
    if tamper in (None, "archive"):
        good = _good_release(baton_bin)
        for f in os.listdir(good):
            if f.endswith((".tar.gz", ".sha256")):
                shutil.copy(os.path.join(good, f), dest / f)
        if tamper == "archive":
            with open(dest / f"baton-{VERSION}-{this_target()}.tar.gz", "ab") as f:
                f.write(b"\0")
        return
    _make_release(dest, baton_bin, tamper)


@functools.lru_cache(maxsize=None)
def _good_release(baton_bin):
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="baton-release-test-"))
    atexit.register(shutil.rmtree, d, True)
    _make_release(d, baton_bin, None)
    return str(d)


def _make_release(dest, baton_bin, tamper):
    name = f"baton-{VERSION}-{this_target()}"
    inner = dest / "build" / name
    inner.mkdir(parents=True)
    for prog in ["baton", "baton-service"]:
        shutil.copy(os.path.join(os.path.dirname(baton_bin), prog), inner / prog)
    (inner / "SHA256SUMS").write_text(
        "".join(f"{sha256(inner / p)}  {p}\n" for p in ["baton", "baton-service"])
    )
    if tamper == "program":
        with open(inner / "baton-service", "ab") as f:
            f.write(b"\0")
    archive = dest / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as t:
        t.add(inner, arcname=name)
    (dest / f"{name}.tar.gz.sha256").write_text(f"{sha256(archive)}  {name}.tar.gz\n")


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/site; yields (dir, url)."""
    site = tmp_path / "site"
    site.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield site, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def install(url, to, *extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    return subprocess.run(
        ["sh", INSTALL_SH, "--base-url", url, "--version", VERSION, "--to", str(to), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_installs_the_verified_archive_over_http(server, tmp_path, baton_bin):
    site, url = server
    make_release(site, baton_bin)
    to = tmp_path / "bin"
    r = install(url, to)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(to / "baton"), "--version"], capture_output=True, text=True)
    assert out.stdout.startswith("baton "), out
    assert os.access(to / "baton-service", os.X_OK)
    assert sorted(os.listdir(to)) == ["baton", "baton-service"]


def test_installs_from_a_file_url(tmp_path, baton_bin):
    site = tmp_path / "site"
    site.mkdir()
    make_release(site, baton_bin)
    r = install(f"file://{site}", tmp_path / "bin")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "bin" / "baton").exists()


@pytest.mark.parametrize("tamper", ["archive", "program"])
def test_a_checksum_mismatch_installs_nothing(server, tmp_path, baton_bin, tamper):
    site, url = server
    make_release(site, baton_bin, tamper=tamper)
    to = tmp_path / "bin"
    r = install(url, to)
    assert r.returncode != 0
    assert "checksum mismatch" in r.stderr and "nothing installed" in r.stderr, r.stderr
    assert not to.exists() or os.listdir(to) == []


def test_a_missing_checksum_file_installs_nothing(server, tmp_path, baton_bin):
    site, url = server
    make_release(site, baton_bin)
    for f in site.glob("*.sha256"):
        f.unlink()
    r = install(url, tmp_path / "bin")
    assert r.returncode != 0 and "refusing to install unverified" in r.stderr, r.stderr
    assert not (tmp_path / "bin").exists()
