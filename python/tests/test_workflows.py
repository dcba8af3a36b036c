"""The release workflow is never run here: check what can be checked of it
(no actionlint on this machine: its installers download from outside the
package registries). Every job it needs exists, every artifact it downloads
is uploaded by the build matrix, every `run:` script parses as bash, and
install.sh's platforms are all built."""

import os
import re
import subprocess

import pytest
import yaml

REPO = os.environ["BATON_REPO"]
WORKFLOWS = os.path.join(REPO, ".github", "workflows")


def load(name):
    with open(os.path.join(WORKFLOWS, name)) as f:
        return yaml.safe_load(f)


def steps(job):
    return job.get("steps", [])


@pytest.mark.parametrize("name", sorted(os.listdir(WORKFLOWS)))
def test_every_run_script_parses_and_every_need_exists(name):
    wf = load(name)
    jobs = wf["jobs"]
    for jname, job in jobs.items():
        needs = job.get("needs", [])
        for n in [needs] if isinstance(needs, str) else needs:
            assert n in jobs, f"{name}: job {jname} needs unknown job {n}"
        for step in steps(job):
            assert "uses" in step or "run" in step, f"{name}: {jname}: a step does nothing"
            if "run" in step:
                script = re.sub(r"\$\{\{[^}]*\}\}", "X", step["run"])
                r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
                assert r.returncode == 0, f"{name}: {jname}: {step.get('name')}: {r.stderr}"


def test_release_artifacts_and_platforms_line_up():
    wf = load("release.yml")
    built = {e["target"] for e in wf["jobs"]["build"]["strategy"]["matrix"]["include"]}
    for e in wf["jobs"]["wheels"]["strategy"]["matrix"]["include"]:
        assert e["programs"] in built, f"wheel {e['target']} takes programs nobody builds"
    upload = [s for s in steps(wf["jobs"]["build"]) if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload and upload[0]["with"]["name"] == "baton-${{ matrix.target }}"
    download = [s for s in steps(wf["jobs"]["wheels"]) if s.get("uses", "").startswith("actions/download-artifact")]
    assert download and download[0]["with"]["name"] == "baton-${{ matrix.programs }}"
    # What install.sh picks on each machine it supports.
    for target in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl",
                   "x86_64-apple-darwin", "aarch64-apple-darwin"]:
        assert target in built, f"install.sh would look for {target}, which release.yml does not build"
