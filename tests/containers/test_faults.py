"""Three api replicas behind nginx, and the faults a deployment meets: requests spread over the
replicas (by their own counters), a replica drained by a stop with a render running on it, a
replica killed under load, and a render as large as the limits allow under the memory limit."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from .stack import Stack, metric

REPLICAS = 3


# The 4096² render's deadline: its memory, not its speed, is what test_the_largest_render_under_the_memory_limit
# checks, and on a loaded 2-core machine it can take longer than the default 60 s.
RENDER_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def stack(make_stack, report) -> Stack:
    s = make_stack("scale")
    s.env["INR_RENDER_TIMEOUT_S"] = str(RENDER_TIMEOUT_S)
    report[f"time_to_healthy_{REPLICAS}_replicas_s"] = round(s.up(REPLICAS), 1)
    return s


def wait_replicas(stack: Stack, n: int = REPLICAS, timeout: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = stack.containers()
        if len(names) >= n and all(stack.health(c) == "healthy" for c in names):
            return names
        time.sleep(1)
    raise AssertionError(f"fewer than {n} healthy replicas after {timeout} s: {stack.containers()}")


def served(stack: Stack, replica: str) -> float:
    return metric(stack.replica_metrics(replica), "nv_inference_request_success", model="astronaut")


def test_requests_reach_several_replicas_by_their_own_counters(stack, report):
    replicas = wait_replicas(stack)
    before = {r: served(stack, r) for r in replicas}
    with httpx.Client(base_url=stack.url, timeout=60) as c:
        for i in range(60):
            r = c.post("/v1/models/astronaut/query", json={"coords": [[i / 60, 0.5]]})
            assert r.status_code == 200, r.text
    counts = {r: served(stack, r) - before[r] for r in replicas}
    report["scale_requests_per_replica"] = sorted(int(v) for v in counts.values())
    assert sum(counts.values()) == 60
    assert sum(1 for v in counts.values() if v > 0) >= 2, counts


def in_flight(stack: Stack, replica: str) -> float:
    return metric(stack.replica_metrics(replica), "inr_requests_in_flight") - 1  # less the scrape itself


def test_a_stopped_replica_finishes_its_render_while_the_others_answer(stack, report):
    replicas = wait_replicas(stack)
    size = 1536
    result = {}

    def long_render():
        with httpx.Client(base_url=stack.url, timeout=120) as c:
            r = c.post("/v1/models/astronaut/render", json={"width": size, "height": size})
            result["render"] = (r.status_code, r.content)

    render = threading.Thread(target=long_render)
    render.start()
    busy = None
    deadline = time.monotonic() + 30
    while busy is None and time.monotonic() < deadline and render.is_alive():
        busy = next((r for r in replicas if in_flight(stack, r) >= 1), None)
    assert busy is not None, "no replica reported the render in flight"

    stop = {}

    def stop_it():
        t0 = time.monotonic()
        stack.engine("stop", "-t", "30", busy)
        stop["s"] = time.monotonic() - t0

    stopper = threading.Thread(target=stop_it)
    stopper.start()
    codes = []
    with httpx.Client(base_url=stack.url, timeout=60) as c:
        while stopper.is_alive():
            codes.append(c.post("/v1/models/astronaut/query", json={"coords": [[0.3, 0.3]]}).status_code)
    stopper.join()
    render.join(120)
    status, png = result["render"]
    report["drain"] = {
        "render_status": status,
        "stop_s": round(stop["s"], 1),
        "requests_during_stop": len(codes),
        "failures_during_stop": sum(c != 200 for c in codes),
    }
    assert status == 200 and Image.open(io.BytesIO(png)).size == (size, size)
    assert codes and set(codes) == {200}, codes
    assert stop["s"] < 30, "the replica did not exit on its own before the stop timeout"
    assert stack.engine.inspect(busy)["State"]["ExitCode"] in (0, 143)
    stack.engine("start", busy)


def crash(stack: Stack, container: str) -> None:
    """SIGKILL the replica's process from outside, as the kernel's OOM killer or a crash would: the
    restart policy applies (an engine `kill` counts as a user's stop for Podman and is not restarted)."""
    try:
        os.kill(stack.engine.inspect(container)["State"]["Pid"], signal.SIGKILL)
    except PermissionError:  # an engine on another machine, or rootless: its own kill
        stack.engine("kill", "--signal", "KILL", container)


def test_a_replica_killed_under_load_costs_no_get_and_no_infer(stack, report):
    replicas = wait_replicas(stack)
    victim = replicas[1]
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32).round(3)
    v2 = {"inputs": [{"name": "images", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": x.ravel().tolist()}]}
    done = []
    killed, kill_lock = threading.Event(), threading.Lock()

    def one(i: int):
        kind = "post_infer" if i % 2 else "get_render"
        with httpx.Client(base_url=stack.url, timeout=60) as c:
            try:
                if kind == "post_infer":
                    r = c.post("/v2/models/digits/infer", json=v2)
                else:  # a different tile each time: nginx cannot answer it from its cache
                    x0 = (i % 37) / 40
                    r = c.get(
                        "/v1/models/astronaut/render",
                        params={"width": 128, "height": 128, "viewport": f"{x0},0.1,{x0 + 0.05},0.15"},
                    )
                done.append((kind, r.status_code))
            except httpx.HTTPError as e:
                done.append((kind, type(e).__name__))
        with kill_lock:
            if len(done) >= 60 and not killed.is_set():
                killed.set()
                crash(stack, victim)

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(one, range(240)))
    assert killed.is_set()
    failures = {kind: sum(1 for k, s in done if k == kind and s != 200) for kind in ("get_render", "post_infer")}
    report["sigkill_under_load"] = {
        "requests": len(done),
        **{f"{k}_failures": v for k, v in failures.items()},
        "restarts_by_policy": stack.engine.inspect(victim)["RestartCount"],
    }
    assert len(done) == 240
    assert failures["get_render"] == 0, done
    assert failures["post_infer"] == 0, done  # nginx retries inference POSTs too (deploy/nginx)
    assert wait_replicas(stack, timeout=120)  # `restart: unless-stopped` brings the replica back


def peak_mb(stack: Stack, container: str) -> float:
    """The container's peak memory, from its cgroup (v1 or v2); -1 where the cgroup does not say."""
    read = stack.engine(
        "exec",
        container,
        "sh",
        "-c",
        "cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes /sys/fs/cgroup/memory.peak 2>/dev/null",
        check=False,
    ).stdout.split()
    return round(int(read[0]) / 2**20) if read else -1


# Inside a replica, straight to its port: nginx's proxy_read_timeout (60 s) would cut a render that is slow
# only because the machine is busy. Prints the status and the PNG's width and height (IHDR).
RENDER_4096 = (
    'python -c "import json, struct, urllib.request as u; r = u.urlopen(u.Request('
    "'http://127.0.0.1:8000/v1/models/astronaut/render', json.dumps({'width': 4096, 'height': 4096, "
    f"'format': 'png'}}).encode(), {{'content-type': 'application/json'}}), timeout={RENDER_TIMEOUT_S}); "
    "b = r.read(); print(r.status, *struct.unpack('>II', b[16:24]))\""
)


def test_the_largest_render_under_the_memory_limit(stack, report):
    replicas = wait_replicas(stack, timeout=180)
    before = {r: stack.engine.inspect(r)["RestartCount"] for r in replicas}
    t0 = time.monotonic()
    ran = stack.engine("exec", replicas[0], "sh", "-c", RENDER_4096, check=False, timeout=RENDER_TIMEOUT_S + 60)
    outcome = ran.stdout.strip() if ran.returncode == 0 else f"exit {ran.returncode}: {ran.stderr.strip()[-300:]}"
    states = {rep: stack.engine.inspect(rep)["State"] for rep in replicas}
    oom = [rep for rep, s in states.items() if s.get("OOMKilled")]
    restarts = {rep: stack.engine.inspect(rep)["RestartCount"] - before[rep] for rep in replicas}
    report["render_4096_under_1g"] = {
        "outcome": outcome,
        "seconds": round(time.monotonic() - t0, 1),
        "oom_killed": len(oom),
        "restarts": sum(restarts.values()),
        "peak_mb": max(peak_mb(stack, rep) for rep in replicas),
    }
    assert outcome == "200 4096 4096" or oom or any(restarts.values()), f"failed without an OOM kill: {outcome}"
    wait_replicas(stack, timeout=180)
    with httpx.Client(base_url=stack.url, timeout=120) as c:
        assert c.get("/health/ready").status_code == 200
        assert c.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]}).status_code == 200
