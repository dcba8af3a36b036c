"""The design baton's job service replaces, as its users run it today: a
FastAPI app on uvicorn, jobs kept in memory (nothing survives a restart),
one `asyncio.create_subprocess_exec` per job, at most N at a time
(an `asyncio.Semaphore`). The benchmark's peer for `baton serve`
(bench/serve_bench.py); not part of baton.

    SEED_CONCURRENCY=10 python -m uvicorn seed_service:app --port P

Routes, the subset of baton's API the benchmark uses: `POST /v1/jobs`
(202 once the job is in memory), `GET /v1/jobs` (finished times as
RFC 3339), `GET /v1/jobs/{id}`, `GET /health` (active, queued).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import datetime, timezone

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

TEMPLATES = {
    "noop": ["true"],
    "echo": ["echo", "hi"],
    "hold": ["sleep", "3600"],
}

app = FastAPI()
jobs: dict[str, dict] = {}
order: list[str] = []
slots = asyncio.Semaphore(int(os.environ.get("SEED_CONCURRENCY", "10")))
counts = {"queued": 0, "active": 0}


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


async def run(job: dict) -> None:
    async with slots:
        counts["queued"] -= 1
        counts["active"] += 1
        job["status"], job["started_at"] = "running", now()
        try:
            proc = await asyncio.create_subprocess_exec(
                *TEMPLATES[job["template"]],
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            job["output"] = out.decode(errors="replace")
            job["exit_code"] = proc.returncode
            job["status"] = "succeeded" if proc.returncode == 0 else "failed"
        except OSError as e:
            job["status"], job["error"] = "failed", str(e)
        finally:
            job["finished_at"] = now()
            counts["active"] -= 1


@app.post("/v1/jobs", status_code=202)
async def submit(body: dict) -> dict:
    template = body.get("template", "noop")
    if template not in TEMPLATES:
        raise HTTPException(400, f"unknown template {template!r}")
    job = {"id": uuid.uuid4().hex, "template": template, "status": "queued",
           "created_at": now(), "started_at": None, "finished_at": None}
    jobs[job["id"]] = job
    order.append(job["id"])
    counts["queued"] += 1
    asyncio.get_running_loop().create_task(run(job))
    return {"id": job["id"], "status": "queued"}


@app.get("/v1/jobs/{job_id}")
async def get_job(job_id: str) -> dict:
    if job_id not in jobs:
        raise HTTPException(404, "no such job")
    return jobs[job_id]


@app.get("/v1/jobs")
async def list_jobs() -> JSONResponse:
    return JSONResponse({"jobs": [jobs[i] for i in order], "next_cursor": None})


@app.get("/health")
async def health() -> dict:
    return {"status": "ok", **counts}
