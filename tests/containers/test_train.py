"""The `train` profile writes into the models folder that the api mounts read-only and polls: two fits
become version 1 then version 2 of a new model, served without a restart and without a failed request,
and nginx's cache never answers a version-pinned URL with another version's image."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from .stack import Stack

NAME = "fitted"
PINNED = "/v1/models/" + NAME + "/versions/{v}/render?width=64&height=64"


@pytest.fixture(scope="module")
def stack(make_stack) -> Stack:
    s = make_stack("train")
    s.up(1)
    return s


def fit(stack: Stack, seed: int) -> float:
    t0 = time.monotonic()
    stack.compose(
        "--profile",
        "train",
        "run",
        "--rm",
        "train",
        "fit-image",
        "--image",
        "astronaut",
        "--size",
        "32",
        "--steps",
        "30",
        "--width",
        "32",
        "--depth",
        "2",
        "--features",
        "32",
        "--seed",
        str(seed),
        "--no-progress",
        "--out",
        f"models/{NAME}",
        timeout=600,
    )
    return time.monotonic() - t0


def serving_version(c: httpx.Client) -> int | None:
    r = c.get(f"/v1/models/{NAME}")
    return r.json().get("version") if r.status_code == 200 and r.json().get("status") == "ready" else None


def wait_version(c: httpx.Client, version: int, timeout: float = 90) -> float:
    t0 = time.monotonic()
    while serving_version(c) != version:
        assert time.monotonic() - t0 < timeout, f"version {version} of {NAME} not served after {timeout} s"
        time.sleep(0.25)
    return time.monotonic() - t0


def test_two_fits_are_served_as_versions_1_and_2_without_a_restart_or_a_failure(stack, report):
    (api,) = stack.containers()
    started = stack.engine.inspect(api)["State"]["StartedAt"]
    answers: list[int] = []
    stop = threading.Event()

    def query_throughout():
        with httpx.Client(base_url=stack.url, timeout=30) as c:
            while not stop.is_set():
                answers.append(c.post(f"/v1/models/{NAME}/query", json={"coords": [[0.5, 0.5]]}).status_code)
                time.sleep(0.05)

    client = threading.Thread(target=query_throughout)
    client.start()
    try:
        with httpx.Client(base_url=stack.url, timeout=60) as c:
            fit1 = fit(stack, seed=1)
            seen1 = wait_version(c, 1)
            v1 = c.get(PINNED.format(v=1))
            assert v1.status_code == 200
            assert c.get(PINNED.format(v=1)).headers["x-cache-status"] == "HIT"
            fit2 = fit(stack, seed=2)
            seen2 = wait_version(c, 2)
            time.sleep(1)  # queries go on against version 2
            v1_again, v2 = c.get(PINNED.format(v=1)), c.get(PINNED.format(v=2))
            latest = c.post(f"/v1/models/{NAME}/render", json={"width": 64, "height": 64})  # POST: never cached
    finally:
        stop.set()
        client.join(30)
    report["train_profile"] = {
        "fit_s": [round(fit1, 1), round(fit2, 1)],
        "served_after_fit_s": [round(seen1, 1), round(seen2, 1)],
        "queries": len(answers),
    }
    first_ok = answers.index(200)
    assert set(answers[:first_ok]) <= {404}, "before version 1 the model is unknown"
    assert set(answers[first_ok:]) == {200}, f"a query failed while versions were switched: {answers[first_ok:]}"
    assert stack.engine.inspect(api)["State"]["StartedAt"] == started and stack.engine.inspect(api)["RestartCount"] == 0
    # the pinned URLs: version 1's image stays version 1's, version 2's is the new model's
    assert v1_again.status_code == 200 and v1_again.content == v1.content
    assert v2.status_code == 200 and v2.content != v1.content
    assert v2.content == latest.content
