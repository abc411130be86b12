"""Models on S3, against a real S3 server (Swift's S3 API: tests/s3server.py, deploy/s3): `python -m bench.s3 PART
[options]`, or `python -m bench s3_models|s3_shards -- [options]`. What each measures, its commands and its results:
docs/benchmarks/fits-and-browser.md (s3_models, s3_shards). `first-tile`, `listing` and `outage` are s3_models'
parts (one result file, a key each); `photos` fits the two photos that s3_shards serves beside the bundled one.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .collections import cli, every, make_copies, metric, rotate, serving, tile_url, timed
from .common import ROOT

PHOTOS = ("coffee", "rocket")  # scikit-image's, fitted with the grid preset at their native size (`photos`)
TILE, MODELS = "/iiif/3/{}/0,0,1024,1024/512,/0/default.jpg", ROOT / "models"
LISTINGS = ("before", "sequential", "ranges")


@contextlib.contextmanager
def bucket(sources: list[Path], n: int, folder: Path | None = None):
    """A real S3 server and N copies of `sources` pushed to a bucket: (server, bucket URL, TMP, names, push seconds)."""
    from tests.s3server import S3Server

    with tempfile.TemporaryDirectory(prefix="inr-bench-s3-", dir=folder, ignore_cleanup_errors=True) as tmp:
        with contextlib.closing(S3Server()) as s3:
            os.environ.update(s3.env)
            url, names, t0 = s3.url(s3.bucket()), make_copies(sources, n, Path(tmp, "models")), time.perf_counter()
            if names:
                push = [sys.executable, "-m", "modelrepo", "push", str(Path(tmp, "models")), url]
                subprocess.run(push, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            yield s3, url, Path(tmp), names, round(time.perf_counter() - t0, 1)


def scrape(url: str) -> tuple[dict[str, float], set[str]]:
    """A server's requests to S3 by operation, and the models it answered requests for."""
    ops, models = {}, set()
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=60).text):
        for s in family.samples:
            if s.name == "inr_model_repository_requests":
                ops[s.labels["operation"]] = s.value
            elif s.name == "inr_request_duration_seconds_count" and s.labels.get("model") and s.value:
                models.add(s.labels["model"])
    return ops, models


def alternate(urls: dict[str, str], names: list[str], path_of, offset: int = 0) -> dict[str, list[float]]:
    """Each model's first tile of every side in turn, which side goes first alternating: seconds."""
    out: dict = {k: [] for k in urls}
    with httpx.Client(timeout=300) as c:
        for i, name in enumerate(names):
            for k in rotate(list(urls), i + offset):
                out[k].append(round(timed(c, urls[k] + path_of(name)) / 1000, 3))
    return out


def medians_of(times: dict[str, list[float]]) -> dict:
    med = {f"median_{k}_s": round(statistics.median(v), 3) for k, v in times.items()}
    return med | {"ratio": round(med["median_s3_s"] / med["median_local_s"], 2)}


def first_tile(args) -> dict:
    """Copies of dandelion in a folder and a bucket (its disk cache half their bytes): first tiles of both in turn; a
    server started again on the cache: its requests to S3 for the tiles of the models still in it."""
    budget = sum(p.stat().st_size for p in (MODELS / "dandelion").rglob("*.onnx")) * max(1, args.models // 2)
    with bucket([MODELS / "dandelion"], args.models) as (s3, url, tmp, names, _):
        env = {**s3.env, "INR_SESSION_CACHE": "off"}  # every first load optimises, on both sides alike
        cache = {**env, "INR_MODEL_CACHE": str(tmp / "cache"), "INR_MODEL_CACHE_BYTES": str(budget)}
        with serving(tmp / "models", "local", env) as local, serving(url, "s3", cache) as remote:
            times = alternate({"local": local.url, "s3": remote.url}, names, TILE.format)
            out = {"first_tile_local_s": times["local"], "first_tile_s3_s": times["s3"], **medians_of(times)}
            out["cache_bytes_at_end"] = metric(remote.url, "inr_model_cache_bytes")
        with serving(url, "s3 again", cache) as again, httpx.Client(base_url=again.url, timeout=120) as c:
            [timed(c, TILE.format(name)) for name in names[-(args.models // 2) :]]  # the ones still in the cache
            out["restart_requests"] = scrape(again.url)[0]
    files = sum(p.stat().st_size for p in (MODELS / "dandelion").rglob("*") if p.is_file())
    return merged(args, {"models": args.models, "model_bytes": files, "cache_budget_bytes": budget, **out})


def listing(args) -> dict:
    """N models of five objects listed in-process (new, then unchanged) three ways in turn: `before` (pages in turn,
    botocore's timestamps: before modelrepo/s3listing.py), `sequential` (fast timestamps), `ranges` (modelrepo's)."""
    import boto3
    from botocore.config import Config

    from modelrepo.s3 import S3Repository
    from modelrepo.s3listing import build_index, list_range

    def boto(s3, tries: int):
        config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": tries, "mode": "standard"})
        return boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", config=config)

    def scan(way: str, repo) -> dict:
        prefix = repo.location.prefix
        return repo._list(prefix) if way == "ranges" else build_index(list_range(repo, prefix)[0], len(prefix))

    meta = json.dumps({"version": 1, "onnx_sha256": "0" * 64}).encode()
    files = {k: (MODELS / "astronaut" / k).read_bytes() for k in ("config.pbtxt", "metadata.json")}
    files |= {"1/model.onnx": b"onnx", "1/.published": b"{}", "1/metadata.json": meta}
    with bucket([], 0) as (s3, url, tmp, _, _):
        put, name, t0 = boto(s3, 10).put_object, url.split("/")[3], time.perf_counter()
        with cf.ThreadPoolExecutor(8) as pool:  # each PUT retried: a loaded server answers 503
            keys = [(f"models/m{i:05d}/{k}", v) for i in range(args.models) for k, v in files.items()]
            list(pool.map(lambda kv: put(Bucket=name, Key=kv[0], Body=kv[1]), keys))
        out = {"models": args.models, "objects": len(keys), "fill_s": round(time.perf_counter() - t0, 1), "rounds": []}
        for r in range(args.rounds):
            out["rounds"].append(got := {"load": round(os.getloadavg()[0], 1)})
            for way in rotate(list(LISTINGS), r):
                repo = S3Repository(url, tmp / f"{way}-{r}", client=boto(s3, 3) if way == "before" else None)
                t0, index = time.perf_counter(), scan(way, repo)
                first, repo.index = time.perf_counter() - t0, index
                before, t0 = dict(repo.requests), time.perf_counter()
                again, rescan = scan(way, repo), time.perf_counter() - t0
                if again != index or sum(bool(m.published) for m in index.values()) != args.models:
                    raise SystemExit(f"{way}: not every model listed: {dict(repo.requests)}")
                during = {op: n - before.get(op, 0) for op, n in repo.requests.items()}
                got[way] = {"list_s": round(first, 2), "rescan_s": round(rescan, 2), "rescan_requests": during}
    for way, what in ((way, what) for way in LISTINGS for what in ("list_s", "rescan_s")):
        out[f"{way}_{what}_median"] = statistics.median(r[way][what] for r in out["rounds"])
    return merged(args, out)


def outage(args) -> dict:
    """N copies of dandelion from the bucket, half loaded first; 4 clients ask tiles of all while S3 stops for --down
    seconds and starts again: the answers of each half by status, in each phase."""
    with bucket([MODELS / "dandelion"], args.models) as (s3, url, tmp, names, _):
        env = {**s3.env, "INR_MODEL_CACHE": str(tmp / "cache"), "INR_MODEL_CONTROL_MODE": "poll"}
        with serving(url, "s3", {**env, "INR_REPOSITORY_POLL_SECS": "1"}) as srv:
            cached, phase, answers, stop = names[: len(names) // 2], ["before"], [], threading.Event()
            [timed(httpx.Client(base_url=srv.url, timeout=120), TILE.format(name)) for name in cached]

            def client(i: int) -> None:
                with httpx.Client(timeout=60) as c:
                    while not stop.is_set():
                        name, i = names[i % len(names)], i + 1
                        try:
                            r = c.get(srv.url + TILE.format(name))
                            status = str(r.status_code) + ("+retry-after" if r.headers.get("retry-after") else "")
                        except httpx.HTTPError as e:
                            status = type(e).__name__
                        answers.append((phase[0], "cached" if name in cached else "cold", status))

            threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
            [t.start() for t in threads]
            time.sleep(3)
            phase[0] = "s3 down"
            s3.stop()
            time.sleep(args.down)
            phase[0], t0 = "restarting", time.perf_counter()
            s3.start()
            phase[0], restarted = "after", time.perf_counter() - t0
            time.sleep(max(10.0, args.down / 2))
            stop.set()
            [t.join() for t in threads]
    table: dict = {}
    for ph, half, status in sorted(set(answers)):
        table.setdefault(ph, {}).setdefault(half, {})[status] = answers.count((ph, half, status))
    return merged(args, {"models": len(names), "cached": len(cached), "down_s": args.down,
                         "s3_restart_s": round(restarted, 1), "answers": table})  # fmt: skip


def merged(args, got: dict) -> dict:
    """An s3_models part's result beside the others' in its one result file (a key a part), dated, the load average."""
    old = json.loads(args.json.read_text()) if args.json.is_file() else {}
    got |= {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()[0]}
    return {**old.get("result", old), args.scenario: got}


def du(folder: Path) -> int:
    """A folder's blocks as `du -s` counts them: its files' and folders'."""
    total = 0
    for dirpath, _, names in os.walk(folder):
        for path in [dirpath, *(os.path.join(dirpath, n) for n in names)]:
            with contextlib.suppress(OSError):  # evicted meanwhile
                total += os.lstat(path).st_blocks * 512
    return total


def s3_shards(args) -> dict:
    """MODELS copies in a bucket behind two replicas sharded by nginx (disk caches of --cache-share of half the ONNX),
    beside two on a folder: `first_tile`s in turn, `load`, `shards`, `restart` on the caches; the caches' disk."""
    from modelrepo.diskcache import RECENT_S, on_disk
    from tests.deploy.nginxconf import LocalNginx

    sources = [p for p in args.from_ if (p / "config.pbtxt").is_file()]
    size = {p.name: json.loads((p / "1" / "metadata.json").read_text())["source"]["size"] for p in sources}
    path_of = lambda name: tile_url(name, *size[name.rsplit("-", 1)[0]])  # noqa: E731
    with bucket(sources, args.models, args.tmp) as (s3, url, tmp, names, push_s), contextlib.ExitStack() as stack:
        onnx = lambda n: (tmp / "models" / n).glob("[0-9]*/**/*.onnx")  # noqa: E731
        nbytes = {n: sum(on_disk(p.stat().st_size) for p in onnx(n)) for n in names}
        budget, caches = int(sum(nbytes.values()) / 2 * args.cache_share), [tmp / "cache-0", tmp / "cache-1"]
        common = {"INR_RENDER_CACHE_BYTES": "0", "INR_SESSION_CACHE": "off", "INR_MEMORY_BUDGET": args.memory_budget}
        envs = [{**common, **s3.env, "INR_MODEL_CACHE": str(c), "INR_MODEL_CACHE_BYTES": str(budget)} for c in caches]
        s3s = [stack.enter_context(serving(url, f"s3-{i}", env)) for i, env in enumerate(envs)]
        local = [stack.enter_context(serving(tmp / "models", f"local-{i}", common)) for i in range(2)]
        nginx = {}
        for side, replicas in (("s3", s3s), ("local", local)):
            (tmp / side).mkdir()
            nginx[side] = LocalNginx(tmp / side, [f"127.0.0.1:{r.port}" for r in replicas])
            stack.callback(nginx[side].stop)
        peak, disk = [0, 0], {"samples": 0, "over_budget": 0}

        def sample() -> None:
            used = [du(c) for c in caches]
            peak[:] = map(max, peak, used)
            disk.update(samples=disk["samples"] + 1, over_budget=disk["over_budget"] + sum(u > budget for u in used))

        sampler, chosen = every(0.5, sample), random.Random(0).sample(names, args.rounds * args.per_round)
        urls, times = {k: n.url for k, n in nginx.items()}, {"s3": [], "local": []}
        first = {"models": chosen, "rounds": []}
        for r in range(args.rounds):
            got = alternate(urls, chosen[r * args.per_round : (r + 1) * args.per_round], path_of, r)
            first["rounds"].append(medians_of(got) | {"load": os.getloadavg()[0]})
            [times[k].extend(v) for k, v in got.items()]
        out = {"models": args.models, "sources": [p.name for p in sources], "cache_budget_bytes": budget,
               "push_s": push_s, "models_onnx_bytes": sum(nbytes.values())}  # fmt: skip
        out["first_tile"] = first | medians_of(times) | {f"{k}_s": v for k, v in times.items()}
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(args.clients) as pool, httpx.Client(base_url=urls["s3"], timeout=300) as c:
            done = list(pool.map(lambda name: timed(c, path_of(name)) / 1000, names))
        out["load"] = {"tiles": len(done), "seconds": round(time.perf_counter() - t0, 1),
                       "median_s": round(statistics.median(done), 3)}  # fmt: skip
        sampler.set()
        out["disk_during"] = disk | {"peak_du_bytes": {f"s3-{i}": p for i, p in enumerate(peak)}}
        time.sleep(RECENT_S + 1)  # a file just fetched is spared that long, then the cache is trimmed
        out["disk_after_load"], seen = {f"s3-{i}": du(c) for i, c in enumerate(caches)}, [scrape(r.url) for r in s3s]
        out["shards"] = {"overlap": len(seen[0][1] & seen[1][1]), "answered_all": seen[0][1] | seen[1][1] >= set(names)}
        for i, (ops, models) in enumerate(seen):
            mine = sum(nbytes[m] for m in models)
            out["shards"][f"s3-{i}"] = {"models": len(models), "shard_onnx_bytes": mine, "requests": ops,
                                        "budget_over_shard": round(budget / mine, 2) if mine else None}  # fmt: skip
        [r.stop() for r in s3s]  # started again where nginx expects them (the same ports: the same hash ring)
        s3s = [stack.enter_context(serving(url, f"s3-{i}", e, port=r.port)) for i, (r, e) in enumerate(zip(s3s, envs))]
        out["restart"] = {r.name: restarted(r.url, urls["s3"], c, path_of) for r, c in zip(s3s, caches)}
        out["disk_after"] = {f"s3-{i}": {"du_bytes": du(c)} for i, c in enumerate(caches)}
    return out | {"load_after": os.getloadavg()[0]}


def restarted(url: str, through: str, cache: Path, path_of) -> dict:
    """The tiles of the models a replica's cache holds, through nginx, and the requests the replica made to S3."""
    held = sorted(p.parent.parent.name for p in cache.glob("s3-*/*/1/model.onnx"))
    before = scrape(url)[0]
    with httpx.Client(base_url=through, timeout=300) as c:
        times = [timed(c, path_of(n)) / 1000 for n in held]
    after, models = scrape(url)
    return {"models_in_cache": len(held), "served_by_it": len(models & set(held)), "requests_at_start": before,
            "median_s": round(statistics.median(times), 3) if times else None,
            "requests_for_the_tiles": {op: after[op] - before.get(op, 0) for op in after}}  # fmt: skip


def photos(args) -> None:
    """PHOTOS fitted with the grid preset (fitstore.PRESETS) at their native size into --out, unless there."""
    from fitstore import PRESETS

    for p in (p for p in PHOTOS if not (args.out / p / "config.pbtxt").is_file()):
        cmd = [sys.executable, "-m", "training", "fit-image", "--image", p, *PRESETS["grid"]["argv"], "--protocol"]
        cmd += ["full", "--steps", str(args.steps), "--no-progress", "--out", str(args.out / p)]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


COMMANDS = [
    ("first-tile", first_tile, "s3_models", {"models": 8}),
    ("listing", listing, "s3_models", {"models": 10_000, "rounds": 3}),
    ("outage", outage, "s3_models", {"models": 8, "down": 15.0}),
    ("photos", photos, None, {"out": ROOT / "build" / "s3-shards-photos", "steps": 280}),
    ("s3_shards", s3_shards, "s3_shards", {"from_": [Path], "models": 300, "rounds": 5, "per_round": 8, "clients": 2,
     "cache_share": 0.3, "memory_budget": "512MiB", "tmp": Path(tempfile.gettempdir())}),
]  # fmt: skip


main = functools.partial(cli, "python -m bench.s3", __doc__, COMMANDS)

if __name__ == "__main__":
    sys.exit(main())
