"""Latency and CPU per request (docs/benchmarks/serving.md): `python -m bench.latency SCENARIO [options]`.

floor, json_path and inline_stall are one harness (`floor`); warmup: a reload under load; stale_address: nginx."""

import argparse
import base64
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from subprocess import DEVNULL, Popen

import httpx
import numpy as np

from . import serving
from .common import RESULTS, ROOT, checkout, free_port, median, ort_session, setup_logging, write_json
from .serving import HEADER, LUA, Load, Server, check, find_models, machine, run_wrk, summary, v2_binary, workloads, wrk

PROBES = (("ready", "GET", "/health/ready"), ("classify", "POST", "/v1/models/digits/classify"))  # inline_stall
JSON = "application/json"
ENV = {"INR_THREADS": "1", "INR_MAX_QUERY_COORDS": "262144", "INR_MAX_BODY_BYTES": str(64 << 20)}
ANSWERS = {"": (b'{"status":"live"}', [(b"content-type", b"application/json"), (b"content-length", b"17")])}
FLOOR_ANSWERS = Path(os.getenv("BENCH_FLOOR_ANSWERS") or os.devnull).read_text() or "{}"  # in the floor's process
for _path, (_body, _heads) in json.loads(FLOOR_ANSWERS).items():  # [base64 body, {header: value}]
    ANSWERS[_path] = (base64.b64decode(_body), [(k.encode(), v.encode()) for k, v in _heads.items()])


async def floor_app(scope, receive, send) -> None:
    """The HTTP floor: answers each POST with the service's own answer to it (ANSWERS), after reading the body."""
    if scope["type"] == "http":
        while (await receive()).get("more_body"):  # the whole body, as the service must read it
            pass
        body, headers = ANSWERS.get(scope["path"], ANSWERS[""])
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class FloorServer(Server):
    """uvicorn with `floor_app`, answering each POST of `posts` {path: (body, ctype, ihcl)} as the service at `url`."""

    def __init__(self, url: str, posts: dict):
        answers, keep = {}, ("content-type", "content-length", HEADER.lower())  # ANSWERS in the floor's process
        for path, (body, ctype, ihcl) in posts.items():
            headers = {"content-type": ctype, **({HEADER: ihcl} if ihcl else {})}
            r = httpx.post(url + path, content=body, headers=headers, timeout=60).raise_for_status()
            answers[path] = (base64.b64encode(r.content).decode(), {k: v for k, v in r.headers.items() if k in keep})
        (file := Path(tempfile.mkdtemp(prefix="bench-floor-")) / "answers.json").write_text(json.dumps(answers))
        self.name, self.port = "floor", free_port()
        self.url, env = f"http://127.0.0.1:{self.port}", {**os.environ, "BENCH_FLOOR_ANSWERS": str(file)}
        cmd = f"-m uvicorn bench.latency:floor_app --port {self.port} --log-level error --no-access-log "
        cmd += "--timeout-keep-alive 90 --http service.server.guards:HeaderTimeoutProtocol"
        self.proc = Popen([sys.executable, *cmd.split()], cwd=ROOT, env=env, stdout=DEVNULL, stderr=DEVNULL)


def bare(fn, batches: int = 5, seconds: float = 0.2) -> tuple[float, float]:
    """CPU and wall ms per call of fn (the model alone, in this process): medians of batches of ≥ `seconds`."""
    fn()
    samples = []
    for _ in range(batches):
        n, c0, w0 = 0, time.process_time(), time.perf_counter()
        while n == 0 or time.perf_counter() - w0 < seconds:
            n += bool([fn()])
        samples.append(((time.process_time() - c0) * 1000 / n, (time.perf_counter() - w0) * 1000 / n))
    return median([c for c, _ in samples]), median([w for _, w in samples])


def around(fn, threads: int, every_s: float, change, settle_s=0.0, after_s=0.0, done=lambda answers, t: True):
    """Threads calling fn() (each at most every `every_s`) while change() runs after `settle_s` s, until done(answers,
    the change's end) or 120 s, and `after_s` s more: [(start, s, fn's answer)] sorted, the change's end and result."""
    answers, stop = [], threading.Event()

    def run() -> None:
        while not stop.is_set():
            t0, got = time.perf_counter(), fn()
            answers.append((t0, time.perf_counter() - t0, got))
            time.sleep(max(0.0, every_s - (time.perf_counter() - t0)))

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    [t.start() for t in workers]
    time.sleep(settle_s)
    result, changed = change(), time.perf_counter()
    while not done(answers, changed) and time.perf_counter() < changed + 120:
        time.sleep(0.05)
    time.sleep(after_s)
    stop.set()
    [t.join(60) for t in workers]
    return sorted(answers), changed, result


def floor(a, cases: list | None = None) -> dict:
    """wrk on each case (a bench.serving Workload, client counts) and server (a.policies, a.baseline, a.variant),
    every server's answer first checked against onnxruntime's; by default, and then with the floor, bench.serving's."""
    info, tmp, rate, floor_too = machine(), Path(tempfile.mkdtemp(prefix="bench-")), getattr(a, "probes", 0), not cases
    (script := tmp / "load.lua").write_text(LUA)
    every = [(n, w) for n in (2000, 20000) for w in workloads(a.models, "astronaut", "digits", n)]
    digit = next(w.body for _, w in every if w.label == "v1 classify, JSON")
    every = [w for n, w in every if ("binary" in w.label) == (n == 20000) and a.loads in w.label]
    cases = cases or [(w, a.concurrency) for w in every]
    ours = {p: Server(a.models, p, dict(ENV, INR_BATCH_POLICY=p)) for p in a.policies}
    if tree := a.baseline and checkout(str(a.baseline))[0]:
        ours["before"] = Server(a.models, "before", dict(ENV, INR_BATCH_POLICY="adaptive"), cwd=tree)
    for name, _, pairs in (v.partition(":") for v in a.variant):
        (name, _, cwd), env = name.partition("@"), dict(kv.split("=", 1) for kv in pairs.split(",") if kv)
        ours[name] = Server(a.models, name, {**ENV, **env}, cwd=cwd or ROOT)
    servers, results, model, loads = dict(ours), {}, {}, {}
    try:
        [s.wait() for s in ours.values()]
        for i, (w, _) in enumerate(cases):
            [check(w, "inr", s.url, 1e-5) for s in ours.values()]
            (tmp / f"{i}").write_bytes(w.body)
            loads[w.label] = Load(w.label, w.paths["inr"], tmp / f"{i}", ctype=w.ctype, ihcl=w.ihcl)
        if floor_too:
            posts = {w.paths["inr"]: (w.body, w.ctype, w.ihcl) for w, _ in cases}
            servers["floor"] = FloorServer(next(iter(ours.values())).url, posts).wait()
        for rnd, (w, clients) in itertools.product(range(a.rounds), cases):
            model.setdefault(label := w.label, []).append(bare(w.bare))  # this round, just before its servers
            names = list(servers)[rnd % len(servers) :] + list(servers)[: rnd % len(servers)]
            for c, name in itertools.product(clients, names):
                run_wrk(servers[name].url, loads[label], c, 1, script)  # warm-up
                client = httpx.Client(base_url=servers[name].url, timeout=10, headers={"content-type": JSON})

                def probe(kinds=itertools.cycle(PROBES)) -> str:  # in turn, on one connection
                    kind, method, path = next(kinds)
                    client.request(method, path, content=digit if kind == "classify" else None).raise_for_status()
                    return kind

                run = partial(wrk, servers[name], loads[label], c, a.duration * (1 + ("coordinates" in label)), script)
                got, _, r = around(probe, 1 if rate else 0, 1 / (rate or 1), run)  # inline_stall: probes meanwhile
                for kind, q in itertools.product(("ready", "classify") if rate else (), (50, 99, 100)):
                    ms = [s * 1e3 for _, s, k in got if k == kind] or [np.nan]
                    r[f"{kind} {'max' if q == 100 else f'p{q}'}"] = float(np.percentile(ms, q))
                results.setdefault((label, c, name), []).append(r)
                logging.info(f"{label} c={c} {name}: {json.dumps(r)} (load {os.getloadavg()[0]:.1f})")
                time.sleep(a.gap)
    finally:
        [s.stop() for s in servers.values()]
    rows = [{"load": k[0], "clients": k[1], "server": k[2], **summary(rs)} for k, rs in results.items()]
    for row, rs in zip(rows, results.values()):
        c, w = zip(*model[row["load"]])
        row |= dict(model_cpu_ms=median(c), model_wall_ms=median(w), model_cpu_ms_rounds=[round(x, 3) for x in c])
        row |= {k: median([r[k] for r in rs]) for k in rs[0] if k.startswith(("ready ", "classify "))}
    return {"machine": {**info, "load_after": os.getloadavg()[0]}, "rows": rows}


def floor_table(f: dict) -> str:
    """Per workload, clients and server: req/s, p50, CPU ms (model; ours: − model − floor), CPU ÷ model, probes."""
    floor_cpu = {(r["load"], r["clients"]): r["cpu_ms_per_req"] for r in f["rows"] if r["server"] == "floor"}
    probes = [k for k in f["rows"][0] if k.startswith(("ready ", "classify "))]
    out = ["| workload | clients | server | req/s | p50 ms | model CPU / wall ms | CPU ms | ours | ÷ model |"]
    out = [out[0] + "".join(f" {k} ms |" for k in probes), "|---|---:|---|" + "---:|" * (6 + len(probes))]
    for r in sorted(f["rows"], key=lambda r: (r["load"], r["clients"])):
        m, w, cpu = r["model_cpu_ms"], r["model_wall_ms"], r["cpu_ms_per_req"]
        fl = floor_cpu.get((r["load"], r["clients"]), np.nan) if r["server"] != "floor" else np.nan
        cells = f"{r['rps']:.0f} | {r['p50_ms']:.2f} | {m:.3f} / {w:.3f} | {cpu:.3f} | {cpu - m - fl:.3f}"
        cells += f" | {cpu / m:.2f}×" + "".join(f" | {r[k]:.2f}" for k in probes)
        out.append(f"| {r['load']} | {r['clients']} | {r['server']} | {cells} |")
    return "\n".join(out)


def json_path(a) -> dict:
    """The floor harness, no floor, on `a.sizes` 6-decimal coordinates as v1 query JSON, V2 JSON and V2 binary."""
    image, cases = find_models(a.models)["image"], []
    session = ort_session(a.models / image / "1" / "model.onnx", 1)
    v1, v2, read = {"inr": f"/v1/models/{image}/query"}, {"inr": f"/v2/models/{image}/infer"}, serving.v2_output("rgb")
    for n in a.sizes:
        x = (coords := np.random.default_rng(n).random((n, 2)).round(6)).astype(np.float32)
        (binary, ihcl), at, c = v2_binary("coords", x, "rgb"), f", {n:,} coordinates", a.concurrency
        w = partial(serving.Workload, reference=(run := partial(session.run, ["rgb"], {"coords": x}))()[0], bare=run)
        cases.append(
            (w("v1 query JSON" + at, v1, json.dumps({"coords": coords.tolist()}).encode(), read=serving.v1_rgb), c)
        )
        cases.append((w("V2 JSON" + at, v2, serving.v2_json("coords", x, "rgb"), read=read), c))
        cases.append((w("V2 binary" + at, v2, binary, read=read, ctype="application/octet-stream", ihcl=ihcl), c))
    return floor(argparse.Namespace(**vars(a), policies=["adaptive"], variant=[], loads="", gap=0.0), cases)


def json_path_table(result: dict) -> str:
    """floor_table, or the json_path figures from before issue 58 (sizes, wrk_2000) as they were rendered."""
    if "sizes" not in result:
        return floor_table(result)
    lines = ["| coords | server · protocol | ms / request | server CPU ms | coords/s × bare (wall) | × bare (CPU) |"]
    lines.append("|---:|---|---:|---:|---:|---:|")
    for row in result["sizes"]:
        rows = [("bare onnxruntime, 1 thread", row["bare_ms"], row["bare_cpu_ms"], 1, 1)]
        rows += [(k, v["ms"], v["cpu_ms"], v["vs_bare"], v["cpu_vs_bare"]) for k, v in row["servers"].items()]
        lines += [f"| {row['coords']:,} | {k} | {t:.1f} | {c:.1f} | {x:.2f} | {y:.2f} |" for k, t, c, x, y in rows]
    w = result["wrk_2000"]
    lines += ["", f"wrk, {w['connections']} connections, 2,000-coordinate /v1/query; the model's own CPU time "]
    lines[-1] += f"for 2,000 coordinates: {w['model_cpu_ms']:.2f} ms"
    lines += ["", "| server | req/s | server CPU ms / request | × model CPU | errors |", "|---|---:|---:|---:|---:|"]
    for name, v in w["servers"].items():
        lines.append(f"| {name} | {v['rps']:.0f} | {v['cpu_ms_per_req']:.2f} | {v['vs_model']:.2f} | {v['errors']} |")
    return "\n".join(lines)


def warmup(a) -> dict:
    """A copy of the image model, with and without its model_warmup, in poll mode; `a.clients` clients send V2 binary
    infers in a loop and version 2, a copy of 1, appears on disk after `a.duration` s. Per way, the median round."""
    image, rows, headers = find_models(a.models)["image"], {}, {"content-type": "application/octet-stream"}
    body, ihcl = v2_binary("coords", np.random.default_rng(0).random((a.coords, 2), dtype=np.float32), "rgb")
    for warm, _ in itertools.product((True, False), range(a.rounds)):
        shutil.copytree(a.models / image, (model := Path(tempfile.mkdtemp()) / image))
        text = (cfg := model / "config.pbtxt").read_text()
        cfg.write_text(text if warm else text.partition("model_warmup {")[0])  # the export writes it last
        shutil.copytree(model / "1", model / ".2")  # version 2, published by a rename (a writer's atomic publish)
        (meta := model / ".2" / "metadata.json").write_text(json.dumps({**json.loads(meta.read_text()), "version": 2}))
        srv = Server(model.parent, "reload", args=("--model-control-mode", "poll", "--repository-poll-secs", "0.3"))
        client = httpx.Client(base_url=srv.wait().url, timeout=60, headers={**headers, HEADER: ihcl})

        def infer() -> tuple[int, str]:  # (status, the version answering)
            try:
                r = client.post(f"/v2/models/{image}/infer", content=body)
            except httpx.HTTPError:
                return 0, ""
            head = r.content[: int(r.headers.get(HEADER, 0))]
            return r.status_code, json.loads(head or "{}").get("model_version", "")

        try:  # version 2 appears; done once it has answered
            seen = lambda xs, _: any(v == "2" for *_, (_, v) in xs)  # noqa: E731
            answers = around(infer, a.clients, 0, partial(os.rename, model / ".2", model / "2"), a.duration, 2, seen)[0]
        finally:
            srv.stop()
        warm_s = sorted(s for _, s, (_, v) in answers[len(answers) // 4 :] if v == "1")  # version 1, the same load
        first = min((x for x in answers if x[2][1] == "2"), default=(0, np.nan))[1] * 1e3
        p50, non_200 = (warm_s[len(warm_s) // 2] if warm_s else np.nan) * 1e3, [c for *_, (c, _) in answers if c != 200]
        row = dict(warmup=warm, requests=len(answers), non_200=non_200, first_ms=first, warm_p50_ms=p50)
        rows.setdefault(warm, []).append(row | {"ratio": first / p50})
    return {"machine": machine(), "rows": [sorted(rs, key=lambda r: r["ratio"])[len(rs) // 2] for rs in rows.values()]}


def warmup_table(f: dict) -> str:
    out = ["| warmup | first request after the reload | warm p50 | ratio | requests | non-200 |", "|---" * 6 + "|"]
    for r in f["rows"]:
        ms = f"{r['first_ms']:.1f} ms | {r['warm_p50_ms']:.1f} ms | {r['ratio']:.2f}×"
        out.append(f"| {'yes' if r['warmup'] else 'no'} | {ms} | {r['requests']} | {len(r['non_200'])} |")
    return "\n".join(out)


def stale_address(a) -> dict:
    """One api replica behind nginx, 4 threads GET through it every 50 ms while the replica is reconnected (a new
    address) or restarted: the window from the change (or the restart's first 200) to the last failed answer's end."""
    from tests.containers.engine import RUNTIME_IMAGE, Engine
    from tests.containers.stack import Stack

    if (engine := Engine.find()) is None or not engine.image_exists(RUNTIME_IMAGE):
        raise SystemExit(f"stale_address: needs a container engine and {RUNTIME_IMAGE} (tests/containers builds it)")
    stack, out = Stack(engine, Path(tempfile.mkdtemp()), "stale"), {}
    try:
        stack.up(1)
        (replica,), probe = stack.containers(), partial(stack.status, "/v1/models/astronaut")
        net = next(iter(stack.engine.inspect(replica)["NetworkSettings"]["Networks"]))
        off, on = ("network", "disconnect", net, replica), ("network", "connect", "--alias", "api", net, replica)
        changes = {"reconnect": [off, on], "restart": [("stop", "-t", "30", replica), ("start", replica)]}
        for kind, _ in itertools.product(changes, range(a.rounds)):
            before, change = stack.address(replica), lambda: [stack.engine(*args) for args in changes[kind]]
            first_200 = (lambda xs, t: any(c == 200 and s >= t for s, _, c in xs)) if kind == "restart" else None
            answers, changed, _ = around(probe, 4, 0.05, change, 2.0, a.duration, first_200 or (lambda xs, t: True))
            since = min(s + d for s, d, c in answers if c == 200 and s >= changed) if first_200 else changed
            bad = [(s, s + d) for s, d, c in answers if s >= since and c != 200]
            row = dict(window_s=round(max(d for _, d in bad) - since, 2) if bad else 0.0, failed=len(bad))
            row |= dict(answered=sum(s >= since for s, *_ in answers), first_200_s=round(since - changed, 2))
            row |= dict(failed_durations_s=sorted({round(d - s, 1) for s, d in bad}))
            out.setdefault(kind, []).append(row | dict(addresses=[before, stack.address(replica)]))
    finally:
        stack.down()
    return out | {f"{k}_median_window_s": median([r["window_s"] for r in rs]) for k, rs in out.items()}


FLOOR = dict(rounds=2, duration=3.0, concurrency=[1, 8, 32], policies=["adaptive", "delay"], loads="", baseline="")
FLOOR |= dict(gap=0.0, probes=0.0, variant=[])  # --variant NAME[@DIR]:K=V,...; --probes: per second (inline_stall)
STALL = dict(rounds=3, duration=2.0, concurrency=[1], policies=[], loads="v1 query, 2,000", probes=50.0)
STALL |= dict(variant=[f"inline {ms}:INR_INLINE_RUN_MS={ms}" for ms in (0, 2, 10)])
JSON_PATH = dict(rounds=3, duration=2.0, baseline="", sizes=[2000, 20000, 200000], concurrency=[1, 8])
SCENARIOS = {  # name: (the harness, its table, its options with their defaults; a list's items comma-separated)
    "floor": (floor, floor_table, FLOOR),
    "json_path": (json_path, json_path_table, JSON_PATH),
    "inline_stall": (floor, floor_table, FLOOR | STALL),
    "warmup": (warmup, warmup_table, dict(rounds=1, duration=3.0, clients=3, coords=2000)),
    "stale_address": (stale_address, partial(json.dumps, indent=2), dict(rounds=3, duration=12.0)),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name, (_, _, options) in SCENARIOS.items():
        s = sub.add_parser(name, help=f"docs/benchmarks/serving.md, {name}")
        s.add_argument("--models", type=Path, default=ROOT / "models")
        s.add_argument("--out", type=Path, default=RESULTS / f"{name}.json", help="the result file")
        for flag, default in options.items():
            kind = type((default or [""])[0]) if isinstance(default, list) else type(default)
            split = partial(lambda kind, text: [kind(v) for v in text.split(",") if v], kind)
            kw = {"action": "append"} if flag == "variant" else {"type": split if isinstance(default, list) else kind}
            s.add_argument(f"--{flag}", default=default, **kw)
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    run, table, _ = SCENARIOS[(a := p.parse_args(argv)).scenario]
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tempfile.tempdir:  # every folder of the run in it
        write_json(a.out.stem, result := run(a), a.out.parent)
    tempfile.tempdir = None
    print(table(result))  # noqa: T201  (a command's result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
