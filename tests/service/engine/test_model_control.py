"""Model control modes and the V2 repository API, each against a real server over HTTP.

Faults: a version folder deleted while serving, `load` of an unknown model,
`unload` of a model with requests running, two `load` calls at once; load / unload refused
outside explicit mode; the repository calls restricted by --http-restricted-api.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from live import add_version, entry, index, private_repo, query_rgb, versions_on_disk, wait_for
from tritonclient.utils import InferenceServerException

from tests.servers import PY, ROOT, Server, in_flight

KEY = {"admin-key": "Rep0-Secret"}


def tclient(srv: Server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120.0)


@pytest.fixture
def repo(model_repo, tmp_path):
    return private_repo(model_repo, tmp_path / "models")


@pytest.fixture
def explicit(repo):
    srv = Server(
        repo,
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--http-restricted-api",
        f"model-repository:admin-key={KEY['admin-key']}",
    )
    with srv.running():
        yield srv


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_load_and_unload_are_refused_outside_explicit_mode_and_the_index_answers(repo, mode):
    srv = Server(repo, "--model-control-mode", mode).wait_ready()
    try:
        for action in ("load", "unload"):
            r = httpx.post(f"{srv.url}/v2/repository/models/digits/{action}")
            assert r.status_code == 400
            assert f"'{mode}'" in r.json()["error"] and "--model-control-mode explicit" in r.json()["error"]
        rows = index(srv.url)
        assert entry(rows, "digits")["state"] == "READY" and entry(rows, "astronaut")["state"] == "READY"
        assert (
            httpx.post(
                f"{srv.url}/v1/models/digits/classify", json={"images": [np.zeros((28, 28)).tolist()]}
            ).status_code
            == 200
        )
        assert "model_repository" in httpx.get(f"{srv.url}/v2").json()["extensions"]
    finally:
        srv.stop()


def test_a_version_folder_deleted_while_serving(repo):
    """poll: the highest version's folder goes; the model falls back to the one left, no request fails.
    Then a model folder is moved out (unloaded) and back in (loaded)."""
    second = add_version(repo / "astronaut")
    srv = Server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.3").wait_ready()
    try:
        assert entry(index(srv.url), "astronaut", second)["state"] == "READY"
        statuses, stop = [], threading.Event()

        def hammer():
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                while not stop.is_set():
                    statuses.append(c.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]}).status_code)

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        wait_for(lambda: len(statuses) >= 20, 60, "answers before the deletion")
        shutil.rmtree(repo / "astronaut" / str(second))
        wait_for(lambda: entry(index(srv.url), "astronaut", second) is None, 30, "the deleted version to go")
        gone = len(statuses)
        wait_for(lambda: len(statuses) >= gone + 20, 60, "answers after the version went")
        stop.set()
        for t in threads:
            t.join()
        assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
        assert entry(index(srv.url), "astronaut", second - 1)["state"] == "READY"
        r = httpx.post(f"{srv.url}/v2/models/astronaut/versions/{second}/infer", json={"inputs": []})
        assert r.status_code == 404
        # a whole folder moved out: the model is unloaded; moved back in: a new model, loaded
        (repo / "digits").rename(repo.parent / "digits")
        wait_for(lambda: entry(index(srv.url), "digits") is None, 30, "the removed model to be unloaded")
        assert httpx.get(f"{srv.url}/v1/models/digits").status_code == 404
        (repo.parent / "digits").rename(repo / "digits")
        wait_for(lambda: (entry(index(srv.url), "digits") or {}).get("state") == "READY", 30, "the new model")
        assert (
            httpx.post(
                f"{srv.url}/v1/models/digits/classify", json={"images": [np.zeros((28, 28)).tolist()]}
            ).status_code
            == 200
        )
    finally:
        srv.stop()


def test_none_mode_ignores_a_deleted_version_folder_and_keeps_serving(repo):
    srv = Server(repo).wait_ready()
    try:
        before = query_rgb(srv.url)
        shutil.rmtree(repo / "astronaut" / str(versions_on_disk(repo / "astronaut")[-1]))
        time.sleep(0.5)
        assert np.array_equal(query_rgb(srv.url), before)
    finally:
        srv.stop()


def test_load_of_an_unknown_model_is_404_and_bad_bodies_are_400(explicit):
    r = httpx.post(f"{explicit.url}/v2/repository/models/no-such-model/load", headers=KEY)
    assert r.status_code == 404 and "unknown model 'no-such-model'" in r.json()["error"]
    r = httpx.post(
        f"{explicit.url}/v2/repository/models/digits/load", headers=KEY, json={"parameters": {"config": "{}"}}
    )
    assert r.status_code == 400 and "config" in r.json()["error"]
    r = httpx.post(f"{explicit.url}/v2/repository/index", headers=KEY, content=b"{nope")
    assert r.status_code == 400 and "invalid JSON" in r.json()["error"]
    r = httpx.post(f"{explicit.url}/v2/repository/index", headers=KEY, json={"ready": "yes"})
    assert r.status_code == 400
    r = httpx.post(f"{explicit.url}/v2/repository/models/no-such-model/unload", headers=KEY)
    assert r.status_code == 404
    assert httpx.get(f"{explicit.url}/health/live").status_code == 200


def test_two_loads_at_once_both_succeed_and_leave_one_ready_model(explicit, repo):
    new = add_version(repo / "astronaut")
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(
                lambda _: httpx.post(f"{explicit.url}/v2/repository/models/astronaut/load", headers=KEY, timeout=120),
                range(2),
            )
        )
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    rows = [r for r in index(explicit.url, KEY) if r["name"] == "astronaut"]
    assert rows == [{"name": "astronaut", "version": str(new), "state": "READY", "reason": ""}]
    assert httpx.get(f"{explicit.url}/v2/models/astronaut").json()["versions"] == [str(new)]


HOLD_S = 8.0  # the queue delay that holds each query in the batcher: far longer than an unload takes


def test_unload_with_requests_running_lets_them_finish(repo):
    """Requests in flight by construction, not by being slow: under Triton's delay policy with an 8 s
    max_queue_delay, each 8-row query waits in astronaut's batch queue for 8 s after it arrives (its batch
    never fills), holding the runtime. The unload comes once the server counts all six in flight."""
    config = repo / "astronaut" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "max_queue_delay_microseconds: 500", f"max_queue_delay_microseconds: {int(HOLD_S * 1e6)}"
        )
    )
    srv = Server(
        repo,
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--http-restricted-api",
        f"model-repository:admin-key={KEY['admin-key']}",
        env={"INR_BATCH_POLICY": "delay", "INR_QUEUE_TIMEOUT_S": "60"},
    )
    with srv.running(), ThreadPoolExecutor(6) as pool:
        coords = np.random.default_rng(0).random((8, 2)).tolist()
        idle = in_flight(srv.url)  # the scrape itself, if the gauge counts it
        running = [
            pool.submit(httpx.post, f"{srv.url}/v1/models/astronaut/query", json={"coords": coords}, timeout=120)
            for _ in range(6)
        ]
        wait_for(lambda: in_flight(srv.url) >= idle + 6, timeout=30, what="six queries in flight")
        r = httpx.post(f"{srv.url}/v2/repository/models/astronaut/unload", headers=KEY, timeout=60)
        still_running = sum(not f.done() for f in running)
        results = [f.result() for f in running]
        assert r.status_code == 200, r.text
        assert still_running == 6, f"{6 - still_running} queries finished before the unload returned"
        assert [q.status_code for q in results] == [200] * 6, [q.text for q in results]
        assert all(np.asarray(q.json()["rgb"]).shape == (8, 3) for q in results)
        assert httpx.post(f"{srv.url}/v1/models/astronaut/query", json={"coords": coords}).status_code == 404
        assert entry(index(srv.url, KEY), "astronaut") == {
            "name": "astronaut",
            "state": "UNAVAILABLE",
            "reason": "unloaded",
        }
        assert httpx.post(f"{srv.url}/v2/repository/models/astronaut/load", headers=KEY).status_code == 200
        assert query_rgb(srv.url).shape == (8, 3)


def test_tritonclient_repository_calls_need_the_key(explicit):
    tc = tclient(explicit)
    for call in (
        lambda h: tc.get_model_repository_index(headers=h),
        lambda h: tc.load_model("digits", headers=h),
        lambda h: tc.unload_model("digits", headers=h),
    ):
        with pytest.raises(InferenceServerException) as e:
            call(None)
        assert e.value.status() == "403" and "model-repository" in e.value.message()
        assert "Rep0-Secret" not in e.value.message()
    names = {r["name"] for r in tc.get_model_repository_index(headers=KEY)}
    assert {"astronaut", "digits"} <= names
    tc.unload_model("digits", headers=KEY)
    assert not tc.is_model_ready("digits")
    assert entry(tc.get_model_repository_index(headers=KEY), "digits")["state"] == "UNAVAILABLE"
    tc.load_model("digits", headers=KEY)
    assert tc.is_model_ready("digits")
    assert [
        r["name"] for r in httpx.post(f"{explicit.url}/v2/repository/index", headers=KEY, json={"ready": True}).json()
    ] == ["astronaut", "digits"]
    tc.close()


def test_explicit_mode_loads_only_the_load_model_names_at_start(repo):
    srv = Server(repo, "--model-control-mode", "explicit", "--load-model", "digits").wait_ready()
    try:
        assert httpx.get(f"{srv.url}/v1/models/astronaut").status_code == 404
        assert entry(index(srv.url), "astronaut") == {"name": "astronaut", "state": "UNAVAILABLE", "reason": "unloaded"}
        assert entry(index(srv.url), "digits")["state"] == "READY"
        assert httpx.post(f"{srv.url}/v2/repository/models/astronaut/load").status_code == 200
        assert query_rgb(srv.url).shape == (8, 3)
    finally:
        srv.stop()


def test_a_broken_new_version_leaves_the_old_one_serving_and_the_index_says_why(explicit, repo):
    before = query_rgb(explicit.url)
    bad = add_version(repo / "astronaut", corrupt=True)
    r = httpx.post(f"{explicit.url}/v2/repository/models/astronaut/load", headers=KEY)
    assert r.status_code == 400 and f"version {bad}" in r.json()["error"], r.text
    row = entry(index(explicit.url, KEY), "astronaut", bad)
    assert row["state"] == "UNAVAILABLE" and row["reason"], row
    assert entry(index(explicit.url, KEY), "astronaut", bad - 1)["state"] == "READY"
    assert np.array_equal(query_rgb(explicit.url), before)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--load-model", "digits"], "error: --load-model needs --model-control-mode explicit\n"),
        (["--model-control-mode", "explicit", "--load-model", "nope"], "error: --load-model nope: no model folder"),
        (
            ["--model-control-mode", "explicit", "--load-model", "*", "--load-model", "digits"],
            "error: --load-model '*' must be the only --load-model\n",
        ),
        (
            ["--model-control-mode", "explicit", "--workers", "2"],
            "error: --model-control-mode explicit needs --workers 1",
        ),
        (
            ["--model-control-mode", "sometimes"],
            "error: python -m service: argument --model-control-mode: invalid choice",
        ),
        (["--repository-poll-secs", "-1"], "error: --repository-poll-secs: Input should be greater than 0"),
    ],
)
def test_bad_model_control_options_are_one_line_errors(repo, args, message):
    r = subprocess.run(
        [PY, "-m", "service", "--models", str(repo), *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr
