"""Models loaded on first use under a memory budget (service/engine/residency.py), on the real server: a collection
of copies of the bundled photo model (tens of megabytes each, so that the measured bytes are far above the
resident set's noise), budgets that hold a few of them, and the index, /metrics and the model detail read from
the outside."""

from __future__ import annotations

import os
import random
import shutil
import threading
from pathlib import Path

import httpx
import pytest

from tests.servers import Server, wait_for

N = 6


PHOTO = Path(__file__).resolve().parents[3] / "models" / "dandelion"


@pytest.fixture(scope="module")
def collection(model_repo, tmp_path_factory):
    repo = tmp_path_factory.mktemp("collection")
    for i in range(N):
        copy_model(PHOTO, repo / f"m{i}")
    shutil.copytree(model_repo / "digits", repo / "digits")
    # The servers here share one session cache, filled before anything is measured: a load that optimises the
    # graph and writes it measures more than one that reads it (service/engine/session_cache.py), and the
    # budgets below are sized from one measured load. The copies share one file.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("INR_SESSION_CACHE", str(tmp_path_factory.mktemp("sessions")))
        srv = Server(repo, "--grpc-port", "0")
        with srv.running():
            assert query(srv, "m0").status_code == 200 and classify(srv).status_code == 200
        yield repo


def copy_model(src, dst):
    """The model folder under another name (config.pbtxt names its folder); its files hard links where they can be."""
    try:
        shutil.copytree(src, dst, copy_function=os.link)
    except OSError:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
    config = dst / "config.pbtxt"
    config.unlink()  # a link: written anew, not through the link
    config.write_text((src / "config.pbtxt").read_text().replace(f'name: "{src.name}"', f'name: "{dst.name}"'))


@pytest.fixture(scope="module")
def measured(collection) -> dict[str, int]:
    """What a photo copy (the first loaded, and one after it) and the digits model take, as the service measures them
    (1 GiB: nothing unloaded)."""
    srv = Server(collection, "--memory-budget", "1GiB", "--grpc-port", "0")
    with srv.running():
        assert query(srv, "m0").status_code == 200 and classify(srv).status_code == 200
        assert query(srv, "m1").status_code == 200
        sizes = {}
        for name in ("m0", "m1", "digits"):
            version = httpx.get(f"{srv.url}/v1/models/{name}").json()["versions"][0]
            assert version["resident"] and version["bytes"] > 0
            assert version["load_peak_bytes"] >= version["bytes"]
            sizes[name] = version["bytes"]
            sizes[f"{name} peak"] = version["load_peak_bytes"]
        return sizes


@pytest.fixture(scope="module")
def one_model_bytes(measured) -> int:
    return measured["m0"]


@pytest.fixture(scope="module")
def headroom(measured) -> int:
    """The room a photo copy's load needs beyond its result (its transient, which the budget also holds)."""
    return measured["m0 peak"] - measured["m0"]


def classify(srv) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/models/digits/classify", json={"images": [[0.0] * 784]}, timeout=60)


def query(srv, name: str, timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/models/{name}/query", json={"coords": [[0.5, 0.5]]}, timeout=timeout)


def resident(srv) -> set[str]:
    rows = httpx.post(f"{srv.url}/v2/repository/index", json={}, timeout=30).json()
    return {r["name"] for r in rows if r["state"] == "READY" and not r["reason"]}


def metric(srv, name: str) -> float:
    text = httpx.get(f"{srv.url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_models_load_on_first_use_and_the_least_recently_used_go_past_the_budget(collection, measured):
    # room for the first copy and another's load, not for a third copy's: a server's first load measures more than
    # the next (its one-time allocations), and a load's peak is about twice a copy's bytes
    budget = measured["m0"] + measured["m0 peak"] + measured["m1"] // 4
    srv = Server(collection, "--memory-budget", str(budget), "--grpc-port", "0")
    with srv.running():
        assert resident(srv) == set()  # listed, nothing loaded at start
        rows = httpx.post(f"{srv.url}/v2/repository/index", json={}).json()
        assert {r["reason"] for r in rows if r["name"].startswith("m")} == {"not resident: loads on first use"}
        for name in ("m0", "m1"):
            assert query(srv, name).status_code == 200
        assert resident(srv) == {"m0", "m1"}
        assert query(srv, "m0").status_code == 200  # m0 used last: m1 is the least recently used
        assert query(srv, "m2").status_code == 200
        assert resident(srv) == {"m0", "m2"}
        assert metric(srv, "inr_model_evictions_total") == 1
        assert metric(srv, 'inr_model_loads_total{result="loaded"}') == 3
        assert metric(srv, "inr_models_resident") == 2
        assert metric(srv, "inr_model_resident_bytes") <= budget
        assert metric(srv, "inr_model_memory_budget_bytes") == budget
        assert metric(srv, "inr_model_load_duration_seconds_count") == 3
        assert metric(srv, "inr_model_load_wait_seconds_count") == 3


def test_concurrent_first_requests_share_one_load(collection, one_model_bytes, headroom):
    srv = Server(collection, "--memory-budget", str(4 * one_model_bytes + headroom), "--grpc-port", "0")
    with srv.running():
        go, answers = threading.Barrier(8), []

        def ask():
            go.wait()
            answers.append(query(srv, "m3").status_code)

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [200] * 8
        assert metric(srv, 'inr_model_loads_total{result="loaded"}') == 1


def test_a_model_in_use_is_not_unloaded_and_a_pinned_one_never(collection, one_model_bytes, headroom):
    """A long render holds m1 while other models need room; m0 is pinned. Budget: three copies and a load."""
    budget = int(3.5 * one_model_bytes) + headroom
    srv = Server(
        collection,
        "--memory-budget",
        str(budget),
        "--pin-model",
        "m0",
        "--grpc-port",
        "0",
        # the held render is dear on purpose: past the default cost ceiling (INR_RENDER_MAX_COST_S)
        env={"INR_RENDER_TIMEOUT_S": "300", "INR_MAX_RENDER_PIXELS": "40000000", "INR_RENDER_MAX_COST_S": "100000"},
    )
    with srv.running():
        assert resident(srv) == {"m0"}  # pinned: loaded at start
        render = {}
        thread = threading.Thread(
            target=lambda: render.setdefault(
                "r",
                httpx.post(
                    f"{srv.url}/v1/models/m1/render",
                    # turned: through the whole graph, seconds long (the lattice kernel paints it in ~0.2 s, and
                    # m1 went idle, and was the one evicted, before m4 came)
                    json={"width": 5000, "height": 5000, "transform": {"rotate": 30}, "format": "jpeg"},
                    timeout=300,
                ),
            )
        )
        thread.start()
        wait_for(lambda: "m1" in resident(srv), 60, "m1 to load for its render")
        for name in ("m2", "m3", "m4"):
            assert query(srv, name).status_code == 200
            assert {"m0", "m1", name} <= resident(srv)  # the others go, not the pinned or the busy one
        thread.join()
        assert render["r"].status_code == 200
        evictions = metric(srv, "inr_model_evictions_total")
        assert query(srv, "m5").status_code == 200
        now = resident(srv)
        assert {"m0", "m5"} <= now and metric(srv, "inr_model_resident_bytes") <= budget
        if "m1" in now:  # a copy's bytes vary a little from load to load: four may fit, and then nothing went
            assert metric(srv, "inr_model_evictions_total") == evictions
        else:  # idle now and the least recently used: m1 went first for m5 (m4 too, if m5 measured more)
            assert metric(srv, "inr_model_evictions_total") > evictions


def test_a_model_larger_than_the_budget_is_refused_and_the_others_serve(collection, measured):
    assert measured["digits"] < measured["m0"]
    srv = Server(collection, "--memory-budget", str((measured["digits"] + measured["m0"]) // 2), "--grpc-port", "0")
    with srv.running():
        r = query(srv, "m0")
        assert r.status_code == 507
        assert "more than the whole memory budget" in r.json()["error"] and "--memory-budget" in r.json()["error"]
        assert query(srv, "m0").status_code == 507  # known now: refused without a second load
        assert metric(srv, 'inr_model_loads_total{result="too_large"}') == 2
        assert classify(srv).status_code == 200


def test_a_flood_of_cold_models_waits_or_gets_503_and_never_fails(collection, one_model_bytes, headroom):
    budget = int(1.5 * one_model_bytes) + headroom
    srv = Server(
        collection,
        "--memory-budget",
        str(budget),
        "--max-concurrent-loads",
        "1",
        "--grpc-port",
        "0",
        env={"INR_QUEUE_TIMEOUT_S": "0.2"},
    )
    with srv.running():
        answers = []
        go = threading.Barrier(2 * N)

        def ask(name):
            go.wait()
            answers.append(query(srv, name))

        threads = [threading.Thread(target=ask, args=(f"m{i % N}",)) for i in range(2 * N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in answers)
        assert set(codes) <= {200, 503} and 200 in codes, codes
        assert all("retry-after" in r.headers for r in answers if r.status_code == 503)
        assert metric(srv, "inr_model_resident_bytes") <= budget
        assert query(srv, "m0", timeout=60).status_code in (200, 503)
        assert httpx.get(f"{srv.url}/health/ready").status_code == 200


def test_churn_over_a_small_budget_answers_every_request(collection, one_model_bytes, headroom):
    """Eight clients asking tiles of six models at random, room for two: models are unloaded and loaded again all
    along, and a request that comes for a model chosen to go waits until it has gone and loads it again (never a
    session half gone: before, such a tile now and then failed with 500, a render on an unloaded session)."""
    budget = 2 * one_model_bytes + headroom
    env = {"INR_QUEUE_TIMEOUT_S": "30", "INR_RENDER_CACHE_BYTES": "0"}
    srv = Server(collection, "--memory-budget", str(budget), "--grpc-port", "0", env=env)
    with srv.running():
        codes, stop = [], threading.Event()

        def client(seed):
            rng = random.Random(seed)
            with httpx.Client(base_url=srv.url, timeout=60) as c:
                while not stop.is_set():
                    x = 256 * rng.randrange(4)
                    codes.append(c.get(f"/iiif/3/m{rng.randrange(N)}/{x},0,512,512/256,/0/default.jpg").status_code)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: metric(srv, "inr_model_evictions_total") >= 30, 120, "30 evictions")
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert codes and set(codes) == {200}, {c: codes.count(c) for c in set(codes)}
        assert metric(srv, "inr_model_resident_bytes") <= budget


def test_the_model_list_and_the_index_come_in_pages(collection):
    srv = Server(collection, "--grpc-port", "0")
    with srv.running():
        names, url = [], "/v1/models?limit=3"
        while url:
            page = httpx.get(f"{srv.url}{url}").json()
            assert len(page["models"]) <= 3
            names += [m["name"] for m in page["models"]]
            url = page.get("next")
        assert names == ["digits", *(f"m{i}" for i in range(N))]
        assert [m["name"] for m in httpx.get(f"{srv.url}/v1/models?q=IG").json()["models"]] == ["digits"]
        rows = httpx.post(f"{srv.url}/v2/repository/index", json={"limit": 2, "after": "m2"}).json()
        assert [r["name"] for r in rows] == ["m3", "m4"]
        assert httpx.get(f"{srv.url}/v1/models?limit=0").status_code == 422
        assert httpx.post(f"{srv.url}/v2/repository/index", json={"limit": "all"}).status_code == 400


def test_a_broken_model_added_and_a_resident_one_deleted_while_serving(collection, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(collection, repo)
    srv = Server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.2", "--grpc-port", "0")
    with srv.running():
        assert query(srv, "m0").status_code == 200
        broken = repo / "broken"
        copy_model(repo / "m1", broken)
        (broken / "1" / "model.onnx").unlink()  # a link to m1's: replaced, not written through
        (broken / "1" / "model.onnx").write_bytes(b"not an onnx file")
        wait_for(lambda: httpx.get(f"{srv.url}/v1/models/broken").status_code == 200, 30, "the new folder")
        r = query(srv, "broken")
        assert r.status_code == 503 and "sha256" in r.json()["error"]  # listed failed at its first use
        assert httpx.get(f"{srv.url}/v1/models/broken").json()["status"] == "failed"
        assert query(srv, "m1").status_code == 200  # the others are unaffected
        shutil.rmtree(repo / "m0")
        wait_for(lambda: query(srv, "m0").status_code == 404, 30, "m0 to be gone")
        assert "m0" not in resident(srv)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--memory-budget", "lots"), "--memory-budget: expected a size such as 2GiB"),
        (("--memory-budget", "1KiB", "--pin-model", "m0"), "is below the pinned models'"),
        (("--pin-model", "nope"), "--pin-model nope: no model folder"),
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2(collection, args, message):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "service", "--models", str(collection), "--port", "0", "--grpc-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in (r.stderr + r.stdout).splitlines() if "error:" in line]
    assert r.returncode == 2 and len(errors) == 1 and message in errors[0], r.stderr
    assert "Traceback" not in r.stderr
