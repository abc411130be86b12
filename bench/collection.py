"""A collection of photo models in one replica under a memory budget (docs/benchmarks.md, collection).

    python -m bench.collection make --from models/dandelion build/fits/* --count 1000 --out /tmp/collection
    python -m bench.collection tiles --models /tmp/collection --budgets 512MiB,1GiB,2GiB --seconds 60
    python -m bench.collection cold --models /tmp/collection --budget 2GiB --samples 40
    python -m bench.collection startup --models /tmp/collection-10k

`make` writes COUNT model folders, copies under distinct names of the given fitted models (their files hard
links: a collection of 1,000 takes the disk of its distinct photos). `tiles` runs the random-access workload of
the issue: 512² IIIF tiles as OpenSeadragon asks for them (a random level of the image's tile pyramid, a random
tile of it), the model drawn with Zipf(1.1) popularity over the models, from CLIENTS clients, the render cache
off so that every tile is the model's; it samples the service's resident set all along and reports, per budget,
the share of requests whose model was resident (hit rate), loads per second, tile p50/p99 and the largest RSS.
`cold` asks the first 512² tile of models that are not resident, one at a time (load, warmup, render), with the
session cache off, filled, and empty, side by side. `startup`
times a start to /health/ready, the idle RSS, and the CPU of one repository rescan, in-process, with no model read
and with every model read.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from .procs import status_kib
from .serving import Server, machine

ROOT = Path(__file__).resolve().parents[1]


def copy_model(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=os.link)
    config = dst / "config.pbtxt"
    text = (src / "config.pbtxt").read_text().replace(f'name: "{src.name}"', f'name: "{dst.name}"')
    config.unlink()
    config.write_text(text)


def make(args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    sources = [p for p in args.sources if (p / "config.pbtxt").is_file()]
    for i in range(args.count):
        src = sources[i % len(sources)]
        dst = args.out / f"{src.name}-{i:05d}"
        if not dst.exists():
            copy_model(src, dst)
    return {"models": args.count, "distinct": [p.name for p in sources]}


def rss_of(pid: int) -> int:
    return status_kib(pid, "VmRSS") * 1024


class Sampler(threading.Thread):
    """The largest resident set of process `pid`, sampled every `every_s`."""

    def __init__(self, pid: int, every_s: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.every_s, self.peak, self.stop = pid, every_s, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.peak = max(self.peak, rss_of(self.pid))
            except OSError:
                return


def zipf_weights(n: int, s: float) -> list[float]:
    return [1 / (k**s) for k in range(1, n + 1)]


def tile_url(name: str, width: int, height: int, rng: random.Random, tile: int = 512) -> str:
    """A tile as OpenSeadragon asks for it: a level of the pyramid (scale factor 2^k until the image fits one
    tile), a tile of that level, its region in full-size pixels and its size."""
    levels = max(1, math.ceil(math.log2(max(width, height) / tile)) + 1)
    scale = 2 ** rng.randrange(levels)
    span = tile * scale
    x = rng.randrange(0, width, span) if width > span else 0
    y = rng.randrange(0, height, span) if height > span else 0
    w, h = min(span, width - x), min(span, height - y)
    return f"/iiif/3/{name}/{x},{y},{w},{h}/{math.ceil(w / scale)},/0/default.jpg"


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def sizes(url: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """Each distinct photo's native size (every copy of it has the same)."""
    out = {}
    for name in names:
        photo = name.rsplit("-", 1)[0]
        if photo not in out:
            detail = httpx.get(f"{url}/v1/models/{name}", timeout=60).json()
            out[photo] = (detail["width"], detail["height"])
    return out


def tiles(args) -> list[dict]:
    names = sorted(p.name for p in args.models.iterdir() if (p / "config.pbtxt").is_file())
    rows = []
    for budget in args.budgets:
        srv = Server(
            args.models,
            "collection",
            env={"INR_RENDER_CACHE_BYTES": "0", **dict(e.split("=", 1) for e in args.env)},
            args=("--memory-budget", budget, "--max-concurrent-loads", str(args.loads)),
        )
        try:
            srv.wait(300)
            rows.append(run_tiles(srv, names, budget, args))
        finally:
            srv.stop()
    return rows


def run_tiles(srv: Server, names: list[str], budget: str, args) -> dict:
    shape = sizes(srv.url, names)
    rng = random.Random(args.seed)
    order = names[:]
    rng.shuffle(order)  # popularity is not alphabetical
    weights = zipf_weights(len(order), args.zipf)
    idle = rss_of(srv.proc.pid)
    sampler = Sampler(srv.proc.pid)
    sampler.start()
    latencies, codes, lock = [], {}, threading.Lock()
    counting = threading.Event()  # after --warmup seconds: the steady state
    start = time.monotonic()
    end = start + args.warmup + args.seconds

    def client(seed: int) -> None:
        r = random.Random(seed)
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            while time.monotonic() < end:
                name = r.choices(order, weights)[0]
                url = tile_url(name, *shape[name.rsplit("-", 1)[0]], r)
                began, counted = time.perf_counter(), counting.is_set()
                code = c.get(url).status_code
                if counted:
                    with lock:
                        latencies.append(time.perf_counter() - began)
                        codes[code] = codes.get(code, 0) + 1

    threads = [threading.Thread(target=client, args=(args.seed + i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(args.warmup)
    loads0, t0 = metric(srv.url, 'inr_model_loads_total{result="loaded"}'), time.monotonic()
    counting.set()
    for t in threads:
        t.join()
    seconds = time.monotonic() - t0
    sampler.stop.set()
    loads = metric(srv.url, 'inr_model_loads_total{result="loaded"}') - loads0
    latencies.sort()
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000  # noqa: E731
    return {
        "budget": budget,
        "models": len(names),
        "requests": len(latencies),
        "codes": codes,
        "hit_rate": round(1 - loads / max(len(latencies), 1), 3),
        "loads_per_s": round(loads / seconds, 2),
        "p50_ms": round(q(0.5), 1),
        "p99_ms": round(q(0.99), 1),
        "idle_rss_mib": round(idle / 2**20),
        "peak_rss_mib": round(sampler.peak / 2**20),
        "resident_models_end": metric(srv.url, "inr_models_resident"),
        "resident_mib_end": round(metric(srv.url, "inr_model_resident_bytes") / 2**20),
        "rss_mib_end": round(rss_of(srv.proc.pid) / 2**20),
        "seconds": round(seconds, 1),
        "warmup_s": args.warmup,
    }


def cold(args) -> dict:
    """The first tile of cold models, per variant of the session cache, side by side in one round: `off`; `cached`,
    its folder filled beforehand (a model back after an eviction, or loaded before on this machine); `first`, a
    fresh folder and one copy of each photo (the first load ever: the graph optimised and written)."""
    names = sorted(p.name for p in args.models.iterdir() if (p / "config.pbtxt").is_file())
    pool = [n for n in names if not args.photos or n.rsplit("-", 1)[0] in args.photos]
    sample = random.Random(args.seed).sample(pool, args.samples)
    firsts = list({n.rsplit("-", 1)[0]: n for n in sample}.values())
    work = Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    try:
        out = {}
        for variant in args.variants:
            folder = {"off": "off", "cached": str(work / "cached"), "first": str(work / f"first-{len(out)}")}[variant]
            if variant == "cached":  # filled by a server that loads one copy of each photo
                cold_tiles(args, names, firsts, folder)
            out[variant] = cold_tiles(args, names, firsts if variant == "first" else sample, folder)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cold_tiles(args, names: list[str], sample: list[str], session_cache: str) -> dict:
    env = {"INR_RENDER_CACHE_BYTES": "0", "INR_SESSION_CACHE": session_cache}
    srv = Server(args.models, "collection", env=env, args=("--memory-budget", args.budget))
    try:
        srv.wait(300)
        shape = sizes(srv.url, names)
        times, per_pixel = [], []
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            for name in sample:
                w, h = shape[name.rsplit("-", 1)[0]]
                start = time.perf_counter()
                r = c.get(f"/iiif/3/{name}/0,0,{min(w, 512)},{min(h, 512)}/{min(w, 512)},/0/default.jpg")
                times.append(time.perf_counter() - start)
                assert r.status_code == 200, r.text
                version = c.get(f"/v1/models/{name}").json()["versions"][0]
                per_pixel.append(version["bytes"] / (w * h))
        times.sort()
        return {
            "samples": len(times),
            "p50_ms": round(statistics.median(times) * 1000, 1),
            "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))] * 1000, 1),
            "max_ms": round(times[-1] * 1000, 1),
            "bytes_per_pixel_median": round(statistics.median(per_pixel), 2),
            "bytes_per_pixel_max": round(max(per_pixel), 2),
        }
    finally:
        srv.stop()


def startup(args) -> dict:
    start = time.monotonic()
    srv = Server(args.models, "collection", args=("--memory-budget", "2GiB"))
    try:
        srv.wait(600)
        ready_s = time.monotonic() - start
        time.sleep(2)
        idle = rss_of(srv.proc.pid)
    finally:
        srv.stop()
    return {
        "models": sum(1 for _ in args.models.iterdir()),
        "ready_s": round(ready_s, 2),
        "idle_rss_mib": round(idle / 2**20),
        **rescan_cpu(args.models),
    }


def rescan_cpu(models: Path) -> dict:
    """CPU milliseconds of one rescan (poll mode, on-demand), median of 9: none read, then all read."""
    sys.path.insert(0, str(ROOT))
    from service.engine.control import ModelControl
    from service.engine.registry import Registry
    from service.engine.residency import Residency, ResidencyOptions
    from service.engine.runtime import RuntimeOptions

    registry = Registry(models, RuntimeOptions(), Residency(ResidencyOptions(budget=2**30)))  # as the server has
    control = ModelControl(registry, "poll", on_demand=True)
    registry.list_all()

    def once() -> float:
        cpu = []
        for _ in range(9):
            t = time.process_time()
            control.poll_once()
            cpu.append((time.process_time() - t) * 1000)
        return round(statistics.median(cpu), 1)

    none_read = once()
    t = time.process_time()
    for name in registry.names():
        registry.get(name)
    read_all_s = time.process_time() - t
    return {
        "rescan_cpu_ms_none_read": none_read,
        "rescan_cpu_ms_all_read": once(),
        "read_every_model_cpu_s": round(read_all_s, 2),
    }


def medians(rounds: list) -> dict:
    """Each number's median over the rounds (a list of rows: row by row), and every round."""

    def median_of(rows: list[dict]) -> dict:
        def one(k, v):
            if isinstance(v, dict):  # a variant's row
                return median_of([r[k] for r in rows])
            return statistics.median(r[k] for r in rows) if isinstance(v, (int, float)) else v

        return {k: one(k, v) for k, v in rows[0].items()}

    first = rounds[0]
    median = [median_of(list(rows)) for rows in zip(*rounds)] if isinstance(first, list) else median_of(rounds)
    return {"median": median, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.collection", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("make")
    m.add_argument("--from", dest="sources", type=Path, nargs="+", required=True)
    m.add_argument("--count", type=int, default=1000)
    m.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("tiles")
    t.add_argument("--models", type=Path, required=True)
    t.add_argument("--budgets", type=lambda s: s.split(","), default=["2GiB"])
    t.add_argument("--seconds", type=float, default=60)
    t.add_argument("--warmup", type=float, default=0, help="seconds of the same load before counting (steady state)")
    t.add_argument("--clients", type=int, default=4)
    t.add_argument("--zipf", type=float, default=1.1)
    t.add_argument("--loads", type=int, default=2, help="--max-concurrent-loads")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--env", action="append", default=[], help="KEY=VALUE in the server's environment (a variant)")
    c = sub.add_parser("cold")
    c.add_argument("--models", type=Path, required=True)
    c.add_argument("--budget", default="2GiB")
    c.add_argument("--samples", type=int, default=40)
    c.add_argument("--photos", type=lambda s: s.split(","), default=[], help="only copies of these (e.g. dune,storm)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--variants", type=lambda s: s.split(","), default=["off", "cached", "first"], help="of the session cache"
    )
    s = sub.add_parser("startup")
    s.add_argument("--models", type=Path, required=True)
    for q in (t, c, s):
        q.add_argument("--json", type=Path, help="also write the result here")
        q.add_argument("--rounds", type=int, default=3, help="runs, each on a fresh server; medians reported")
    args = p.parse_args(argv)
    run = {"tiles": tiles, "cold": cold, "startup": startup, "make": make}[args.what]
    result = run(args) if args.what == "make" else medians([run(args) for _ in range(args.rounds)])
    emit("bench.collection", argv, result, getattr(args, "json", None))
    return 0


def emit(module: str, argv: list[str] | None, result, path: Path | None) -> None:
    """The result with the machine and the command, as JSON on stdout and, with a path, in that file."""
    doc = {"machine": machine(), "command": f"python -m {module} " + " ".join(argv or sys.argv[1:]), "result": result}
    text = json.dumps(doc, indent=1)
    print(text)
    if path:
        path.write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
