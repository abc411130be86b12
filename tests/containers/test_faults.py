"""Three api replicas behind nginx, sharded by model (docs/sharding.md, "Sharding"), and the faults a
deployment meets: each model's requests on one replica and the models spread over the replicas, requests that
name no model spread (by the replicas' own counters), a replica drained by a stop with a render running on
it, a replica killed under load (its models served by the others, no request failed), and a render as large
as the limits allow under the memory limit."""

from __future__ import annotations

import io
import os
import shutil
import signal
import threading
import time
from collections import Counter
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


# A collection of image models: the bundled two, and astronaut under eight more names
COPIES = [f"shard-{i}" for i in range(8)]
IMAGES = ["astronaut", "dandelion", *COPIES]
MODELS = [*IMAGES, "digits"]


def copy_model(models, source: str, name: str) -> None:
    shutil.copytree(models / source, models / name)
    config = models / name / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{source}"', f'name: "{name}"'))


@pytest.fixture(scope="module")
def stack(make_stack, report) -> Stack:
    s = make_stack("scale")
    s.env["INR_RENDER_TIMEOUT_S"] = str(RENDER_TIMEOUT_S)
    s.env["INR_RENDER_MAX_COST_S"] = "100000"  # its 4096² render is dear on purpose: past the default cost ceiling
    for name in COPIES:
        copy_model(s.models, "astronaut", name)
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


def requests(samples: dict, **labels) -> float:
    """HTTP requests a replica answered (`inr_request_duration_seconds` counts them by model and route)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == "inr_request_duration_seconds_count" and want <= set(ls))


def per_model(before: dict, after: dict, models=MODELS) -> dict[str, dict[str, float]]:
    """{replica: {model: requests it answered for the model between the two scrapes}}."""
    return {r: {m: requests(after[r], model=m) - requests(before[r], model=m) for m in models} for r in after}


def scrape(stack: Stack, replicas: list[str]) -> dict[str, dict]:
    return {r: stack.replica_metrics(r) for r in replicas}


FAIL_TIMEOUT_S = 10  # nginx's default fail_timeout for the upstream's servers (max_fails=1)


def owners(stack: Stack, replicas: list[str], settle_s: float = 120) -> dict[str, str]:
    """The replica each model's requests go to, by the replicas' own counters. Each nginx worker skips a replica for
    FAIL_TIMEOUT_S after a refused connection or a 503 (as when it was starting or draining) and sends its models to
    the next on the ring; when every worker skips the same one, the map looks settled but is not. So the map is
    trusted only when no model is answered by two replicas and two maps taken more than FAIL_TIMEOUT_S apart agree."""
    t0 = time.monotonic()
    last: tuple[float, dict[str, str]] | None = None
    while True:
        taken = time.monotonic()
        before = scrape(stack, replicas)
        with httpx.Client(base_url=stack.url, timeout=60) as c:
            for m in MODELS:
                for _ in range(2):
                    assert c.get(f"/v1/models/{m}").status_code == 200
        served = per_model(before, scrape(stack, replicas))
        on = {m: [r for r in replicas if served[r][m]] for m in MODELS}
        split = {m: rs for m, rs in on.items() if len(rs) != 1}
        now = {m: rs[0] for m, rs in on.items()} if not split else None
        if now is not None and last is not None and last[1] == now and taken - last[0] > FAIL_TIMEOUT_S:
            return now
        if now is not None and (last is None or last[1] != now):
            last = (taken, now)
        assert time.monotonic() - t0 < settle_s, f"no settled map of models to replicas in {settle_s} s: {split or now}"
        time.sleep(2)


def model_routes(name: str) -> list[tuple[str, str, dict | None]]:
    """Requests that name the image model `name`, over v1, V2 and IIIF."""
    return [
        ("GET", f"/v1/models/{name}", None),
        ("POST", f"/v1/models/{name}/query", {"coords": [[0.5, 0.5]]}),
        ("GET", f"/v2/models/{name}", None),
        ("GET", f"/v2/models/{name}/ready", None),
        ("GET", f"/iiif/3/{name}/info.json", None),
        ("GET", f"/iiif/3/{name}/full/16,/0/default.png", None),
    ]


PINNED = "shard-3"  # asked for as IIIF `shard-3@1` too: the replica hashes the name part


def test_each_model_is_served_by_one_replica_and_the_models_spread(stack, report):
    replicas = wait_replicas(stack)
    settled = owners(stack, replicas)
    before = scrape(stack, replicas)
    sent = Counter()
    with httpx.Client(base_url=stack.url, timeout=60) as c:
        for name in IMAGES:
            for method, path, body in model_routes(name):
                r = c.request(method, path, json=body)
                assert r.status_code == 200, (path, r.status_code, r.text)
                sent[name] += 1
        for _ in range(3):  # a version-pinned identifier is not a model name: the replica labels it ""
            assert c.get(f"/iiif/3/{PINNED}@1/info.json").status_code == 200
    after = scrape(stack, replicas)
    served = per_model(before, after, IMAGES)
    where = {}
    for name in IMAGES:
        on = {r: served[r][name] for r in replicas if served[r][name]}
        assert list(on.values()) == [sent[name]], f"{name}: {on}, sent {sent[name]}"
        where[name] = next(iter(on))
    pinned = "/iiif/3/{name}/info.json"
    pinned_on = [
        r
        for r in replicas
        if requests(after[r], endpoint=pinned, model="") > requests(before[r], endpoint=pinned, model="")
    ]
    assert pinned_on == [where[PINNED]], (pinned_on, where[PINNED])
    assert where == {m: settled[m] for m in IMAGES}
    spread = Counter(where.values())
    report["shards_models_per_replica"] = sorted(spread.values())
    report["shards_owner"] = {m: replicas.index(r) for m, r in where.items()}
    assert len(spread) >= 2, f"all {len(IMAGES)} models on one replica: {where}"  # 3 replicas: (1/3)^9


def test_requests_that_name_no_model_reach_several_replicas(stack, report):
    replicas = wait_replicas(stack)
    before = scrape(stack, replicas)
    with httpx.Client(base_url=stack.url, timeout=60) as c:
        for _ in range(30):
            assert c.get("/v1/models").status_code == 200
    after = scrape(stack, replicas)
    counts = {
        r: requests(after[r], endpoint="/v1/models") - requests(before[r], endpoint="/v1/models") for r in replicas
    }
    report["shards_model_list_per_replica"] = sorted(int(v) for v in counts.values())
    assert sum(counts.values()) == 30
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


def loads(samples: dict) -> float:
    """Models loaded on first use (the memory budget's `inr_model_loads_total`; 0 where the service has none)."""
    return metric(samples, "inr_model_loads", result="loaded")


def test_a_replica_killed_under_load_costs_no_request_and_its_models_move_to_the_others(stack, report):
    replicas = wait_replicas(stack)
    where = owners(stack, replicas)  # again: the drain test above restarted a replica, at a new address
    victim = Counter(where.values()).most_common(1)[0][0]
    survivors = [r for r in replicas if r != victim]
    theirs = [m for m in MODELS if where[m] == victim]
    x = np.random.default_rng(1).random((1, 1, 28, 28), dtype=np.float32).round(3)
    v2 = {"inputs": [{"name": "images", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": x.ravel().tolist()}]}
    done = []
    killed, kill_lock = threading.Event(), threading.Lock()
    before = scrape(stack, survivors)

    def one(i: int):
        name = IMAGES[i % len(IMAGES)]
        kind = ("post_infer", "get_render", "post_query")[i % 3]
        with httpx.Client(base_url=stack.url, timeout=60) as c:
            try:
                if kind == "post_infer":
                    r = c.post("/v2/models/digits/infer", json=v2)
                elif kind == "post_query":
                    r = c.post(f"/v1/models/{name}/query", json={"coords": [[(i % 50) / 50, 0.5]]})
                else:  # a different tile each time: nginx cannot answer it from its cache
                    x0 = (i % 37) / 40
                    r = c.get(
                        f"/v1/models/{name}/render",
                        params={"width": 64, "height": 64, "viewport": f"{x0},0.1,{x0 + 0.05},0.15"},
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
    after = scrape(stack, survivors)
    failures = {
        k: sum(1 for kind, s in done if kind == k and s != 200) for k in ("get_render", "post_query", "post_infer")
    }
    served = per_model(before, after)
    # the ring once the victim is back (at a new address, or its old one)
    back = wait_replicas(stack, timeout=120)  # `restart: unless-stopped` brings the replica back
    later = owners(stack, back)
    report["sigkill_under_load"] = {
        "requests": len(done),
        **{f"{k}_failures": v for k, v in failures.items()},
        "restarts_by_policy": stack.engine.inspect(victim)["RestartCount"],
        "victim_models": theirs,
        "victim_models_served_by_survivors": {m: int(sum(served[r][m] for r in survivors)) for m in theirs},
        "cold_loads_on_survivors": {survivors.index(r): int(loads(after[r]) - loads(before[r])) for r in survivors},
    }
    assert len(done) == 240
    assert failures == {"get_render": 0, "post_query": 0, "post_infer": 0}, done  # inference POSTs are retried too
    # the others answered the victim's models...
    assert sum(served[r][m] for r in survivors for m in theirs) > 0, served
    for m in theirs:
        if later[m] in survivors:  # ...each one on the replica the ring gives it without the victim
            assert served[later[m]][m] > 0, (m, served)
    # ...and no other model moved between the survivors (consistent hashing: only the victim's share moves)
    for m in MODELS:
        if m not in theirs:
            assert [r for r in survivors if served[r][m]] in ([], [where[m]]), (m, where[m], served)


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
