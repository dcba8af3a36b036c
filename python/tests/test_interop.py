"""The Python API and the `baton` command on the same lock names and dir."""

import json
import os
import signal
import subprocess

import baton
from conftest import cli


def test_the_command_is_on_the_venvs_path(baton_bin):
    out = subprocess.run([baton_bin, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("baton ")


def test_a_python_holder_makes_the_cli_exit_75(baton_bin, bdir):
    with baton.Lock("shared-name", baton_dir=bdir):
        r = cli(baton_bin, bdir, "lock", "acquire", "shared-name", "--no-wait")
        assert r.returncode == 75, r.stderr
        assert "lock 'shared-name' is busy (held by pid %d" % os.getpid() in r.stderr
        r = cli(baton_bin, bdir, "run", "--lock", "shared-name", "--no-wait", "--", "true")
        assert r.returncode == 75, r.stderr
    r = cli(baton_bin, bdir, "run", "--lock", "shared-name", "--no-wait", "--", "true")
    assert r.returncode == 0, r.stderr


def test_a_cli_holder_makes_python_busy(baton_bin, bdir):
    # `lock acquire` holds for its caller: a shell that is not our ancestor,
    # alive until its stdin closes.
    sh = subprocess.Popen(
        ["sh", "-c", f"'{baton_bin}' --dir '{bdir}' lock acquire from-cli && cat >/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        cli_token = int(sh.stdout.readline())
        lock = baton.Lock("from-cli", baton_dir=bdir)
        try:
            lock.acquire(blocking=False)
            raise AssertionError("acquired a lock the CLI holds")
        except baton.Busy as e:
            assert str(e).startswith("lock 'from-cli' is busy (held by pid"), str(e)
        assert not lock.held and lock.token is None
    finally:
        sh.stdin.close()
        sh.wait(timeout=60)
    # The shell exited without releasing: its holder lets go (and says so).
    token = lock.acquire(timeout=30)
    assert token > cli_token
    assert lock.previous_holder is not None
    lock.release()


def test_a_killed_python_holder_frees_the_lock_at_once(baton_bin, bdir, holders):
    h = holders("crash", bdir)
    assert cli(baton_bin, bdir, "run", "--lock", "crash", "--no-wait", "--", "true").returncode == 75
    h.kill()
    r = cli(baton_bin, bdir, "run", "--lock", "crash", "--no-wait", "--", "sh", "-c", 'echo "$BATON_PREVIOUS_HOLDER_DIED"')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1", "the next holder was not told that the Python holder died"


def test_status_is_what_the_cli_prints(baton_bin, bdir):
    lock = baton.Lock("st", baton_dir=bdir, owner="tester", operation="checking status")
    token = lock.acquire()
    st = baton.status("st", baton_dir=bdir)
    printed = json.loads(cli(baton_bin, bdir, "lock", "status", "st", "--json").stdout)
    assert st.keys() == printed.keys()
    assert st == printed
    assert st["held"] is True and st["mode"] == "exclusive"
    assert st["holder"]["pid"] == os.getpid()
    assert st["holder"]["token"] == token == st["last_token"]
    assert st["holder"]["owner"] == "tester"
    assert st["holder"]["operation"] == "checking status"
    lock.release()
    st = baton.status("st", baton_dir=bdir)
    assert st["held"] is False and st["holder"] is None


def test_tokens_increase_across_python_and_cli(baton_bin, bdir):
    lock = baton.Lock("fence", baton_dir=bdir)
    seen = [lock.acquire()]
    lock.release()
    r = cli(baton_bin, bdir, "run", "--lock", "fence", "--", "sh", "-c", 'echo "$BATON_FENCING_TOKEN"')
    assert r.returncode == 0, r.stderr
    seen.append(int(r.stdout))
    for _ in range(3):
        with lock:
            seen.append(lock.token)
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_a_bad_name_is_an_error_with_the_clis_message(baton_bin, bdir):
    for name in ["", "a/../b", "x" * 5000]:
        try:
            baton.Lock(name, baton_dir=bdir)
            raise AssertionError(f"accepted {name!r}")
        except baton.Error as e:
            assert not isinstance(e, baton.Busy)
            r = cli(baton_bin, bdir, "lock", "status", name)
            assert r.returncode == 125
            assert str(e) in r.stderr, (str(e), r.stderr)
    try:
        baton.status("a/../b", baton_dir=bdir)
        raise AssertionError("status accepted a bad name")
    except baton.Error as e:
        assert "path component '..' is not allowed" in str(e)


def test_the_default_dir_is_the_clis(baton_bin, tmp_path):
    env = dict(os.environ, BATON_DIR=str(tmp_path / "from-env"))
    code = "import baton; l = baton.Lock('d'); l.acquire(); print(l.baton_dir, flush=True); input()"
    import sys

    p = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == str(tmp_path / "from-env")
        r = subprocess.run(
            [baton_bin, "run", "--lock", "d", "--no-wait", "--", "true"], env=env, capture_output=True
        )
        assert r.returncode == 75
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def test_sigterm_to_a_holder_frees_the_lock(baton_bin, bdir, holders):
    h = holders("term", bdir)
    os.kill(h.pid, signal.SIGTERM)
    h.proc.wait(timeout=60)
    assert cli(baton_bin, bdir, "run", "--lock", "term", "--no-wait", "--", "true").returncode == 0


def test_a_python_holder_learns_how_the_cli_run_before_it_ended(baton_bin, bdir):
    lock = baton.Lock("outcome", baton_dir=bdir)
    lock.acquire()
    assert lock.previous_outcome is None, "the first grant has no previous"
    lock.release()
    assert lock.previous_outcome is None, "not held"
    r = cli(baton_bin, bdir, "run", "--lock", "outcome", "--", "sh", "-c", "kill -9 $$")
    assert r.returncode == 137, r.stderr
    lock.acquire()
    assert lock.previous_outcome == "killed:SIGKILL"
    lock.release()
    r = cli(baton_bin, bdir, "run", "--lock", "outcome", "--", "sh", "-c", 'echo "$BATON_PREVIOUS_OUTCOME"')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "released"
