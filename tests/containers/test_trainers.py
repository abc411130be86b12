"""Several fit workers sharing one queue (docs/containers.md, "Fitting a collection"): the compose stack with
the job store in Redis (`--profile redis`, INR_FIT_STORE=redis://redis:6379/0), `--scale trainer=2` and
INR_FIT_MAX_RUNNING=2. Fits POSTed through nginx are taken by both trainers, and none is run twice: each
job's events (GET /v1/fits/ID/events) show one `started` per attempt, each by one worker, its progress steps
once each, and its model folder holds the one version it wrote."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from .stack import Stack
from .test_fits import OPTIONS, follow, photo

TRAINERS = 2
JOBS = 4  # INR_FIT_QUEUE_LIMIT: at most 4 queued or running
STEPS = 60  # a few seconds a fit: the second trainer claims a job while the first one fits


@pytest.fixture(scope="module")
def stack(make_stack, report) -> Stack:
    s = make_stack("trainers")
    s.env.update({"INR_FIT_STORE": "redis://redis:6379/0", "INR_FIT_MAX_RUNNING": str(TRAINERS)})
    report["trainers_time_to_healthy_s"] = round(s.up(1, profiles=("redis",), scale=f"trainer={TRAINERS}"), 1)
    return s


def worker_hosts(stack: Stack, timeout: float = 120) -> dict[str, str]:
    """{hostname: container} of the trainers, once each one's worker has opened the Redis store."""
    deadline = time.monotonic() + timeout
    while True:
        trainers = stack.containers("trainer")
        logs = {t: stack.engine("logs", t, check=False).stderr for t in trainers}
        if len(trainers) == TRAINERS and all("store redis://redis:6379/0" in text for text in logs.values()):
            break
        assert time.monotonic() < deadline, f"{TRAINERS} trainers on the Redis store: {trainers}\n{logs}"
        time.sleep(1)
    return {stack.engine.inspect(t)["Config"]["Hostname"]: t for t in trainers}


def test_two_trainers_share_the_redis_queue_and_no_job_runs_twice(stack, http, report):
    hosts = worker_hosts(stack)
    (redis,) = stack.containers("redis")
    assert stack.engine("exec", redis, "redis-cli", "ping").stdout.strip() == "PONG"
    jobs = []
    for i in range(JOBS):
        r = http.post(
            "/v1/fits",
            files={"file": (f"p{i}.png", photo(i), "image/png")},
            data={**OPTIONS, "steps": str(STEPS), "name": f"collection-{i}"},
        )
        assert r.status_code == 202, r.text
        jobs.append(r.json())
    runs = {}
    for job in jobs:
        events = follow(stack, job["links"]["events"])
        record = http.get(job["links"]["self"]).json()
        assert events[-1][2] == "succeeded" and record["state"] == "succeeded", stack.diagnose(job["links"]["self"])
        started = [e[3] for e in events if e[2] == "started"]
        # one `started` per attempt, each attempt by one worker: a job claimed twice would show two
        assert [s["attempt"] for s in started] == sorted({s["attempt"] for s in started}), started
        assert len(started) == record.get("attempt", len(started)), (started, record)
        steps = [e[3]["step"] for e in events if e[2] == "progress"]
        assert len(steps) == len(set(steps)) and steps == sorted(steps), "each step once, in order"
        workers = {s["worker"] for s in started}
        assert all(w.split(":")[0] in hosts for w in workers), (workers, hosts)
        # the job's model holds the one version it wrote: a second run would have written the next one
        versions = sorted(p.name for p in (stack.models / job["name"]).iterdir() if p.is_dir())
        assert versions == [str(record["version"])], versions
        runs[job["id"]] = {"worker": hosts[started[-1]["worker"].split(":")[0]], "attempts": len(started)}
    by_trainer = Counter(r["worker"] for r in runs.values())
    report["trainers_jobs_per_trainer"] = sorted(by_trainer.values())
    report["trainers_attempts"] = sorted(r["attempts"] for r in runs.values())
    assert len(by_trainer) == TRAINERS, f"one trainer took every job: {runs}"
    # the store says the same: no job of ours is still queued or running
    listed = {j["id"]: j["state"] for j in http.get("/v1/fits").json()["fits"]}
    assert all(listed[j["id"]] == "succeeded" for j in jobs), listed


def test_the_trainers_ran_on_the_redis_store_not_the_sqlite_one(stack):
    for trainer in stack.containers("trainer"):
        logs = stack.engine("logs", trainer, check=False).stderr
        assert "store redis://redis:6379/0" in logs and "sqlite" not in logs.split("store ", 1)[1].split("\n")[0]
    assert httpx.get(stack.url + "/health/ready", timeout=30).status_code == 200


def test_a_giant_in_blocks_is_fitted_by_both_trainers_and_served_through_nginx(stack, http, report):
    """An upload over its block size (docs/fits.md, Giant images) is one job whose blocks are jobs on the Redis queue,
    which either trainer takes; the one that writes the last publishes the block model, and nginx's replicas serve it
    whole."""
    import io

    import numpy as np
    from PIL import Image

    from tests.fits import photo as smooth_photo

    worker_hosts(stack)
    buf = io.BytesIO()
    smooth_photo(120, 72, seed=5).save(buf, "PNG")
    fields = {"preset": "grid", "steps": "40", "block_size": "48", "name": "giant-blocks"}
    r = http.post("/v1/fits", files={"file": ("giant.png", buf.getvalue(), "image/png")}, data=fields)
    assert r.status_code == 202, r.text
    job = r.json()
    events = follow(stack, job["links"]["events"])
    assert events[-1][2] == "succeeded", stack.diagnose(job["links"]["self"])
    unstored = [e for e in events if e[1] is None]  # made from the pieces as they go: a one-model job's fields
    assert unstored and {e[2] for e in unstored} == {"progress"} and "pieces" in unstored[-1][3], unstored[-1:]
    split = [e[3] for e in events if e[2] == "split"]
    assert split and split[0]["pieces"] == 7, split  # 3 × 2 blocks and the overview
    version = stack.models / "giant-blocks" / str(http.get(job["links"]["self"]).json()["version"])
    assert len(list((version / "blocks").glob("r*c*.onnx"))) == 6
    deadline = time.monotonic() + 60
    while (r := http.get("/v1/models/giant-blocks/render", params={"width": 120, "height": 72})).status_code != 200:
        assert time.monotonic() < deadline, r.text
        time.sleep(1)
    served = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"), np.float64) / 255
    truth = np.asarray(smooth_photo(120, 72, seed=5), np.float64) / 255
    report["trainers_giant_psnr"] = round(float(10 * np.log10(1 / ((served - truth) ** 2).mean())), 2)
    assert report["trainers_giant_psnr"] > 24
