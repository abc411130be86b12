"""The fit store's races through HTTP: two real API processes on one job store (SQLite, and a real redis-server), no
worker, uploads sent to both at once. The queue limit holds exactly across them and every derived name is
distinct (the store checks both in the transaction that inserts a job; docs/fits.md)."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fitstore import FitStore
from tests.fits import RedisServer, png
from tests.servers import ROOT, Server

RUNNING, QUEUE = 1, 5


@pytest.fixture(params=["sqlite", "redis"])
def replicas(request, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(ROOT / "models" / "digits", repo / "digits")
    redis = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fits.sqlite'}"
    else:
        redis = RedisServer(tmp_path)
        url = redis.url
    env = {"INR_FIT_STORE": url, "INR_FIT_MAX_RUNNING": str(RUNNING), "INR_FIT_QUEUE_LIMIT": str(QUEUE)}
    servers = [Server(repo, env=env) for _ in range(2)]
    try:
        for s in servers:
            s.wait_ready()
        yield servers, url
    finally:
        for s in servers:
            s.stop()
        if redis is not None:
            redis.stop()


def test_two_api_processes_keep_the_limit_and_derive_distinct_names(replicas):
    servers, url = replicas
    image = png()

    def upload(i: int) -> httpx.Response:
        with httpx.Client(base_url=servers[i % 2].url, timeout=60) as c:
            return c.post(
                "/v1/fits",
                files={"file": ("same.png", image)},
                data={"preset": "fourier-small", "steps": "10", "size": "32"},
            )

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(upload, range(12)))
    accepted = [r.json() for r in answers if r.status_code == 202]
    refused = [r for r in answers if r.status_code != 202]
    assert len(accepted) == RUNNING + QUEUE, [r.text for r in answers]
    assert all(r.status_code == 429 and "error" in r.json() and r.headers["retry-after"] for r in refused)
    names = sorted(r["name"] for r in accepted)
    assert names == sorted(["same"] + [f"same-{k}" for k in range(2, RUNNING + QUEUE + 1)]), names
    store = FitStore(url)
    assert sorted(r["name"] for r in store.list()) == names and store.huey.pending_count() == len(names)
