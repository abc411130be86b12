"""Models on S3 (docs/benchmarks.md, "Models on S3"), against a real S3 server (Swift's S3 API, tests/s3server.py).

    python -m bench.s3_models listing --models 10000     # list N models from the bucket, then rescan it unchanged
    python -m bench.s3_models first-tile --models 8      # the first tile of a model never seen: S3 against a folder
    python -m bench.s3_models outage --models 8          # S3 stopped and started again under load

`listing` fills a bucket with N small published models (config.pbtxt, metadata.json, 1/model.onnx,
1/metadata.json, 1/.published), then, each round, times three listings of it and a second one of the unchanged
bucket each, in a rotating order, counting the requests by operation (no GET may appear): `before` (paged
ListObjectsV2 one page after the other, botocore's timestamp parser: main before modelrepo/s3listing.py),
`sequential` (the same with the fast timestamps) and `ranges` (`S3Repository`'s own: key ranges side by side).
`first-tile` copies the bundled photo model `dandelion` under N names into a folder and into a bucket, starts one
server on each (fresh caches), and asks each model's first IIIF tile of each server in turn, alternating; it reports
the medians and their ratio, and the GETs a restarted S3 server makes for the same tiles (none: served from its disk
cache). `outage` serves N such models from
the bucket, loads half of them, then keeps 4 clients asking tiles of all N while the S3 server is stopped for
--down seconds and started again: the answers of each half, by status, before, during and after.
Results: bench/results/s3_models.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.serving import ROOT, Server
from tests.s3server import S3Server

RESULTS = ROOT / "bench" / "results" / "s3_models.json"
TILE = "/iiif/3/{}/0,0,1024,1024/512,/0/default.jpg"


def fill(s3: S3Server, bucket: str, n: int, threads: int = 8) -> float:
    """N published models of five objects each; seconds it took (each PUT retried: a loaded server answers 503)."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 10, "mode": "standard"}),
    )
    config = (ROOT / "models" / "astronaut" / "config.pbtxt").read_bytes()
    meta = (ROOT / "models" / "astronaut" / "metadata.json").read_bytes()
    vmeta = json.dumps({"version": 1, "onnx_sha256": "0" * 64}).encode()

    def one(i: int) -> None:
        name = f"m{i:05d}"
        for rel, body in (("config.pbtxt", config), ("metadata.json", meta), ("1/model.onnx", b"onnx"),
                          ("1/metadata.json", vmeta), ("1/.published", b"{}")):  # fmt: skip
            client.put_object(Bucket=bucket, Key=f"models/{name}/{rel}", Body=body)

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(n)))
    return time.perf_counter() - t0


VARIANTS = ("before", "sequential", "ranges")


def plain_client(s3: S3Server):
    """A boto3 client as modelrepo.s3 made one before its listing got ranges: botocore's own timestamp parser."""
    import boto3
    from botocore.config import Config

    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", config=config)


def scan_with(variant: str, repo) -> dict:
    """One listing of the repository, its way: `before` and `sequential` page through the whole prefix one page after
    the other (before: with botocore's timestamp parser, the listing of main before the ranges), `ranges` is
    S3Repository's own (modelrepo/s3listing.py)."""
    from modelrepo.s3listing import build_index, list_range

    if variant == "ranges":
        return repo._list(repo.location.prefix)
    return build_index(list_range(repo, repo.location.prefix)[0], len(repo.location.prefix))


def listing(args) -> dict:
    """Each round lists the bucket with every variant, in a rotating order: a first listing (a new repository, an
    empty cache) then a rescan of the unchanged bucket (the same repository, its last index known)."""
    from modelrepo.s3 import S3Repository

    s3 = S3Server()
    try:
        os.environ.update(s3.env)
        bucket = s3.bucket()
        filled = fill(s3, bucket, args.models)
        print(f"filled {args.models} models in {filled:.0f} s", file=sys.stderr, flush=True)
        out = {"models": args.models, "objects": 5 * args.models, "fill_s": round(filled, 1), "rounds": []}
        for k in range(args.rounds):
            row = {}
            for variant in VARIANTS[k % 3 :] + VARIANTS[: k % 3]:
                client = plain_client(s3) if variant == "before" else None
                repo = S3Repository(s3.url(bucket), tempfile.mkdtemp(prefix="inr-bench-s3-"), client=client)
                t0 = time.perf_counter()
                index = scan_with(variant, repo)
                first = time.perf_counter() - t0
                repo.index, before = index, dict(repo.requests)
                t0 = time.perf_counter()
                again = scan_with(variant, repo)
                rescan = time.perf_counter() - t0
                listed = [sum(1 for m in i.values() if m.published) for i in (index, again)]
                if listed != [args.models] * 2 or again != index:
                    raise SystemExit(f"{variant}: listed {listed} of {args.models} models: {dict(repo.requests)}")
                during = {op: repo.requests[op] - before.get(op, 0) for op in repo.requests}
                row[variant] = {"list_s": round(first, 2), "rescan_s": round(rescan, 2), "rescan_requests": during}
                shutil.rmtree(repo.root.parent, ignore_errors=True)
            row["load"] = round(os.getloadavg()[0], 1)
            print(json.dumps(row), file=sys.stderr, flush=True)
            out["rounds"].append(row)
        for variant in VARIANTS:
            for what in ("list_s", "rescan_s"):
                out[f"{variant}_{what}_median"] = statistics.median(r[variant][what] for r in out["rounds"])
        return out
    finally:
        s3.close()


def first_tile(args) -> dict:
    s3 = S3Server()
    tmp = Path(tempfile.mkdtemp(prefix="inr-bench-tiles-"))
    try:
        os.environ.update(s3.env)
        bucket, names = photo_bucket(s3, tmp, args.models)
        folder = tmp / "models"
        env = {**s3.env, "INR_SESSION_CACHE": "off"}  # every first load optimises, on both sides alike
        local = Server(folder, "local", env=env).wait()
        model_bytes = sum(p.stat().st_size for p in (ROOT / "models" / "dandelion").rglob("*.onnx"))
        budget = model_bytes * max(1, args.models // 2)  # half the models' files: the cache must evict
        cache_env = {**env, "INR_MODEL_CACHE": str(tmp / "cache"), "INR_MODEL_CACHE_BYTES": str(budget)}
        remote = Server(s3.url(bucket), "s3", env=cache_env).wait()
        times = {"local": [], "s3": []}
        try:
            for i, name in enumerate(names):  # alternate which side goes first
                for side in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
                    srv = local if side == "local" else remote
                    t0 = time.perf_counter()
                    r = httpx.get(srv.url + TILE.format(name), timeout=120)
                    times[side].append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
            cache_bytes = metric(remote, "inr_model_cache_bytes")
        finally:
            local.stop()
            remote.stop()
        again = Server(s3.url(bucket), "s3 again", env=cache_env).wait()
        try:
            for name in names[-(args.models // 2) :]:  # the ones still in the cache
                assert httpx.get(again.url + TILE.format(name), timeout=120).status_code == 200
            metrics = httpx.get(again.url + "/metrics").text
        finally:
            again.stop()
        gets = [line for line in metrics.splitlines() if line.startswith("inr_model_repository_requests{")]
        local_med, s3_med = statistics.median(times["local"]), statistics.median(times["s3"])
        return {
            "models": args.models,
            "model_bytes": sum(p.stat().st_size for p in (ROOT / "models" / "dandelion").rglob("*") if p.is_file()),
            "first_tile_local_s": [round(t, 3) for t in times["local"]],
            "first_tile_s3_s": [round(t, 3) for t in times["s3"]],
            "median_local_s": round(local_med, 3),
            "median_s3_s": round(s3_med, 3),
            "ratio": round(s3_med / local_med, 2),
            "restart_requests": gets,
            "cache_budget_bytes": budget,
            "cache_bytes_at_end": cache_bytes,
        }
    finally:
        s3.close()
        shutil.rmtree(tmp, ignore_errors=True)


def photo_bucket(s3: S3Server, tmp: Path, n: int) -> tuple[str, list[str]]:
    from modelrepo.s3 import S3Repository
    from modelrepo.s3publish import push_model

    bucket = s3.bucket()
    folder = tmp / "models"
    names = [f"photo{i:03d}" for i in range(n)]
    repo = S3Repository(s3.url(bucket), tmp / "push-cache")
    for name in names:
        shutil.copytree(ROOT / "models" / "dandelion", folder / name)
        config = folder / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "dandelion"', f'name: "{name}"'))
        push_model(repo, folder / name)
    return bucket, names


def outage(args) -> dict:
    import threading

    s3 = S3Server()
    tmp = Path(tempfile.mkdtemp(prefix="inr-bench-outage-"))
    try:
        os.environ.update(s3.env)
        bucket, names = photo_bucket(s3, tmp, args.models)
        srv = Server(
            s3.url(bucket),
            "s3",
            env={
                **s3.env,
                "INR_MODEL_CACHE": str(tmp / "cache"),
                "INR_MODEL_CONTROL_MODE": "poll",
                "INR_REPOSITORY_POLL_SECS": "1",
            },
        )
        srv.wait()
        cached = names[: len(names) // 2]  # loaded before the outage; the others never
        for name in cached:
            assert httpx.get(srv.url + TILE.format(name), timeout=120).status_code == 200
        phase, counts, stop = ["before"], {}, threading.Event()
        lock = threading.Lock()

        def client(k: int) -> None:
            with httpx.Client(timeout=60) as c:
                i = k
                while not stop.is_set():
                    name = names[i % len(names)]
                    i += 1
                    try:
                        r = c.get(srv.url + TILE.format(name))
                        status = str(r.status_code) + ("+retry-after" if r.headers.get("retry-after") else "")
                    except httpx.HTTPError as e:
                        status = type(e).__name__
                    key = (phase[0], "cached" if name in cached else "cold", status)
                    with lock:
                        counts[key] = counts.get(key, 0) + 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        try:
            for t in threads:
                t.start()
            time.sleep(3)
            phase[0] = "s3 down"
            s3.stop()
            time.sleep(args.down)
            phase[0] = "restarting"
            t0 = time.perf_counter()
            s3.start()
            phase[0] = "after"
            restarted = time.perf_counter() - t0
            time.sleep(max(10.0, args.down / 2))
        finally:
            stop.set()
            for t in threads:
                t.join()
            srv.stop()
        table = {}
        for (ph, half, status), n in sorted(counts.items()):
            table.setdefault(ph, {}).setdefault(half, {})[status] = n
        return {"models": len(names), "cached": len(cached), "down_s": args.down,
                "s3_restart_s": round(restarted, 1), "answers": table}  # fmt: skip
    finally:
        s3.close()
        shutil.rmtree(tmp, ignore_errors=True)


def metric(srv: Server, name: str) -> float:
    for line in httpx.get(srv.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("listing", "first-tile", "outage"))
    p.add_argument("--down", type=float, default=15.0, help="outage: seconds the S3 server stays stopped")
    p.add_argument("--models", type=int, default=None)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    args.models = args.models or (10_000 if args.what == "listing" else 8)
    result = {"listing": listing, "first-tile": first_tile, "outage": outage}[args.what](args)
    result.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load=os.getloadavg()[0])
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved[args.what] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(saved, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
