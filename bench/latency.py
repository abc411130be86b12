"""Latency and CPU per request against the floors (docs/benchmarks/serving.md): `python -m bench.latency SCENARIO`.

floor: the service's CPU per request (/proc) above the model alone (in this process, each round just before its
servers) and the floor (`floor_app`: uvicorn answering the service's own answer bytes). json_path: coordinates/s
against bare onnxruntime on one keep-alive connection, then CPU under wrk. inline_stall: probes' latency beside a
lone query on the event loop. warmup: the first request after a poll reload against the warm p50. stale_address:
how long nginx sends to a replica's old address (docs/containers.md; needs the container images).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from .common import RESULTS, checkout, ort_session, setup_logging, write_json
from .peers_loads import HEADER, workloads
from .serving import LUA, ROOT, Load, Server, find_models, free_port, machine, median, run_wrk, summary, wrk

log = logging.getLogger(__name__)
ANSWERS = {"": (b'{"status":"live"}', [(b"content-type", b"application/json"), (b"content-length", b"17")])}
FLOOR = json.loads(Path(os.environ.get("BENCH_FLOOR_ANSWERS") or os.devnull).read_text() or "{}")  # in the floor
for _path, (_type, _extra, _body) in FLOOR.items():  # {path: [content type, extra headers, base64 body]}
    _heads = {"content-type": _type, **_extra, "content-length": str(len(base64.b64decode(_body)))}
    ANSWERS[_path] = (base64.b64decode(_body), [(k.encode(), v.encode()) for k, v in _heads.items()])


async def floor_app(scope, receive, send) -> None:
    """The HTTP floor: answers each POST with the service's own answer to it, after reading the body."""
    if scope["type"] == "http":
        while (await receive()).get("more_body"):  # the whole body, as the service must read it
            pass
        body, headers = ANSWERS.get(scope["path"], ANSWERS[""])
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class FloorServer(Server):
    """uvicorn with `floor_app`, as `python -m service` runs it (its header-timeout protocol, keep-alive 90 s)."""

    def __init__(self, answers: Path):
        self.name, self.port, env = "floor", free_port(), {**os.environ, "BENCH_FLOOR_ANSWERS": str(answers)}
        self.url, quiet = f"http://127.0.0.1:{self.port}", subprocess.DEVNULL
        args = f"uvicorn bench.latency:floor_app --port {self.port} --log-level error --no-access-log "
        args += "--timeout-keep-alive 90 --http service.server.guards:HeaderTimeoutProtocol"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *args.split()], cwd=ROOT, env=env, stdout=quiet, stderr=quiet
        )


def answer(url: str, body: bytes, headers: dict) -> tuple[str, dict, str]:
    """The service's answer to a POST as FloorServer replays it: content type, extra headers, base64 body."""
    r = httpx.post(url, content=body, headers=headers, timeout=60)
    r.raise_for_status()
    return (
        r.headers["content-type"],
        {k: r.headers[k] for k in (HEADER,) if k in r.headers},
        base64.b64encode(r.content).decode(),
    )


def rotate(items: list, k: int) -> list:
    return items[k % len(items) :] + items[: k % len(items)]


def bare(fn, batches: int = 5, seconds: float = 0.2) -> tuple[float, float]:
    """CPU and wall ms per call of fn (the model alone, in this process): medians of batches of ≥ `seconds`."""
    fn()
    cpu, wall = [], []
    for _ in range(batches):
        n, c0, w0 = 0, time.process_time(), time.perf_counter()
        while n == 0 or time.perf_counter() - w0 < seconds:
            fn()
            n += 1
        cpu.append((time.process_time() - c0) * 1000 / n)
        wall.append((time.perf_counter() - w0) * 1000 / n)
    return median(cpu), median(wall)


def floor(a) -> dict:
    info, tmp, env = (
        machine(),
        Path(tempfile.mkdtemp(prefix="bench-floor-")),
        {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "20000"},
    )
    (script := tmp / "load.lua").write_text(LUA)
    loads = [w for n in (2000, 20000) for w in workloads(a.models, "astronaut", "digits", n)]
    loads = [w for w in loads if ("binary" in w.label) == ("20,000" in w.label) and a.loads in w.label]
    ours = {name: Server(a.models, name, {**env, "INR_BATCH_POLICY": name}) for name in a.policies}
    if a.baseline:
        ours["before"] = Server(a.models, "before", {**env, "INR_BATCH_POLICY": "adaptive"}, cwd=a.baseline)
    for v in a.variant:  # NAME[@DIR]:K=V,...: the service (of the checkout in DIR) with these settings
        (name, _, cwd), pairs = v.partition(":")[0].partition("@"), v.partition(":")[2].split(",")
        ours[name] = Server(
            a.models, name, {**env, **dict(kv.split("=", 1) for kv in pairs if kv)}, cwd=Path(cwd or ROOT)
        )
    servers, results, model, answers, bodies = dict(ours), {}, {}, {}, {}
    try:
        for s in ours.values():
            s.wait()
        for i, w in enumerate(loads):  # the floor answers each path with the service's own answer, byte for byte
            (tmp / f"{i}.body").write_bytes(w.body)
            bodies[w.label] = Load(w.label, w.paths["inr"], tmp / f"{i}.body", ctype=w.ctype, ihcl=w.ihcl)
            headers = {"content-type": w.ctype, **({HEADER: w.ihcl} if w.ihcl else {})}
            answers[w.paths["inr"]] = answer(next(iter(ours.values())).url + w.paths["inr"], w.body, headers)
        (tmp / "answers.json").write_text(json.dumps(answers))
        servers["floor"] = FloorServer(tmp / "answers.json").wait()
        for rnd, w in itertools.product(range(a.rounds), loads):
            model.setdefault(w.label, []).append(bare(w.bare))  # this round, beside its servers
            for c, name in itertools.product(a.concurrency, rotate(list(servers), rnd)):
                run_wrk(servers[name].url, bodies[w.label], c, 1, script)  # warm-up
                r = wrk(servers[name], bodies[w.label], c, a.duration * (2 if "coordinates" in w.label else 1), script)
                results.setdefault((w.label, c, name), []).append(r)
                time.sleep(a.gap)
                log.info(f"{w.label} c={c} {name}: {json.dumps(r)} (load {os.getloadavg()[0]:.1f})")
    finally:
        for s in servers.values():
            s.stop()
    rows = [{"load": k[0], "clients": k[1], "server": k[2], **summary(rs)} for k, rs in results.items()]
    for row in rows:
        cpu, wall = zip(*model[row["load"]])
        row.update(model_cpu_ms=median(cpu), model_wall_ms=median(wall), model_cpu_ms_rounds=[round(x, 3) for x in cpu])
    return {"machine": {**info, "load_after": os.getloadavg()[0]}, "rows": rows}


def floor_table(f: dict) -> str:
    """Per workload and clients: the model and the floor, then each server's req/s, p50, CPU ms per request,
    "ours" (CPU − model − floor) and CPU ÷ model."""
    by = {(r["load"], r["clients"], r["server"]): r for r in f["rows"]}
    names = [n for n in dict.fromkeys(r["server"] for r in f["rows"]) if n != "floor"]
    head = "".join(f" {n} req/s | {n} p50 ms | {n} CPU ms | {n} ours | {n} ÷ model |" for n in names)
    out = [f"| workload | clients | model CPU ms | floor CPU ms | floor req/s |{head}", "|---|---:|---:|---:|---:|"]
    out[1] += "---:|" * 5 * len(names)
    for label, c in sorted({k[:2] for k in by}):
        fl, cells = by[(label, c, "floor")], ""
        m, floor_cpu = fl["model_cpu_ms"], fl["cpu_ms_per_req"]
        for s in (by[(label, c, n)] for n in names):
            cpu = s["cpu_ms_per_req"]
            cells += f" {s['rps']:.0f} | {s['p50_ms']:.2f} | {cpu:.3f} | {cpu - m - floor_cpu:.3f} | {cpu / m:.2f}× |"
        out.append(f"| {label} | {c} | {m:.3f} | {floor_cpu:.3f} | {fl['rps']:.0f} |{cells}")
    return "\n".join(out)


def json_requests(image: str, coords: np.ndarray) -> dict[str, tuple[str, bytes, dict]]:
    """Per protocol: path, body, headers."""
    x, ctype, v2_path = coords.astype(np.float32), {"content-type": "application/json"}, f"/v2/models/{image}/infer"
    v2, out = (
        {"name": "coords", "datatype": "FP32", "shape": list(x.shape)},
        [{"name": "rgb", "parameters": {"binary_data": True}}],
    )
    head = json.dumps({"inputs": [{**v2, "parameters": {"binary_data_size": x.nbytes}}], "outputs": out}).encode()
    return {
        "v1 query JSON": (f"/v1/models/{image}/query", json.dumps({"coords": coords.tolist()}).encode(), ctype),
        "V2 JSON": (v2_path, json.dumps({"inputs": [{**v2, "data": x.ravel().tolist()}]}).encode(), ctype),
        "V2 binary": (
            v2_path,
            head + x.tobytes(),
            {"content-type": "application/octet-stream", HEADER: str(len(head))},
        ),
    }


def sequential(server: Server, client: httpx.Client, request: tuple, repeats: int) -> tuple[float, float]:
    """Median wall ms of sequential requests (≥ `repeats` and 1.5 s: /proc counts 10 ms ticks), server CPU ms each."""
    path, body, headers = request
    client.post(path, content=body, headers=headers).raise_for_status()  # warm-up
    times, cpu0, start = [], server.cpu_seconds(), time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < 1.5:
        t0 = time.perf_counter()
        client.post(path, content=body, headers=headers).raise_for_status()
        times.append(time.perf_counter() - t0)
    return median(times) * 1000, (server.cpu_seconds() - cpu0) * 1000 / len(times)


def json_path(a) -> dict:
    image, info, tmp = find_models(a.models)["image"], machine(), Path(tempfile.mkdtemp(prefix="bench-json-"))
    session = ort_session(next((a.models / image).glob("*/model.onnx")), 1)
    env = {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "262144", "INR_MAX_BODY_BYTES": str(64 << 20)}
    servers, rows, runs = {"this tree": Server(a.models, "this tree", env)}, [], {}
    if a.baseline:
        tree, sha = checkout(a.baseline)
        servers[f"baseline {tree.name if sha == 'unknown' else sha}"] = Server(a.models, "baseline", env, cwd=tree)
    onnx = lambda coords: bare(lambda x=coords.astype(np.float32): session.run(None, {"coords": x}), a.repeats, 0)  # noqa: E731
    try:
        for s in servers.values():
            s.wait()
        check = np.random.default_rng(7).random((100, 2))  # every server answers as onnxruntime does
        for name, s in servers.items():
            got = httpx.post(f"{s.url}/v1/models/{image}/query", json={"coords": check.tolist()}).json()["rgb"]
            assert np.abs(np.asarray(got) - session.run(None, {"coords": check.astype(np.float32)})[0]).max() < 2e-6, (
                name
            )
        for n in a.sizes:  # each (server, protocol) against a bare run just before it, in the same machine load
            coords, samples = np.random.default_rng(n).random((n, 2)).round(6), {}
            for _, (name, s) in itertools.product(range(a.rounds), servers.items()):
                with httpx.Client(base_url=s.url, timeout=300) as c:
                    for proto, request in json_requests(image, coords).items():
                        (bare_cpu, bare_wall), (wall, cpu) = onnx(coords), sequential(s, c, request, a.repeats)
                        samples.setdefault(f"{name} | {proto}", []).append(
                            (wall, cpu, bare_wall / wall, bare_cpu / cpu)
                        )
            keys, (bare_cpu, bare_wall) = ("ms", "cpu_ms", "vs_bare", "cpu_vs_bare"), onnx(coords)
            out = {k: dict(zip(keys, map(median, zip(*vs)))) for k, vs in samples.items()}
            out = {k: {**v, "mcoords_s": n / v["ms"] / 1e3} for k, v in out.items()}
            rows.append(
                {
                    "coords": n,
                    "bare_ms": bare_wall,
                    "bare_cpu_ms": bare_cpu,
                    "bare_mcoords_s": n / bare_wall / 1e3,
                    "servers": out,
                }
            )
            log.info("%d coords: %s", n, json.dumps(rows[-1]))
        coords = np.random.default_rng(2000).random((2000, 2)).round(6)  # wrk: CPU per 2,000-coordinate query
        path, body, _ = json_requests(image, coords)["v1 query JSON"]
        (tmp / "q2000.json").write_bytes(body)
        (tmp / "bench.lua").write_text(LUA)
        load, model_cpu = (
            Load("v1 query 2000", path, tmp / "q2000.json", ctype="application/json"),
            median([onnx(coords)[0] for _ in range(a.rounds)]),
        )
        for _, (name, s) in itertools.product(range(a.rounds), servers.items()):
            runs.setdefault(name, []).append(wrk(s, load, a.connections, a.duration, tmp / "bench.lua"))
    finally:
        for s in servers.values():
            s.stop()
    w = {"model_cpu_ms": model_cpu, "connections": a.connections, "servers": {}}
    for name, rs in runs.items():
        rps, cpu = (median([r[k] for r in rs]) for k in ("rps", "cpu_ms_per_req"))
        w["servers"][name] = {
            "rps": rps,
            "cpu_ms_per_req": cpu,
            "vs_model": cpu / model_cpu,
            "errors": sum(r["errors"] for r in rs),
        }
    info["load_after"] = os.getloadavg()[0]
    return {"machine": info, "command": a.command, "model": image, "threads": 1, "sizes": rows, "wrk_2000": w}


def json_path_table(result: dict) -> str:
    lines = ["| coords | server · protocol | ms / request | server CPU ms | coords/s × bare (wall) | × bare (CPU) |"]
    lines.append("|---:|---|---:|---:|---:|---:|")
    for row in result["sizes"]:
        rows = [("bare onnxruntime, 1 thread", row["bare_ms"], row["bare_cpu_ms"], 1, 1)]
        rows += [(k, v["ms"], v["cpu_ms"], v["vs_bare"], v["cpu_vs_bare"]) for k, v in row["servers"].items()]
        lines += [
            f"| {row['coords']:,} | {k} | {ms:.1f} | {cpu:.1f} | {x:.2f} | {y:.2f} |" for k, ms, cpu, x, y in rows
        ]
    w = result["wrk_2000"]
    lines += ["", f"wrk, {w['connections']} connections, 2,000-coordinate /v1/query; the model's own CPU time "]
    lines[-1] += f"for 2,000 coordinates: {w['model_cpu_ms']:.2f} ms"
    lines.append("")
    lines += ["| server | req/s | server CPU ms / request | × model CPU | errors |", "|---|---:|---:|---:|---:|"]
    for name, v in w["servers"].items():
        lines.append(f"| {name} | {v['rps']:.0f} | {v['cpu_ms_per_req']:.2f} | {v['vs_model']:.2f} | {v['errors']} |")
    return "\n".join(lines)


def loop(fn, threads: int = 1, every_s: float = 0.0):
    """`threads` threads calling fn() over and over, one call per `every_s` at most, until `stop()`:
    `answers`, [(start, seconds, what fn returned)] so far; `stop()` returns them all, sorted."""
    answers, done = [], threading.Event()

    def run() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            got = fn()
            answers.append((t0, time.perf_counter() - t0, got))
            time.sleep(max(0.0, every_s - (time.perf_counter() - t0)))

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for t in workers:
        t.start()
    return answers, lambda: (done.set(), [t.join(60) for t in workers], sorted(answers))[2]


def inline_stall(a) -> dict:
    tmp, w = (
        Path(tempfile.mkdtemp(prefix="bench-stall-")),
        {x.label: x for x in workloads(a.models, "astronaut", "digits", 2000)},
    )
    (tmp / "load.lua").write_text(LUA)
    (tmp / "query").write_bytes(w["v1 query, 2,000 coordinates"].body)
    load = Load("v1 query", w["v1 query, 2,000 coordinates"].paths["inr"], tmp / "query", "POST", "application/json")
    servers = {
        ms: Server(a.models, f"inline {ms}", {"INR_THREADS": "1", "INR_INLINE_RUN_MS": str(ms)}) for ms in a.settings
    }
    results, probes = (
        {ms: [] for ms in servers},
        {"GET /health/ready": None, "POST classify": w["v1 classify, JSON"].body},
    )
    try:
        for s in servers.values():
            s.wait()
        for r, ms in ((r, ms) for r in range(a.rounds) for ms in rotate(list(servers), r)):
            with httpx.Client(base_url=servers[ms].url, timeout=10, headers={"content-type": "application/json"}) as c:
                kinds = itertools.cycle(probes)  # on one connection, in turn: what a load balancer asks, another model

                def probe() -> str:
                    kind = next(kinds)
                    path = "/health/ready" if probes[kind] is None else "/v1/models/digits/classify"
                    c.request(kind.split()[0], path, content=probes[kind]).raise_for_status()
                    return kind

                _, stop = loop(probe, every_s=1 / a.rate)
                q = wrk(servers[ms], load, 1, a.duration, tmp / "load.lua")
                got = stop()
            row = {"rps": q["rps"], "cpu_ms": q["cpu_ms_per_req"], "errors": q["errors"]}
            for kind, n in itertools.product(probes, (50, 99, 100)):
                each = [s * 1000 for _, s, k in got if k == kind]
                row[f"{kind} {n}"] = float(np.percentile(each, n)) if each else float("nan")
            results[ms].append(row)
            log.info(f"round {r + 1} INR_INLINE_RUN_MS={ms}: {json.dumps(row)}")
    finally:
        for s in servers.values():
            s.stop()
    return {
        "machine": machine(),
        "args": {k: getattr(a, k) for k in ("settings", "rounds", "duration", "rate")},
        "results": results,
    }


def inline_stall_table(f: dict) -> str:
    cols = list(next(iter(f["results"].values()))[0])
    cols.remove("errors")
    head = " | ".join(f"{c.rsplit(' ', 1)[0]} {'max' if c.endswith(' 100') else 'p' + c[-2:]} ms" for c in cols[2:])
    out = [f"| INR_INLINE_RUN_MS | query req/s | query CPU ms | {head} |", "|---:" * (len(cols) + 1) + "|"]
    for ms, rs in f["results"].items():
        out.append(f"| {ms} | " + " | ".join(f"{median([x[c] for x in rs]):.2f}" for c in cols) + " |")
    return "\n".join(out)


def reload_under_load(source: Path, model: Path, warm: bool, a) -> dict:
    """One reload of a copy of model folder `source` under load (`warmup`)."""
    shutil.copytree(source, model)
    if not warm:
        cfg = model / "config.pbtxt"
        cfg.write_text(re.sub(r"model_warmup \{.*?\n\}\n", "", cfg.read_text(), flags=re.S))
    srv = Server(model.parent, "reload", args=("--model-control-mode", "poll", "--repository-poll-secs", "0.3")).wait()
    client = httpx.Client(base_url=srv.url, timeout=60)
    path, body, headers = json_requests(model.name, np.random.default_rng(0).random((a.coords, 2)))["V2 binary"]

    def infer() -> tuple[int, str]:  # (status, the version answering)
        try:
            r = client.post(path, content=body, headers=headers)
        except httpx.HTTPError:
            return 0, ""
        return r.status_code, json.loads(r.content[: int(r.headers.get(HEADER) or 0)] or "{}").get("model_version", "")

    answers, stop = loop(infer, a.clients)
    try:
        time.sleep(a.duration)
        last = max(int(p.name) for p in model.iterdir() if p.name.isdigit())  # a writer's atomic publish of a copy
        shutil.copytree(model / str(last), model / ".next")
        meta = json.loads((model / ".next" / "metadata.json").read_text())
        (model / ".next" / "metadata.json").write_text(json.dumps({**meta, "version": last + 1}))
        os.rename(model / ".next", model / str(last + 1))
        end = time.monotonic() + 60
        while not any(v == "2" for *_, (_, v) in answers) and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(2)
    finally:
        answers = stop()
        srv.stop()
        client.close()
    warm_s = sorted(s for _, s, (_, v) in answers[len(answers) // 4 :] if v == "1")
    first = min((x for x in answers if x[2][1] == "2"), default=(0, float("nan")))[1]
    p50 = warm_s[len(warm_s) // 2] if warm_s else float("nan")
    non_200 = [code for *_, (code, _) in answers if code != 200]
    return {
        "warmup": warm,
        "requests": len(answers),
        "non_200": non_200,
        "first_ms": first * 1e3,
        "warm_p50_ms": p50 * 1e3,
        "ratio": first / p50,
    }


def warmup(a) -> dict:
    image, rows = find_models(a.models)["image"], []
    for warm in (True, False):  # with the model's own model_warmup, and with it removed from config.pbtxt
        runs = []
        for _ in range(a.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(reload_under_load(a.models / image, Path(tmp) / image, warm, a))
        rows.append(sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2])  # the round with the median ratio
    return {"machine": machine(), "rows": rows}


def warmup_table(f: dict) -> str:
    out = ["| warmup | first request after the reload | warm p50 | ratio | requests | non-200 |", "|---" * 6 + "|"]
    for r in f["rows"]:
        ms = f"{r['first_ms']:.1f} ms | {r['warm_p50_ms']:.1f} ms | {r['ratio']:.2f}×"
        out.append(f"| {'yes' if r['warmup'] else 'no'} | {ms} | {r['requests']} | {len(r['non_200'])} |")
    return "\n".join(out)


def address_change(stack, replica: str | None, after_s: float) -> dict:
    """`replica` off the compose network and back (a new address while it serves, no start-up mixed in), or (None)
    every replica stopped and started; 4 threads GET through nginx on new connections every 50 ms. The window runs
    from the change (or the first 200 after the restart) to the end of the last failed answer."""
    replicas = [replica] if replica else stack.containers()
    before, probe = {r: stack.address(r) for r in replicas}, lambda: stack.status("/v1/models/astronaut")
    if replica:
        answers, stop = loop(probe, 4, 0.05)
        time.sleep(2.0)
        (net,) = stack.engine.inspect(replica)["NetworkSettings"]["Networks"]
        stack.engine("network", "disconnect", net, replica)
        stack.engine("network", "connect", "--alias", "api", net, replica)
        since = time.perf_counter()
    else:
        stack.engine("stop", "-t", "30", *replicas)
        stack.engine("start", *replicas)
        answers, stop = loop(probe, 4, 0.05)
        started = time.perf_counter()
        while time.perf_counter() < started + 120 and not any(c == 200 for *_, c in answers):
            time.sleep(0.05)
    time.sleep(after_s)
    answers = stop()
    since = since if replica else min(s + d for s, d, c in answers if c == 200)
    bad = [(s, s + d) for s, d, c in answers if s >= since and c != 200]
    out = {
        "addresses": {r: [before[r], stack.address(r)] for r in replicas},
        "failed": len(bad),
        "answered": sum(s >= since for s, _, _ in answers),
    }
    out |= {
        "window_s": round(max(d for _, d in bad) - since, 2) if bad else 0.0,
        "failed_durations_s": sorted({round(d - s, 1) for s, d in bad}),
    }
    return out if replica else {**out, "first_200_s": round(since - started, 2)}


def stale_address(a) -> dict:
    from tests.containers.engine import RUNTIME_IMAGE, Engine
    from tests.containers.stack import Stack

    if (engine := Engine.find()) is None or not engine.image_exists(RUNTIME_IMAGE):
        raise SystemExit(f"stale_address: needs a container engine and {RUNTIME_IMAGE} (tests/containers builds it)")
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(engine, Path(tmp), "stale")
        try:
            stack.up(1)
            (replica,) = stack.containers()
            out = {
                k: [address_change(stack, r, a.duration) for _ in range(a.rounds)]
                for k, r in (("reconnect", replica), ("restart", None))
            }
        finally:
            stack.down()
    return out | {f"{k}_median_window_s": median([r["window_s"] for r in out[k]]) for k in list(out)}


# scenario: its table, its options (--NAME=DEFAULT; the default's type parses a value, a list's at commas)
SCENARIOS = {
    "floor": (
        floor_table,
        "rounds=2 duration=3.0 concurrency=1,8,32 policies=adaptive,delay loads= baseline= gap=0.0 variant=+",
    ),
    "json_path": (json_path_table, "rounds=3 duration=5.0 baseline= sizes=2000,20000,200000 repeats=3 connections=8"),
    "inline_stall": (inline_stall_table, "rounds=3 duration=4.0 settings=0,2,10 rate=50.0"),
    "warmup": (warmup_table, "rounds=1 duration=3.0 clients=3 coords=2000"),
    "stale_address": (lambda f: json.dumps(f, indent=2), "rounds=3 duration=12.0"),
}


def number(text: str):
    return int(text) if text.isdigit() else float(text) if text.replace(".", "", 1).isdigit() else text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name, (_, options) in SCENARIOS.items():
        s = sub.add_parser(name, help=f"docs/benchmarks/serving.md, {name}")
        s.add_argument("--models", type=Path, default=ROOT / "models")
        s.add_argument("--out", type=Path, default=RESULTS / f"{name}.json")
        for flag, default in (o.split("=") for o in options.split()):
            if default == "+":
                s.add_argument(f"--{flag}", action="append", default=[])
            else:
                kind = (lambda t: [number(v) for v in t.split(",")]) if "," in default else number
                s.add_argument(f"--{flag}", type=kind, default=kind(default))
    a = p.parse_args(argv)
    a.command = " ".join(["python -m bench.latency", *(sys.argv[1:] if argv is None else argv)])
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    result = globals()[a.scenario](a)
    write_json(a.out.stem, result, a.out.parent)
    print(SCENARIOS[a.scenario][0](result))  # noqa: T201  (a command's result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
