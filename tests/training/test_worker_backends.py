"""`python -m training worker` on the server stores: a real redis-server and a real PostgreSQL server
(tests/fits.py, tests/pgserver.py; each skips with its reason when missing). The worker's own loop (huey's
dequeue: BRPOP on Redis, SKIP LOCKED and LISTEN on PostgreSQL) fits a job into a served version, and a worker
SIGKILLed mid-fit has its job retried by another, judged dead by the store's clock."""

from __future__ import annotations

import pytest

from fitstore import FitStore
from tests.fits import RedisServer, Worker, submit, wait_finished, wait_for
from tests.pgserver import PostgresServer


@pytest.fixture(scope="module", params=["redis", "postgresql"])
def server(request, tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")) if request.param == "redis" else PostgresServer()
    yield server
    server.stop()


def test_workers_fit_on_a_server_store_and_a_killed_workers_job_goes_to_another(server, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    store = FitStore(server.url, stale_s=3)
    first = Worker(server.url, models, tmp_path / "first.log")
    second = None
    try:
        job = submit(store, "served")
        rec = wait_finished(store, job["id"])
        assert rec["state"] == "succeeded" and rec["version"] == 1, (rec, first.output()[-3000:])
        assert (models / "served" / "1" / "model.onnx").is_file()
        assert store.metric_counters()["m:finished:succeeded"] == 1

        long = submit(store, "killed", steps=1_000_000)["id"]
        killed = wait_for(store, long, lambda r: r["state"] == "running" and r["step"] >= 1, what="step 1")["worker"]
        first.kill()
        second = Worker(server.url, models, tmp_path / "second.log")
        rec = wait_for(store, long, lambda r: r["state"] == "running" and r["attempt"] == 2, what="attempt 2")
        assert rec["worker"] != killed and rec["failures"] == 1, second.output()[-3000:]
        retry = [e for e in store.events(long) if e["type"] == "retrying"]
        assert len(retry) == 1 and killed in retry[0]["reason"]
        store.cancel(long)
        assert wait_finished(store, long, timeout=60)["state"] == "cancelled"
        assert not (models / "killed").exists()
    finally:
        first.stop(timeout=30)
        if second is not None:
            second.stop(timeout=30)
