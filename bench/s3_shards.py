"""Photo models in an S3 bucket behind 2 replicas sharded by name (docs/benchmarks.md, "s3_shards").

    python -m bench.s3_shards photos --out build/s3-shards-photos     # 2 photos fitted with the grid preset
    python -m bench.s3_shards run --from models/dandelion build/s3-shards-photos/* --models 300

`photos` fits scikit-image's coffee and rocket at their native size with the `grid` preset (fitstore.PRESETS).
`run` makes MODELS hard-linked copies of the given fitted photo models under distinct names (bench.collection), copies
them into a bucket of a real S3 server (tests/s3server.py) with `python -m modelrepo push`, and starts two pairs of
replicas, each behind the nginx template (tests/deploy/nginxconf.py: hashing by model, one server per replica): `s3`
on the bucket, each replica with its own disk cache whose INR_MODEL_CACHE_BYTES is --cache-share of half the models'
ONNX bytes (below a shard's: it evicts), and `local` on the folder; the same memory budget, no render cache and no
session cache on all four. Then, all through nginx: 1. `first_tile`: ROUNDS rounds of PER_ROUND models never asked
before, each model's first 512² IIIF tile of both sides, alternating which goes first; 2. `load`: the first tile of
every model of the s3 side (CLIENTS clients); 3. `shards`: the models each replica answered (its own request
metrics); 4. `restart`: the s3 replicas started again on the same ports and caches, the tile of each model still in
a cache asked again, and the GETs each replica made (its /metrics). The caches' disk (blocks, as `du -s` counts
them) is sampled all along 1-2, 6 s after 2 and at the end. Results: bench/results/s3_shards.json (--json).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.collection import copy_model
from bench.serving import ROOT, Server, machine
from modelrepo.diskcache import RECENT_S, on_disk

RESULTS = ROOT / "bench" / "results" / "s3_shards.json"
PHOTOS = ("coffee", "rocket")


def photos(args) -> dict:
    from fitstore import PRESETS

    grid = PRESETS["grid"]
    for image in PHOTOS:
        out = args.out / image
        if not (out / "config.pbtxt").is_file():
            cmd = [sys.executable, "-m", "training", "fit-image", "--image", image, *grid["argv"]]
            cmd += ["--protocol", "full", "--steps", str(args.steps), "--no-progress", "--out", str(out)]
            subprocess.run(cmd, check=True, cwd=ROOT)
    return {"photos": [str(args.out / p) for p in PHOTOS], "steps": args.steps}


def version_bytes(folder: Path) -> int:
    """The disk a model's version files that a load fetches (its ONNX files) take in a cache."""
    return sum(on_disk(p.stat().st_size) for p in folder.glob("[0-9]*/**/*.onnx"))


def du(folder: Path) -> int:
    """A folder's blocks as `du -s` counts them: its files' and folders'."""
    total = 0
    for dirpath, _, names in os.walk(folder):
        for path in [dirpath, *(os.path.join(dirpath, n) for n in names)]:
            with contextlib.suppress(OSError):  # evicted meanwhile
                total += os.lstat(path).st_blocks * 512
    return total


class DiskSampler(threading.Thread):
    """Each cache's disk every `every_s`: the largest seen, and how many samples were over the budget."""

    def __init__(self, caches: dict[str, Path], budget: int, every_s: float = 0.5):
        super().__init__(daemon=True)
        self.caches, self.budget, self.every_s, self.stop = caches, budget, every_s, threading.Event()
        self.peak, self.samples, self.over = dict.fromkeys(caches, 0), 0, 0

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.samples += 1
            for k, folder in self.caches.items():
                got = du(folder)
                self.peak[k], self.over = max(self.peak[k], got), self.over + (got > self.budget)


def tile(name: str, size: tuple[int, int]) -> str:
    return f"/iiif/3/{name}/0,0,{min(size[0], 512)},{min(size[1], 512)}/{min(size[0], 512)},/0/default.jpg"


def scrape(url: str) -> tuple[dict[str, float], set[str]]:
    """A replica's S3 requests by operation, and the models it answered requests for."""
    ops, models = {}, set()
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=60).text):
        for s in family.samples:
            if s.name == "inr_model_repository_requests":
                ops[s.labels["operation"]] = s.value
            elif s.name == "inr_request_duration_seconds_count" and s.labels.get("model") and s.value:
                models.add(s.labels["model"])
    return ops, models


class Side:
    """Two replicas on one repository behind the nginx template."""

    def __init__(self, label: str, models: str, envs: list[dict], folder: Path):
        from tests.deploy.nginxconf import LocalNginx

        self.label, self.models, self.envs, self.replicas, self.nginx = label, models, envs, [], None
        try:
            self.start([None, None])
            folder.mkdir(parents=True, exist_ok=True)
            self.nginx = LocalNginx(folder, [f"127.0.0.1:{r.port}" for r in self.replicas])
        except BaseException:
            self.stop()
            raise
        self.url = self.nginx.url

    def start(self, ports: list[int | None]) -> None:
        for i, port in enumerate(ports):  # started side by side
            self.replicas.append(Server(self.models, f"{self.label}-{i}", env=self.envs[i], port=port))
        for r in self.replicas:
            r.wait(300)

    def restart(self) -> None:
        """Both stopped, then started again where nginx expects them (the same ports: the same hash ring)."""
        ports = [r.port for r in self.replicas]
        self.stop(nginx=False)
        self.replicas = []
        self.start(ports)

    def stop(self, nginx: bool = True) -> None:
        if nginx and self.nginx is not None:
            self.nginx.stop()
        for r in self.replicas:
            r.stop()


def get(client: httpx.Client, url: str) -> float:
    t0 = time.perf_counter()
    r = client.get(url)
    took = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"{url}: {r.status_code} {r.text[:300]}")
    return took


def run(args) -> dict:
    from tests.s3server import S3Server

    tmp = Path(tempfile.mkdtemp(prefix="inr-bench-shards-", dir=args.tmp))
    sources = [p for p in args.sources if (p / "config.pbtxt").is_file()]
    folder, names = tmp / "models", []
    folder.mkdir()
    for i in range(args.models):
        src = sources[i % len(sources)]
        names.append(f"{src.name}-{i:05d}")
        copy_model(src, folder / names[-1])
    size = {p.name: tuple(json.loads((p / "1" / "metadata.json").read_text())["source"]["size"]) for p in sources}
    nbytes = {n: version_bytes(folder / n) for n in names}
    budget = int(sum(nbytes.values()) / 2 * args.cache_share)
    out = {**machine(), "models": args.models, "sources": [p.name for p in sources], "cache_budget_bytes": budget,
           "models_onnx_bytes": sum(nbytes.values())}  # fmt: skip
    s3, sides = None, {}
    try:
        (tmp / "s3").mkdir()
        s3 = S3Server(tmp / "s3")
        os.environ.update(s3.env)
        bucket = s3.bucket()
        t0 = time.perf_counter()
        push = [sys.executable, "-m", "modelrepo", "push", str(folder), s3.url(bucket)]
        subprocess.run(push, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env={**os.environ, **s3.env})
        out["push_s"] = round(time.perf_counter() - t0, 1)
        common = {"INR_RENDER_CACHE_BYTES": "0", "INR_SESSION_CACHE": "off", "INR_MEMORY_BUDGET": args.memory_budget}
        caches = {f"s3-{i}": tmp / f"cache-{i}" for i in range(2)}
        s3_envs = [{**common, **s3.env, "INR_MODEL_CACHE": str(c), "INR_MODEL_CACHE_BYTES": str(budget)}
                   for c in caches.values()]  # fmt: skip
        sides["s3"] = Side("s3", s3.url(bucket), s3_envs, tmp / "nginx-s3")
        sides["local"] = Side("local", str(folder), [common, common], tmp / "nginx-local")
        sampler = DiskSampler(caches, budget)
        sampler.start()
        out["first_tile"] = first_tiles(args, sides, names, size)
        out["load"] = load(args, sides["s3"], names, size)
        sampler.stop.set()
        sampler.join()
        out["disk_during"] = {"samples": sampler.samples, "over_budget": sampler.over, "peak_du_bytes": sampler.peak}
        time.sleep(RECENT_S + 1)  # a file just fetched is spared that long, then the cache is trimmed
        out["disk_after_load"] = {k: du(c) for k, c in caches.items()}
        out["shards"] = shards(sides["s3"], names, nbytes, budget)
        out["restart"] = restart(sides["s3"], caches, size)
        out["disk_after"] = {k: {"du_bytes": du(c)} for k, c in caches.items()}
        out["load_after"] = os.getloadavg()[0]
        return out
    finally:
        for side in sides.values():
            side.stop()
        if s3 is not None:
            s3.close()
        shutil.rmtree(tmp, ignore_errors=True)


def first_tiles(args, sides: dict[str, Side], names: list[str], size: dict) -> dict:
    sample = random.Random(args.seed).sample(names, args.rounds * args.per_round)
    times = {"s3": [], "local": []}
    rounds = []
    clients = {k: httpx.Client(base_url=s.url, timeout=300) for k, s in sides.items()}
    for r in range(args.rounds):
        row = {"s3": [], "local": []}
        for i, name in enumerate(sample[r * args.per_round : (r + 1) * args.per_round]):
            for side in ("s3", "local") if (r + i) % 2 == 0 else ("local", "s3"):
                row[side].append(get(clients[side], tile(name, size[name.rsplit("-", 1)[0]])))
        for side in row:
            times[side] += row[side]
        medians = {k: round(statistics.median(v), 3) for k, v in row.items()}
        rounds.append({**medians, "ratio": round(medians["s3"] / medians["local"], 2), "load": os.getloadavg()[0]})
        print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    return {"models": sample, "rounds": rounds, "median_s3_s": med["s3"], "median_local_s": med["local"],
            "ratio": round(med["s3"] / med["local"], 2), "s3_s": [round(t, 3) for t in times["s3"]],
            "local_s": [round(t, 3) for t in times["local"]]}  # fmt: skip


def load(args, side: Side, names: list[str], size: dict) -> dict:
    t0, lock, done = time.perf_counter(), threading.Lock(), []

    def one(name: str) -> None:
        with httpx.Client(base_url=side.url, timeout=300) as c:
            took = get(c, tile(name, size[name.rsplit("-", 1)[0]]))
        with lock:
            done.append(took)

    with cf.ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(one, names))
    return {"tiles": len(done), "seconds": round(time.perf_counter() - t0, 1),
            "median_s": round(statistics.median(done), 3)}  # fmt: skip


def shards(side: Side, names: list[str], nbytes: dict, budget: int) -> dict:
    out, seen = {}, []
    for i, r in enumerate(side.replicas):
        ops, models = scrape(r.url)
        seen.append(models)
        mine = sum(nbytes[m] for m in models)
        out[f"s3-{i}"] = {"models": len(models), "shard_onnx_bytes": mine,
                          "budget_over_shard": round(budget / mine, 2) if mine else None, "requests": ops}  # fmt: skip
    out["overlap"] = len(seen[0] & seen[1])
    out["answered_all"] = seen[0] | seen[1] >= set(names)
    return out


def restart(side: Side, caches: dict[str, Path], size: dict) -> dict:
    side.restart()
    out = {}
    with httpx.Client(base_url=side.url, timeout=300) as c:
        for (k, cache), r in zip(caches.items(), side.replicas):
            held = sorted(p.parent.parent.name for p in cache.glob("s3-*/*/1/model.onnx"))
            before, _ = scrape(r.url)
            times = [get(c, tile(n, size[n.rsplit("-", 1)[0]])) for n in held]
            after, models = scrape(r.url)
            out[k] = {"models_in_cache": len(held), "served_by_it": len(models & set(held)),
                      "median_s": round(statistics.median(times), 3) if times else None,
                      "requests_at_start": before,
                      "requests_for_the_tiles": {op: after[op] - before.get(op, 0) for op in after}}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.s3_shards", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    f = sub.add_parser("photos")
    f.add_argument("--out", type=Path, default=ROOT / "build" / "s3-shards-photos")
    f.add_argument("--steps", type=int, default=280)
    r = sub.add_parser("run")
    r.add_argument("--from", dest="sources", type=Path, nargs="+", required=True)
    r.add_argument("--models", type=int, default=300)
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--per-round", type=int, default=8)
    r.add_argument("--clients", type=int, default=2)
    r.add_argument("--cache-share", type=float, default=0.3, help="the cache budget over half the models' bytes")
    r.add_argument("--memory-budget", default="512MiB")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--tmp", type=Path, default=None, help="the folder for the bucket, the models and the caches")
    r.add_argument("--json", type=Path, default=RESULTS, help="where the results go")
    args = p.parse_args(argv)
    result = {"photos": photos, "run": run}[args.what](args)
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.what == "run":
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "first_tile"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
