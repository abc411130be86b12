"""Live reload under load: 16 clients send queries and classifies for 20 s while the model changes
under them, in poll mode (a version written by the training CLI, then a corrupt one) and in
explicit mode (a version swapped in through the repository API). Not one answer may be other
than 200, and the answers switch to the new version."""

from __future__ import annotations

import time

import httpx
import numpy as np
import tritonclient.http as triton
from live import (
    Clients,
    add_version,
    check_switch,
    entry,
    index,
    private_repo,
    query_rgb,
    train_next_version,
    versions_on_disk,
    wait_for,
)

from tests.servers import Server

SECONDS = 20.0
KEY = {"admin-key": "live-reload-key"}


def test_poll_mode_picks_up_a_trained_version_and_rejects_a_corrupt_one(model_repo, tmp_path):
    repo = private_repo(model_repo, tmp_path / "models")
    model = repo / "astronaut"
    first = versions_on_disk(model)[-1]
    srv = Server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.5").wait_ready()
    try:
        old = query_rgb(srv.url)
        clients = Clients(srv.url).start()
        clients.answered("queries answered before the new version exists", lambda a: a.kind == "query", n=16)
        train_next_version(model, seed=first + 11)
        trained = versions_on_disk(model)[-1]
        assert trained == first + 1, "the training CLI did not write the next version"
        wait_for(
            lambda: (entry(index(srv.url), "astronaut", trained) or {}).get("state") == "READY",
            30,
            f"version {trained} to be served",
        )
        new = query_rgb(srv.url)
        swapped = time.monotonic()
        bad = add_version(model, corrupt=True)
        row = wait_for(lambda: entry(index(srv.url), "astronaut", bad), 30, "the corrupt version in the index")
        rejected = time.monotonic()
        clients.answered(
            "queries started after the corrupt version was rejected",
            lambda a: a.kind == "query" and a.started > rejected,
            n=16,
        )
        answers = clients.finish(at_least=SECONDS)
    finally:
        srv.stop()
    assert row["state"] == "UNAVAILABLE" and "ONNX" in row["reason"], row
    switched = check_switch(answers, old, new)
    print(
        f"\npoll: {len(answers)} answers, all 200, in {clients.ran:.1f} s; version {trained} served from "
        f"{switched - clients.t0:.1f} s; corrupt version {bad} rejected by {rejected - clients.t0:.1f} s"
    )
    after_bad = [a for a in answers if a.kind == "query" and a.started > rejected]
    assert after_bad and all(np.allclose(a.rgb, new, atol=1e-4) for a in after_bad), (
        f"the corrupt version took version {trained}'s place (swap at {swapped - clients.t0:.1f} s)"
    )


def test_explicit_mode_swaps_a_version_through_the_repository_api(model_repo, tmp_path):
    repo = private_repo(model_repo, tmp_path / "models")
    model = repo / "astronaut"
    first = versions_on_disk(model)[-1]
    srv = Server(
        repo,
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--http-restricted-api",
        f"model-repository:admin-key={KEY['admin-key']}",
    ).wait_ready()
    tc = triton.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120.0)
    try:
        old = query_rgb(srv.url)
        clients = Clients(srv.url).start()
        clients.answered("queries answered before the new version exists", lambda a: a.kind == "query", n=16)
        train_next_version(model, seed=first + 23)
        time.sleep(1.0)
        assert np.array_equal(query_rgb(srv.url), old), "explicit mode served a version nobody loaded"
        tc.load_model("astronaut", headers=KEY)
        new = query_rgb(srv.url)
        loaded = time.monotonic()
        served = httpx.get(f"{srv.url}/v2/models/astronaut").json()["versions"]
        clients.answered(
            "queries started after the load returned", lambda a: a.kind == "query" and a.started > loaded, n=16
        )
        answers = clients.finish(at_least=SECONDS)
        rows = tc.get_model_repository_index(headers=KEY)
    finally:
        tc.close()
        srv.stop()
    assert served == [str(first + 1)]
    assert entry(rows, "astronaut", first + 1)["state"] == "READY"
    switched = check_switch(answers, old, new)
    print(
        f"\nexplicit: {len(answers)} answers, all 200, in {clients.ran:.1f} s; version {first + 1} served "
        f"from {switched - clients.t0:.1f} s"
    )
