"""workspace_create, push (lands the commit on the origin), workspace_remove."""

import os
import subprocess

from harness import REPO, call, ok, report, run, session


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


async def main():
    async with session("gitter") as s:
        ws = await ok(s, "workspace_create", {"branch": "feature"})
        assert ws["branch"] == "feature" and os.path.isdir(ws["path"]) and ws["id"], ws
        with open(os.path.join(ws["path"], "new.txt"), "w") as f:
            f.write("hello\n")
        git(ws["path"], "add", "new.txt")
        git(ws["path"], "commit", "-q", "-m", "add new.txt")
        head = git(ws["path"], "rev-parse", "HEAD")
        pushed = await ok(s, "push", {"path": ws["path"]})
        assert pushed["landed"] == head and pushed["attempts"] == 1, (pushed, head)
        origin = git(REPO, "config", "--get", "remote.origin.url")
        assert git(REPO, "ls-remote", origin, "refs/heads/feature").split()[0] == head
        out, text, err = await call(s, "workspace_remove", {"path": "/nonexistent/ws"})
        assert err, text
        # Another repository on the machine is never pushed, whatever path
        # a prompt gives.
        other = os.path.join(os.path.dirname(REPO), "other-repo")
        subprocess.run(["git", "clone", "-q", origin, other], check=True)
        out, text, err = await call(s, "push", {"path": other})
        assert err and "nor one of its workspaces" in text, text
        gone = await ok(s, "workspace_remove", {"path": ws["path"]})
        assert gone["id"] == ws["id"] and not os.path.exists(ws["path"]), gone
    report({"workspace": ws, "push": pushed})


run(main)
