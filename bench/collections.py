"""Many models in one replica under a memory budget, and the large request's ways to run: `python -m bench.collections
SCENARIO [options]` or `python -m bench SCENARIO -- [options]`; commands and results in docs/benchmarks/collections.md
(collection, collection-cold, collection_warm, startup), serving.md (large_runs), history/ (collection_resident).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from commandline import parse_bytes

from .common import RESULTS, ROOT, machine, pyplot, status_kib, write_json
from .serving import HEADER, Server, large_workloads

MIB, LOADED, PLAIN = 2**20, 'inr_model_loads_total{result="loaded"}', {"INR_RENDER_CACHE_BYTES": "0"}
# a variant: intra-op threads (0: a core each, -1: --threads), arena, pieces' threads (0: none, -1: --threads; service/
# engine/split.py), the heap trimmed after every run, one arena for every session (session.use_env_allocators)
VARIANTS = {"whole-1t": (1, 0, 0, 0, 0), "bare": (0, 1, 0, 0, 0), "whole-2t": (-1, 0, 0, 0, 0),
            "whole-2t-arena": (-1, 1, 0, 0, 0), "pieces-1t": (1, 0, 1, 0, 0), "pieces": (1, 0, -1, 0, 0),
            "pieces-trim": (1, 0, -1, 1, 0), "pieces-env-arena": (1, 1, -1, 0, 1)}  # fmt: skip


def rss(pid: int, key: str = "VmRSS") -> float:
    return status_kib(pid, key) / 1024  # MiB


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in Path(folder).iterdir() if (p / "config.pbtxt").is_file())


def photo(name: str) -> str:
    return name.rsplit("-", 1)[0]  # the photo a copy is of


def rotate(xs: list, r: int) -> list:
    return xs[r % len(xs) :] + xs[: r % len(xs)]


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]


def make_copies(sources: list[Path], count: int, out: Path) -> list[str]:
    """`make`: COUNT copies of the models among `sources`, in turn, named SOURCE-00042 (hard links but config.pbtxt)."""
    sources = [p for p in sources if (p / "config.pbtxt").is_file()]
    names = [f"{sources[i % len(sources)].name}-{i:05d}" for i in range(count)]
    for src, dst in ((sources[i % len(sources)], out / n) for i, n in enumerate(names) if not (out / n).exists()):
        shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("config.pbtxt"))
        text = (src / "config.pbtxt").read_text()
        (dst / "config.pbtxt").write_text(text.replace(f'name: "{src.name}"', f'name: "{dst.name}"'))
    return names


@contextlib.contextmanager
def serving(models, name: str, env: dict, args: tuple = (), cwd: Path = ROOT, port: int | None = None):
    srv = Server(models, name, env=env, args=args, cwd=cwd, port=port)
    try:
        yield srv.wait(300)
    finally:
        srv.stop()


def every(seconds: float, fn) -> threading.Event:
    """fn() every `seconds`, in a thread, until the event returned is set."""
    stop = threading.Event()
    threading.Thread(target=lambda: [fn() for _ in iter(lambda: stop.wait(seconds), True)], daemon=True).start()
    return stop


def timed(c: httpx.Client, url: str, **kw) -> float:
    """Milliseconds of one request (a POST when it has content); any answer but 200 is an error."""
    start = time.perf_counter()
    if (r := c.request("POST" if "content" in kw else "GET", url, **kw)).status_code != 200:
        raise RuntimeError(f"{url}: {r.status_code} {r.text[:300]}")
    return (time.perf_counter() - start) * 1000


def times_of(fn, seconds: float = 0, n: int = 3, clock=time.perf_counter) -> list[float]:
    """Seconds of each call of fn() by `clock`: at least N calls, and for at least `seconds`."""
    out, end = [], time.perf_counter() + seconds
    while len(out) < n or time.perf_counter() < end:
        start = clock()
        fn()
        out.append(clock() - start)
    return out


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def sizes(url: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """Each distinct photo's native size (its copies have the same)."""
    firsts = {photo(n): n for n in names}  # a copy of each
    details = {p: httpx.get(f"{url}/v1/models/{n}", timeout=60).json() for p, n in firsts.items()}
    return {p: (d["width"], d["height"]) for p, d in details.items()}


def tile_url(name: str, width: int, height: int, rng: random.Random | None = None, tile: int = 512) -> str:
    """OpenSeadragon's tile of a random level (scale 2^k, up to one tile), random place; without `rng`, the first."""
    levels = max(1, math.ceil(math.log2(max(width, height) / tile)) + 1)
    span = tile * (scale := 2 ** (rng.randrange(levels) if rng else 0))
    x = rng.randrange(0, width, span) if rng and width > span else 0
    y = rng.randrange(0, height, span) if rng and height > span else 0
    w, h = min(span, width - x), min(span, height - y)
    return f"/iiif/3/{name}/{x},{y},{w},{h}/{math.ceil(w / scale)},/0/default.jpg"


def medians(rounds: list) -> dict:
    """Each number's median over the rounds (rounds of lists: row by row; of dicts: key by key), and every round."""

    def of(rows: list[dict]) -> dict:
        one = lambda k, v: statistics.median(r[k] for r in rows) if isinstance(v, (int, float)) else v  # noqa: E731
        return {k: of([r[k] for r in rows]) if isinstance(v, dict) else one(k, v) for k, v in rows[0].items()}

    median = [of(list(r)) for r in zip(*rounds)] if isinstance(rounds[0], list) else of(rounds)
    return {"median": median, "rounds": rounds}


def collection(args) -> list[dict]:
    """Per budget, a fresh server: --clients clients, Zipf(1.1) over the models, --seconds counted after --warmup."""
    names, env = names_in(args.models), {**PLAIN, **dict(e.split("=", 1) for e in args.env)}
    return [tiles(args, names, env, budget) for budget in args.budgets]


def tiles(args, names: list[str], env: dict, budget: str) -> dict:
    with serving(args.models, "collection", env, ("--memory-budget", budget, "--max-concurrent-loads", "2")) as srv:
        shape, order, pid, done, sets = sizes(srv.url, names), names[:], srv.proc.pid, [], [rss(srv.proc.pid)]
        random.Random(0).shuffle(order)  # popularity is not alphabetical
        weights = [1 / k**1.1 for k in range(1, len(order) + 1)]
        sampler, end = every(0.2, lambda: sets.append(rss(pid))), time.monotonic() + args.warmup + args.seconds

        def client(r: random.Random) -> None:
            with httpx.Client(base_url=srv.url, timeout=120) as c:
                while time.monotonic() < end:
                    name = r.choices(order, weights)[0]
                    url, at = tile_url(name, *shape[photo(name)], r), time.monotonic()  # counted after the warmup
                    done.append((at >= end - args.seconds, c.get(url).status_code, (time.monotonic() - at) * 1000))

        threads = [threading.Thread(target=client, args=(random.Random(i),)) for i in range(args.clients)]
        [t.start() for t in threads]
        time.sleep(args.warmup)
        loads, t0 = metric(srv.url, LOADED), time.monotonic()
        [t.join() for t in threads]
        seconds, loads = time.monotonic() - t0, metric(srv.url, LOADED) - loads
        sampler.set()
        ms, cs = [t for k, _, t in done if k], [c for k, c, _ in done if k]
        return {"budget": budget, "models": len(names), "requests": len(ms), "codes": {c: cs.count(c) for c in cs},
                "hit_rate": round(1 - loads / max(len(ms), 1), 3), "loads_per_s": round(loads / seconds, 2),
                "p50_ms": round(pct(ms, 0.5), 1), "p99_ms": round(pct(ms, 0.99), 1), "idle_rss_mib": round(sets[0]),
                "peak_rss_mib": round(max(sets)), "resident_models_end": metric(srv.url, "inr_models_resident"),
                "resident_mib_end": round(metric(srv.url, "inr_model_resident_bytes") / MIB),
                "rss_mib_end": round(rss(pid)), "seconds": round(seconds, 1), "warmup_s": args.warmup}  # fmt: skip


def first_tiles(models: Path, names: list[str], cache, budget: str, cwd: Path = ROOT, settle: float = 0) -> dict:
    """Each model's first 512² tile in turn, a fresh server, session cache CACHE: times, peaks, RSS, bytes a pixel."""
    env = {**PLAIN, "INR_SESSION_CACHE": str(cache), "INR_MEMORY_BUDGET": budget}
    got: dict = {"ms": [], "hwm": [], "rss": [], "bpp": []}
    with serving(models, models.name, env, cwd=cwd) as srv, httpx.Client(base_url=srv.url, timeout=300) as c:
        time.sleep(2 * settle)
        got["idle"], shape = rss(srv.proc.pid), sizes(srv.url, names)
        for name in names:
            got["ms"].append(timed(c, tile_url(name, *shape[photo(name)])))
            got["hwm"].append(rss(srv.proc.pid, "VmHWM"))
            time.sleep(settle)
            got["rss"].append(rss(srv.proc.pid))
            nbytes = c.get(f"/v1/models/{name}").json()["versions"][0]["bytes"]
            got["bpp"].append(nbytes / math.prod(shape[photo(name)]))
        got["counted"] = metric(srv.url, "inr_model_resident_bytes") / MIB
        got["resident"] = metric(srv.url, "inr_models_resident")
    return got


def collection_cold(args) -> dict:
    """First tiles, session cache `off`, `cached` (filled by loads of each photo before) or `first` (the first ever)."""
    names, out = names_in(args.models), {}
    sample = random.Random(0).sample([n for n in names if not args.photos or photo(n) in args.photos], args.samples)
    firsts = list({photo(n): n for n in sample}.values())
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as work:
        for v in args.variants:
            cache = {"off": "off", "cached": f"{work}/cached", "first": f"{work}/first"}[v]
            if v == "cached":
                first_tiles(args.models, firsts, cache, args.budget)
            got = first_tiles(args.models, firsts if v == "first" else sample, cache, args.budget)
            out[v] = {"samples": len(got["ms"]), "p50_ms": round(statistics.median(got["ms"]), 1),
                      "p95_ms": round(pct(got["ms"], 0.95), 1), "max_ms": round(max(got["ms"]), 1),
                      "bytes_per_pixel_median": round(statistics.median(got["bpp"]), 2),
                      "bytes_per_pixel_max": round(max(got["bpp"]), 2)}  # fmt: skip
    return out


def startup(args) -> dict:
    """A start to ready, the idle RSS; in-process, a poll rescan's CPU ms (median of 9), no model read and all read."""
    from service.engine import control, registry, residency, runtime

    start = time.monotonic()
    with serving(args.models, "startup", {}, ("--memory-budget", "2GiB")) as srv:
        ready_s = time.monotonic() - start
        time.sleep(2)
        idle = rss(srv.proc.pid)
    budget = residency.Residency(residency.ResidencyOptions(budget=2**30))
    models = registry.Registry(args.models, runtime.RuntimeOptions(), budget)
    poll, cpu = control.ModelControl(models, "poll", on_demand=True).poll_once, time.process_time
    once = lambda: round(statistics.median(times_of(poll, n=9, clock=cpu)) * 1000, 1)  # noqa: E731
    models.list_all()
    none_read, t = once(), cpu()
    [models.get(name) for name in models.names()]
    return {"models": len(names_in(args.models)), "ready_s": round(ready_s, 2), "idle_rss_mib": round(idle),
            "rescan_cpu_ms_none_read": none_read, "read_every_model_cpu_s": round(cpu() - t, 2),
            "rescan_cpu_ms_all_read": once()}  # fmt: skip


def plot(args) -> None:
    """docs/img/collection-tiles-budget.png from a `collection` result."""
    result, plt = json.loads(args.result.read_text())["result"], pyplot()
    rows, rounds, (fig, (lat, hit)) = result["median"], result["rounds"], plt.subplots(1, 2, figsize=(10, 4))
    gib = [parse_bytes(r["budget"]) / 2**30 for r in rows]
    for key in ("p50_ms", "p99_ms"):
        v, each = [r[key] for r in rows], [[rnd[i][key] for rnd in rounds] for i in range(len(rows))]
        spread = [[x - min(e) for x, e in zip(v, each)], [max(e) - x for x, e in zip(v, each)]]
        lat.errorbar(gib, v, yerr=spread, marker="o", capsize=3, label=f"tile {key[:3]}")
    hit.plot(gib, [r["hit_rate"] * 100 for r in rows], marker="o")
    lat.set(yscale="log", ylabel="512² tile latency (ms)", xlabel="memory budget (GiB)")
    hit.set(ylabel="requests whose model was resident (%)", xlabel="memory budget (GiB)")
    for ax in (lat, hit):
        ax.set_xscale("log", base=2)
        ax.set_xticks(gib, [r["budget"] for r in rows])
        ax.grid(alpha=0.3, which="both" if ax is lat else "major")
    lat.legend()
    fig.suptitle(f"{rows[0]['models']} photo models, Zipf(1.1) over models, 512² IIIF tiles (medians of {len(rounds)})")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


def collection_resident(args) -> dict:
    """This tree and each --baseline, each --copies copies of its own --bundled model: what first_tiles measures."""
    with tempfile.TemporaryDirectory(prefix="bench-resident-") as tmp:
        out = {}
        for side, tree in trees_of(args).items():
            names = make_copies([tree / "models" / args.bundled], args.copies, models := Path(tmp, side))
            out[side] = first_tiles(models, names, Path(tmp, f"cache-{side}"), args.budget, tree, settle=0.5)
        return out


def collection_warm(args) -> dict:
    """This tree and each --baseline in turn: warm 512² tiles of MODEL, a /render PNG and the large requests."""
    trees, size = trees_of(args), {"width": args.render, "height": args.render, "format": "png"}
    large = {f"/render {args.render}²": (f"/v1/models/{args.model}/render", {"params": size})} if args.render else {}
    for load in large_workloads(ROOT / "models", args.model, args.large_coords, seed=0) if args.large_coords else ():
        label = ("v1 query JSON, " if load.label.startswith("v1") else "V2 binary, ") + f"{args.large_coords:,}"
        headers = {"content-type": load.ctype, **({HEADER: load.ihcl} if load.ihcl else {})}
        large[label] = (load.paths["inr"], {"content": load.body, "headers": headers})
    with contextlib.ExitStack() as stack:
        env = {**PLAIN, "INR_MODEL_LOADING": "startup"}
        srvs = {k: stack.enter_context(serving(t / "models", k, env, cwd=t)) for k, t in trees.items()}
        cs = {k: stack.enter_context(httpx.Client(base_url=s.url, timeout=120)) for k, s in srvs.items()}
        d, rng = cs["this"].get(f"/v1/models/{args.model}").json(), random.Random(0)
        urls = [tile_url(args.model, d["width"], d["height"], rng) for _ in range(args.tiles)]
        big = lambda k, path, kw, s: [t * 1000 for t in times_of(lambda: timed(cs[k], path, **kw), s)]  # noqa: E731
        for k in srvs:  # warm: sessions, threads, allocator
            [timed(cs[k], u) for u in urls] + [big(k, path, kw, 0) for path, kw in large.values()]
        times, bigs = {k: [] for k in srvs}, {(k, label): [] for k in srvs for label in large}
        for r in range(args.rounds):
            [times[k].extend(timed(cs[k], u) for u in urls) for k in rotate(list(srvs), r)]
            [bigs[k, label].append(statistics.median(big(k, path, kw, args.large_seconds)))
             for label, (path, kw) in large.items() for k in rotate(list(srvs), r)]  # fmt: skip
        rows = {k: {"median_ms": round(statistics.median(t), 2), "p90_ms": round(statistics.quantiles(t, n=10)[-1], 2),
                    "tiles": len(t), **{f"{label} ms": round(statistics.median(bigs[k, label]), 1) for label in large},
                    "peak_rss_mib": srvs[k].peak_rss_mib()} for k, t in times.items()}  # fmt: skip
    ratios = lambda key: {f"this_over_{k}": round(rows["this"][key] / rows[k][key], 3) for k in rows if k != "this"}  # noqa: E731
    return {**rows, "ratio": ratios("median_ms"), **{f"ratio {label}": ratios(f"{label} ms") for label in large},
            "trees": {k: str(v) for k, v in trees.items()}}  # fmt: skip


def large_runs(args) -> dict | None:
    """Each variant in a process of its own, one malloc arena: ms per run, memory kept busy and idle, bare ÷ it."""
    if args.child:
        return print(json.dumps(one_variant(args)))  # noqa: T201
    known = lambda name, size="1": name in VARIANTS and size.isdigit() and int(size) > 0  # noqa: E731 (`pieces:N`)
    if bad := [v for v in args.variants if not known(*v.split(":", 1))]:
        raise SystemExit(f"error: unknown variants {bad}")
    cmd = [sys.executable, "-m", "bench.collections", "large_runs"]
    cmd += [f"--{k}={getattr(args, k)}" for k in ("model", "rows", "piece", "threads", "seconds")]
    env, runs = {**os.environ, "MALLOC_ARENA_MAX": "1"}, {v: [] for v in args.variants}
    for v in [v for r in range(args.rounds) for v in rotate(args.variants, r)]:
        out = subprocess.run([*cmd, "--child", v], cwd=ROOT, env=env, capture_output=True, check=True).stdout
        runs[v].append(json.loads(out))
    rows = {v: {k: round(statistics.median(x[k] for x in rs), 2) for k in ("ms", "kept_mib", "idle_mib")}
            | {"ms_rounds": [round(x["ms"], 1) for x in rs]} for v, rs in runs.items()}  # fmt: skip
    for rs, row in zip(runs.values(), rows.values()) if "bare" in runs else ():
        row["bare_over_this"] = round(statistics.median(b["ms"] / x["ms"] for b, x in zip(runs["bare"], rs)), 2)
    return rows


def one_variant(args) -> dict:
    """One variant, timed in this process: onnxruntime's ways to run, and the service's pieces (its split module)."""
    import numpy as np
    import onnxruntime as ort

    from service.engine import memory
    from service.engine.split import Splitter

    variant, _, size = args.child.partition(":")
    threads, arena, pieces, trims, shared = [args.threads if k == -1 else k for k in VARIANTS[variant]]
    if shared:
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
    opts, model = ort.SessionOptions(), str(ROOT / "models" / args.model / "1" / "model.onnx")
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.enable_cpu_mem_arena = threads, 1, bool(arena)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.use_env_allocators", str(shared))
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    name, outputs = session.get_inputs()[0].name, [o.name for o in session.get_outputs()]
    x = np.random.default_rng(0).random((args.rows, 2)).astype(np.float32)
    splitter, whole = Splitter(pieces or 1, int(size or args.piece)), lambda part: session.run(outputs, {name: part})
    run = lambda: (splitter.run(whole, x), trims and memory.trim()) if pieces else whole(x)  # noqa: E731
    memory.trim()
    before = memory.rss()
    run()
    times, busy = times_of(run, args.seconds), memory.rss() - before
    time.sleep(1.5)
    return {"ms": statistics.median(times) * 1000, "kept_mib": busy / MIB, "idle_mib": (memory.rss() - before) / MIB}


def trees_of(args) -> dict[str, Path]:
    return {"this": ROOT, **{f"base{i + 1 if i else ''}": tree for i, tree in enumerate(args.baseline)}}


def each(fn):
    """`fn` once a round, on fresh servers, --rounds times: the medians, and every round."""
    return functools.wraps(fn)(lambda args: medians([fn(args) for _ in range(args.rounds)]))


def cli(prog: str, doc: str, commands: list[tuple], argv: list[str] | None = None) -> int:
    """`prog SUBCOMMAND --option …` from (name, function, result or None, {option: Path, [Path], list or default})."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name, fn, out, opts in commands:
        q = sub.add_parser(name, description=fn.__doc__)
        q.set_defaults(fn=fn)
        for k, v in opts.items():
            if v is Path or v == [Path]:
                kw = {"type": Path, "required": True} | ({"nargs": "+", "action": "extend"} if v == [Path] else {})
            else:
                kw = {"type": (lambda s: s.split(",")) if isinstance(v, list) else type(v), "default": v}
            q.add_argument("--" + k.rstrip("_").replace("_", "-"), dest=k, **kw)
        q.add_argument("--json", type=Path, default=out and RESULTS / f"{out}.json", help="where the result goes")
    args = p.parse_args(argv)
    if (result := args.fn(args)) is not None:
        doc = {"machine": {**machine(), "load_avg": list(os.getloadavg())}, "result": result,
               "command": shlex.join(["python", "-m", prog.split()[-1], *argv])}  # fmt: skip
        write_json(args.json.stem, doc, args.json.parent)
        print(json.dumps(doc, indent=1))  # noqa: T201
    return 0


COMMANDS = [
    ("make", lambda args: make_copies(args.from_, args.count, args.out) and None, None,
     {"from_": [Path], "count": 1000, "out": Path}),
    ("collection", each(collection), "collection-tiles",
     {"models": Path, "budgets": ["2GiB"], "seconds": 60.0, "warmup": 0.0, "clients": 4, "env": [], "rounds": 3}),
    ("collection-cold", each(collection_cold), "collection-cold", {"models": Path, "budget": "2GiB", "samples": 40,
     "photos": [], "variants": ["off", "cached", "first"], "rounds": 3}),
    ("startup", each(startup), "collection-startup", {"models": Path, "rounds": 3}),
    ("plot", plot, None, {"result": Path, "png": Path}),
    ("collection_resident", each(collection_resident), "collection-resident",
     {"baseline": [Path], "bundled": "dandelion", "copies": 6, "rounds": 3, "budget": "4GiB"}),
    ("collection_warm", collection_warm, "collection-warm", {"baseline": [Path], "model": "dandelion", "tiles": 40,
     "rounds": 5, "render": 1024, "large_coords": 20_000, "large_seconds": 2.0}),
    ("large_runs", large_runs, "large_runs", {"model": "astronaut", "rows": 20_000, "piece": 4096, "rounds": 5,
     "threads": os.cpu_count() or 1, "seconds": 1.5, "variants": list(VARIANTS), "child": ""}),
]  # fmt: skip


main = functools.partial(cli, "python -m bench.collections", __doc__, COMMANDS)

if __name__ == "__main__":
    sys.exit(main())
