"""One `baton serve` process as the benchmarks drive it (serve_bench.py,
pg_bench.py): a fresh baton dir and config, the address it listens on, its
jobs, its memory; and the service's timestamps as Unix milliseconds."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path


def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


class Server:
    """One `baton serve` on a fresh baton dir, on 127.0.0.1:<free port>."""

    def __init__(self, baton: Path, work: Path, name: str, env: dict[str, str] | None = None,
                 **settings: object) -> None:
        self.dir = work / name
        self.dir.mkdir(parents=True)
        conf = {
            "max_concurrency": 10,
            "max_queue_depth": 100,
            "job_ttl": "24h",
            "grace": "1s",
            "drain_timeout": "1s",
            "default_template": "noop",
        }
        conf.update(settings)
        lines = [f"{k} = {json.dumps(v) if not isinstance(v, str) else toml_str(v)}" for k, v in conf.items()]
        lines += [
            "[templates.noop]", 'command = ["true"]',
            "[templates.echo]", 'command = ["echo", "hi"]',
            "[templates.hold]", 'command = ["sleep", "3600"]',
            "[templates.big]", 'command = ["head", "-c", "16777216", "/dev/zero"]',
            "[templates.sh]", 'command = ["sh", "-c", "{prompt}"]',
        ]
        config = self.dir / "serve.toml"
        config.write_text("\n".join(lines) + "\n")
        self.stderr = open(self.dir / "serve.log", "wb")
        self.proc = subprocess.Popen(
            [str(baton), "--dir", str(self.dir / "baton"), "serve", "--config", str(config),
             "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().decode().strip()
        prefix = "baton serve: listening on http://"
        if not first.startswith(prefix):
            self.proc.kill()
            tail = (self.dir / "serve.log").read_text(errors="replace")[-2000:]
            sys.exit(f"bench: `baton serve` did not start (said {first!r}):\n{tail}")
        self.addr = first[len(prefix):]
        host, port = self.addr.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def get(self, path: str) -> tuple[int, dict]:
        try:
            self.conn.request("GET", path)
            r = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):
            # The service closes keep-alive connections idle for 30 s.
            self.conn.close()
            self.conn.request("GET", path)
            r = self.conn.getresponse()
        body = r.read()
        return r.status, json.loads(body) if body else {}

    def wait_idle(self, expect: int, timeout: float) -> None:
        """Until nothing runs or waits (polled every 50 ms)."""
        deadline = time.monotonic() + timeout
        while True:
            _, h = self.get("/health")
            if h.get("active") == 0 and h.get("queued") == 0:
                return
            if time.monotonic() > deadline:
                sys.exit(f"bench: {expect} jobs not done after {timeout:.0f} s: {h}")
            time.sleep(0.05)

    def jobs(self) -> list[dict]:
        out: list[dict] = []
        cursor = ""
        while True:
            status, page = self.get(f"/v1/jobs?limit=1000{'&cursor=' + cursor if cursor else ''}")
            if status != 200:
                sys.exit(f"bench: GET /v1/jobs answered {status}: {page}")
            out += page["jobs"]
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return out

    def rss_kib(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in KiB."""
        vals = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0])
        return vals["VmRSS"], vals["VmHWM"]

    def stop(self) -> None:
        self.conn.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


def unix_ms(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp() * 1000.0
