"""Many models in one replica under a memory budget, and the large request's ways to run: `python -m bench.collections
SCENARIO [options]`, or `python -m bench SCENARIO -- [options]`. What each scenario measures, its commands and its
results: docs/benchmarks/collections.md (collection, collection-cold, collection_warm, collection_resident, and the
`startup` of 10,000 models) and docs/benchmarks/serving.md (large_runs). `make` copies models under distinct names
(hard links); `plot` draws docs/img/collection-tiles-budget.png from a `collection` result. Servers and variants take
turns, the order rotating round by round; medians over --rounds; the result goes to --json and to stdout.
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

from .common import RESULTS, ROOT, machine, pyplot, status_kib, write_json
from .serving import Server

MIB, LOADED, PLAIN = 2**20, 'inr_model_loads_total{result="loaded"}', {"INR_RENDER_CACHE_BYTES": "0"}
# a variant: intra-op threads (0: one a core, -1: --threads); onnxruntime's arena; the pieces' threads (0: the whole
# run at once, -1: --threads; service/engine/split.py); the heap trimmed after every run; one arena for every session
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


def copy_model(src: Path, dst: Path) -> None:
    """`src` under the name of `dst`: its files hard links, its config.pbtxt its own."""
    shutil.copytree(src, dst, copy_function=os.link)
    (dst / "config.pbtxt").unlink()
    text = (src / "config.pbtxt").read_text()
    (dst / "config.pbtxt").write_text(text.replace(f'name: "{src.name}"', f'name: "{dst.name}"'))


def make_copies(sources: list[Path], count: int, out: Path) -> list[str]:
    """COUNT copies of the model folders among `sources`, in turn, named SOURCE-00042."""
    sources = [p for p in sources if (p / "config.pbtxt").is_file()]
    names = [f"{sources[i % len(sources)].name}-{i:05d}" for i in range(count)]
    [copy_model(sources[i % len(sources)], out / n) for i, n in enumerate(names) if not (out / n).exists()]
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
    r = c.request("POST" if "content" in kw else "GET", url, **kw)
    if r.status_code != 200:
        raise RuntimeError(f"{url}: {r.status_code} {r.text[:300]}")
    return (time.perf_counter() - start) * 1000


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def sizes(url: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """Each distinct photo's native size (its copies have the same)."""
    out: dict = {}
    for name in (n for n in names if photo(n) not in out):
        detail = httpx.get(f"{url}/v1/models/{name}", timeout=60).json()
        out[photo(name)] = detail["width"], detail["height"]
    return out


def tile_url(name: str, width: int, height: int, rng: random.Random | None = None, tile: int = 512) -> str:
    """A tile as OpenSeadragon asks for it: a random level of the pyramid (scale 2^k until one tile holds the image), a
    random tile of it, its region in full-size pixels; without `rng`, the first full-size tile."""
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
    names, env, rows = names_in(args.models), {**PLAIN, **dict(e.split("=", 1) for e in args.env)}, []
    for budget in args.budgets:
        with serving(args.models, "collection", env, ("--memory-budget", budget, "--max-concurrent-loads", "2")) as srv:
            rows.append(tiles(srv, names, budget, args))
    return rows


def tiles(srv: Server, names: list[str], budget: str, args) -> dict:
    """Zipf(1.1) popularity over the models, CLIENTS clients; after --warmup s, --seconds counted; RSS sampled."""
    shape, order, pid, done, sets = sizes(srv.url, names), names[:], srv.proc.pid, [], [rss(srv.proc.pid)]
    random.Random(0).shuffle(order)  # popularity is not alphabetical
    weights, counting = [1 / k**1.1 for k in range(1, len(order) + 1)], threading.Event()
    sampler = every(0.2, lambda: sets.append(rss(pid)))
    end = time.monotonic() + args.warmup + args.seconds

    def client(r: random.Random) -> None:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            while time.monotonic() < end:
                name = r.choices(order, weights)[0]
                url, began, counted = tile_url(name, *shape[photo(name)], r), time.perf_counter(), counting.is_set()
                code = c.get(url).status_code
                if counted:
                    done.append((code, (time.perf_counter() - began) * 1000))

    threads = [threading.Thread(target=client, args=(random.Random(i),)) for i in range(args.clients)]
    [t.start() for t in threads]
    time.sleep(args.warmup)
    loads, t0 = metric(srv.url, LOADED), time.monotonic()
    counting.set()
    [t.join() for t in threads]
    seconds, loads = time.monotonic() - t0, metric(srv.url, LOADED) - loads
    sampler.set()
    ms, codes = [t for _, t in done], [c for c, _ in done]
    return {"budget": budget, "models": len(names), "requests": len(ms), "codes": {c: codes.count(c) for c in codes},
            "hit_rate": round(1 - loads / max(len(ms), 1), 3), "loads_per_s": round(loads / seconds, 2),
            "p50_ms": round(pct(ms, 0.5), 1), "p99_ms": round(pct(ms, 0.99), 1), "idle_rss_mib": round(sets[0]),
            "peak_rss_mib": round(max(sets)), "resident_models_end": metric(srv.url, "inr_models_resident"),
            "resident_mib_end": round(metric(srv.url, "inr_model_resident_bytes") / MIB),
            "rss_mib_end": round(rss(pid)), "seconds": round(seconds, 1), "warmup_s": args.warmup}  # fmt: skip


def first_tiles(models: Path, names: list[str], cache, budget: str, cwd: Path = ROOT, settle: float = 0) -> dict:
    """Each model's first 512² tile, one after another, on a fresh server with its session cache at CACHE: the time, the
    peak since the load began (VmHWM, which a load starts again: service/engine/measure.py), the RSS SETTLE s after,
    its bytes per image pixel; the idle RSS before, and the residency's count and models after."""
    env, got = {**PLAIN, "INR_SESSION_CACHE": str(cache)}, {"ms": [], "hwm": [], "rss": [], "bpp": []}
    with (
        serving(models, models.name, env, ("--memory-budget", budget), cwd=cwd) as srv,
        httpx.Client(base_url=srv.url, timeout=300) as c,
    ):
        time.sleep(2 * settle)
        got["idle"], shape = rss(srv.proc.pid), sizes(srv.url, names)
        for name in names:
            got["ms"].append(timed(c, tile_url(name, *shape[photo(name)])))
            got["hwm"].append(rss(srv.proc.pid, "VmHWM"))
            time.sleep(settle)
            got["rss"].append(rss(srv.proc.pid))
            got["bpp"].append(
                c.get(f"/v1/models/{name}").json()["versions"][0]["bytes"] / math.prod(shape[photo(name)])
            )
        got["counted"] = metric(srv.url, "inr_model_resident_bytes") / MIB
        got["resident"] = metric(srv.url, "inr_models_resident")
    return got


def collection_cold(args) -> dict:
    """Session cache `off`; `cached`, its folder filled by a server that loaded one copy of each photo; `first`, a
    fresh folder and one copy of each photo (the first load ever)."""
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
    """A start to /health/ready and the idle RSS; the CPU ms of one poll rescan (in-process: it times one function),
    on-demand as the server has it, median of 9, with no model read and with every model read."""
    from service.engine.control import ModelControl
    from service.engine.registry import Registry
    from service.engine.residency import Residency, ResidencyOptions
    from service.engine.runtime import RuntimeOptions

    start = time.monotonic()
    with serving(args.models, "startup", {}, ("--memory-budget", "2GiB")) as srv:
        ready_s = time.monotonic() - start
        time.sleep(2)
        idle = rss(srv.proc.pid)
    registry = Registry(args.models, RuntimeOptions(), Residency(ResidencyOptions(budget=2**30)))
    control, cpu = ModelControl(registry, "poll", on_demand=True), time.process_time
    registry.list_all()

    def once() -> float:
        times = []
        for _ in range(9):
            t = cpu()
            control.poll_once()
            times.append(cpu() - t)
        return round(statistics.median(times) * 1000, 1)

    none_read, t = once(), cpu()
    [registry.get(name) for name in registry.names()]
    return {"models": len(names_in(args.models)), "ready_s": round(ready_s, 2), "idle_rss_mib": round(idle),
            "rescan_cpu_ms_none_read": none_read, "read_every_model_cpu_s": round(cpu() - t, 2),
            "rescan_cpu_ms_all_read": once()}  # fmt: skip


def plot(args) -> None:
    from commandline import parse_bytes

    result, plt = json.loads(args.result.read_text())["result"], pyplot()
    rows, rounds, (fig, (lat, hit)) = result["median"], result["rounds"], plt.subplots(1, 2, figsize=(10, 4))
    gib = [parse_bytes(r["budget"]) / 2**30 for r in rows]
    for key in ("p50_ms", "p99_ms"):
        v, each = [r[key] for r in rows], [[rnd[i][key] for rnd in rounds] for i in range(len(rows))]
        spread = [[x - min(e) for x, e in zip(v, each)], [max(e) - x for x, e in zip(v, each)]]
        lat.errorbar(gib, v, yerr=spread, marker="o", capsize=3, label=f"tile {key[:3]}")
    hit.plot(gib, [r["hit_rate"] * 100 for r in rows], marker="o")
    lat.set(yscale="log", ylabel="512² tile latency (ms)")
    hit.set(ylabel="requests whose model was resident (%)")
    for ax in (lat, hit):
        ax.set_xscale("log", base=2)
        ax.set(xlabel="memory budget (GiB)")
        ax.set_xticks(gib, [r["budget"] for r in rows])
        ax.grid(alpha=0.3, which="both" if ax is lat else "major")
    lat.legend()
    fig.suptitle(f"{rows[0]['models']} photo models, Zipf(1.1) over models, 512² IIIF tiles (medians of {len(rounds)})")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


def grid_fit(image, out: Path, tree: Path = ROOT, steps: int = 0) -> Path:
    """`python -m training fit-image` of `tree` with its own grid preset (fitstore.PRESETS) into `out`, unless there."""
    if not (out / "config.pbtxt").is_file():
        code = "import json; from fitstore import PRESETS; print(json.dumps(PRESETS['grid']))"
        preset = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, check=True)
        grid, cmd = json.loads(preset.stdout), [sys.executable, "-m", "training", "fit-image", "--image", str(image)]
        cmd += [*grid["argv"], "--protocol", "full", "--steps", str(steps or grid["steps"]), "--no-progress"]
        subprocess.run([*cmd, "--out", str(out)], cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return out


def collection_resident(args) -> dict:
    """Per photo, this tree and each --baseline serve COPIES copies of their own model (their own fit of --photos, into
    FITS/SIDE/PHOTO once, or --bundled from their models/), an empty session cache each: RSS idle, after one model and
    after all, the loads' peaks, the residency's count, the first tile with the session cache empty and filled."""
    trees, rounds, models = trees_of(args), [], {}  # photo → side → a folder of COPIES copies of the side's model
    with tempfile.TemporaryDirectory(prefix="bench-resident-") as tmp:
        for side, tree in trees.items():
            fits = [grid_fit(p, args.fits / side / Path(p).stem.lower(), tree) for p in args.photos]
            for src in [tree / "models" / n for n in args.bundled] + fits:
                models.setdefault(src.name, {})[side] = Path(tmp, side, src.name)
                [copy_model(src, Path(tmp, side, src.name, f"{src.name}-{i:02d}")) for i in range(args.copies)]
        for r in range(args.rounds):
            rounds.append({p: {} for p in models})
            for p, sides in models.items():
                for side in rotate(list(trees), r):
                    cache = Path(tmp, f"cache-{side}-{p}-{r}")
                    got = first_tiles(sides[side], names_in(sides[side]), cache, args.budget, trees[side], 0.5)
                    rounds[-1][p][side] = resident_row(got, sides[side])
                rounds[-1][p] = {s: rounds[-1][p][s] for s in trees}
    result, keys = medians(rounds), ["rss_1_mib", "rss_n_mib", "grown_1_mib", "grown_per_model_mib", "peak_loads_mib"]
    keys += ["accounted_n_mib", "first_tile_empty_ms", "first_tile_filled_ms"]
    result["ratio"] = {f"this_over_{side}": {p: {k: round(s["this"][k] / s[side][k], 3) for k in keys
                                                 if s["this"][k] and s[side][k]} for p, s in result["median"].items()}
                       for side in trees if side != "this"}  # fmt: skip
    return {**result, "trees": {k: str(v) for k, v in trees.items()}}


def resident_row(got: dict, models: Path) -> dict:
    idle, sets, ms, hwm, counted = got["idle"], got["rss"], got["ms"], got["hwm"], got["counted"]
    r1 = functools.partial(round, ndigits=1)
    return {"idle_mib": r1(idle), "rss_1_mib": r1(sets[0]), "rss_n_mib": r1(sets[-1]),
            "grown_1_mib": r1(sets[0] - idle), "grown_per_model_mib": r1((sets[-1] - sets[0]) / max(len(ms) - 1, 1)),
            "peak_first_load_mib": r1(hwm[0]), "peak_loads_mib": r1(max(hwm)), "accounted_n_mib": r1(counted),
            "accounted_over_grown": round(counted / max(sets[-1] - idle, 1 / MIB), 2),
            "models_resident": got["resident"], "first_tile_empty_ms": r1(ms[0]),
            "first_tile_filled_ms": r1(statistics.median(ms[1:])) if ms[1:] else None,
            "file_bytes": (models / names_in(models)[0] / "1" / "model.onnx").stat().st_size}  # fmt: skip


def collection_warm(args) -> dict:
    """This tree and each --baseline on their own models/: the same warm 512² tiles of MODEL in turns, then a /render
    PNG and the large request (v1 JSON, V2 binary: bench.serving), each at least 3 times and --large-seconds."""
    from .serving import HEADER, large_workloads

    trees, large = trees_of(args), {}
    if args.render:
        size = {"width": args.render, "height": args.render, "format": "png"}
        large[f"/render {args.render}²"] = (f"/v1/models/{args.model}/render", {"params": size})
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
        for k in srvs:  # warm: sessions, threads, allocator
            [timed(cs[k], u) for u in urls] + [repeat(cs[k], path, kw, 0) for path, kw in large.values()]
        times, big = {k: [] for k in srvs}, {(k, label): [] for k in srvs for label in large}
        for r in range(args.rounds):
            [times[k].extend(timed(cs[k], u) for u in urls) for k in rotate(list(srvs), r)]
            [big[k, label].append(statistics.median(repeat(cs[k], path, kw, args.large_seconds)))
             for label, (path, kw) in large.items() for k in rotate(list(srvs), r)]  # fmt: skip
        rows = {k: {"median_ms": round(statistics.median(t), 2), "p90_ms": round(statistics.quantiles(t, n=10)[-1], 2),
                    "tiles": len(t), **{f"{label} ms": round(statistics.median(big[k, label]), 1) for label in large},
                    "peak_rss_mib": srvs[k].peak_rss_mib()} for k, t in times.items()}  # fmt: skip
    ratios = lambda key: {f"this_over_{k}": round(rows["this"][key] / rows[k][key], 3) for k in rows if k != "this"}  # noqa: E731
    return {**rows, "ratio": ratios("median_ms"), **{f"ratio {label}": ratios(f"{label} ms") for label in large},
            "trees": {k: str(v) for k, v in trees.items()}}  # fmt: skip


def repeat(c: httpx.Client, path: str, kw: dict, seconds: float) -> list[float]:
    out, end = [], time.perf_counter() + seconds
    while len(out) < 3 or time.perf_counter() < end:
        out.append(timed(c, path, **kw))
    return out


def large_runs(args) -> dict | None:
    """Each variant in a fresh process with one malloc arena, as the service sets it: ms per run, and the resident
    set's growth while runs keep coming and 1.5 s after the last; bare onnxruntime's time over each's, per round."""
    if args.child:
        return print(json.dumps(one_variant(args)))  # noqa: T201
    size = lambda v: v.partition(":")[2]  # noqa: E731 (`pieces:N`: pieces of N rows)
    if bad := [v for v in args.variants if v.partition(":")[0] not in VARIANTS or size(v) and not size(v).isdigit()
               or size(v).isdigit() and int(size(v)) <= 0]:  # fmt: skip
        raise SystemExit(f"error: unknown variants {bad}")
    cmd = [sys.executable, "-m", "bench.collections", "large_runs"]
    cmd += [f"--{k}={getattr(args, k)}" for k in ("model", "rows", "piece", "threads", "seconds")]
    env, runs = {**os.environ, "MALLOC_ARENA_MAX": "1"}, {v: [] for v in args.variants}
    for r in range(args.rounds):
        for v in rotate(args.variants, r):
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

    from service.engine.memory import rss as own_rss
    from service.engine.memory import trim
    from service.engine.split import Splitter

    variant, _, size = args.child.partition(":")
    threads, arena, pieces, trims, shared = [args.threads if k == -1 else k for k in VARIANTS[variant]]
    if shared:
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = threads, 1, 3
    opts.enable_cpu_mem_arena = bool(arena)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.use_env_allocators", str(shared))
    model = str(ROOT / "models" / args.model / "1" / "model.onnx")
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    name, outputs = session.get_inputs()[0].name, [o.name for o in session.get_outputs()]
    x = np.random.default_rng(0).random((args.rows, 2)).astype(np.float32)
    splitter, whole = Splitter(pieces or 1, int(size or args.piece)), lambda part: session.run(outputs, {name: part})
    run = lambda: (splitter.run(whole, x), trims and trim()) if pieces else whole(x)  # noqa: E731
    trim()
    before = own_rss()
    run()
    times, end = [], time.perf_counter() + args.seconds
    while len(times) < 3 or time.perf_counter() < end:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    busy = own_rss() - before
    time.sleep(1.5)
    return {"ms": statistics.median(times) * 1000, "kept_mib": busy / MIB, "idle_mib": (own_rss() - before) / MIB}


def trees_of(args) -> dict[str, Path]:
    return {"this": ROOT, **{f"base{i + 1 if i else ''}": tree for i, tree in enumerate(args.baseline)}}


def each(fn):
    """`fn` once a round, on fresh servers, --rounds times: the medians, and every round."""
    return functools.wraps(fn)(lambda args: medians([fn(args) for _ in range(args.rounds)]))


def cli(prog: str, doc: str, commands: list[tuple], argv: list[str] | None) -> int:
    """`prog SUBCOMMAND --option …` from (name, function, result file or None, {option: spec}): a spec is Path
    (required), [Path] (one or more), a list (comma-separated), else a default whose type the option takes;
    `baseline` is a repeatable checkout. The one result path: the machine, the command and the function's result
    (if any) to --json and stdout."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    sub = p.add_subparsers(dest="scenario", required=True)
    for name, fn, out, opts in commands:
        q = sub.add_parser(name, description=fn.__doc__)
        q.set_defaults(fn=fn, json=RESULTS / f"{out}.json" if out else None)
        for k, v in opts.items():
            flag, kw = "--" + k.rstrip("_").replace("_", "-"), {"dest": k}
            if k == "baseline":
                kw.update(type=Path, action="append", required=True, help="another checkout (repeatable)")
            elif v is Path or v == [Path]:
                kw.update(type=Path, required=True, nargs="+" if v == [Path] else None)
            else:
                kw.update(type=(lambda s: s.split(",")) if isinstance(v, list) else type(v), default=v)
            q.add_argument(flag, **kw)
        if out:
            q.add_argument("--json", type=Path, default=RESULTS / f"{out}.json", help="where the result goes")
    args = p.parse_args(argv)
    if (result := args.fn(args)) is not None:
        doc = {"machine": {**machine(), "load_avg": list(os.getloadavg())}, "result": result,
               "command": shlex.join(["python", "-m", prog.split()[-1], *argv])}  # fmt: skip
        if args.json:
            write_json(args.json.stem, doc, args.json.parent)
        print(json.dumps(doc, indent=1))  # noqa: T201
    return 0


COMMANDS = [
    ("make", lambda args: make_copies(args.from_, args.count, args.out) and None, None,
     {"from_": [Path], "count": 1000, "out": Path}),
    ("collection", each(collection), "collection-tiles", {"models": Path, "budgets": ["2GiB"], "seconds": 60.0,
     "warmup": 0.0, "clients": 4, "env": [], "rounds": 3}),
    ("collection-cold", each(collection_cold), "collection-cold", {"models": Path, "budget": "2GiB", "samples": 40,
     "photos": [], "variants": ["off", "cached", "first"], "rounds": 3}),
    ("startup", each(startup), "collection-startup", {"models": Path, "rounds": 3}),
    ("plot", plot, None, {"result": Path, "png": Path}),
    ("collection_resident", collection_resident, "collection-resident", {"baseline": [], "photos": [],
     "fits": ROOT / "build" / "bench" / "fits", "bundled": [], "copies": 6, "rounds": 3, "budget": "4GiB"}),
    ("collection_warm", collection_warm, "collection-warm", {"baseline": [], "model": "dandelion", "tiles": 40,
     "rounds": 5, "render": 1024, "large_coords": 20_000, "large_seconds": 2.0}),
    ("large_runs", large_runs, "large_runs", {"model": "astronaut", "rows": 20_000, "piece": 4096, "rounds": 5,
     "threads": os.cpu_count() or 1, "seconds": 1.5, "variants": list(VARIANTS), "child": ""}),
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli("python -m bench.collections", __doc__, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
