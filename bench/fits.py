"""Fits: time, quality and memory (docs/benchmarks/training.md, fits-and-browser.md), a subcommand per scenario writing
bench/results/NAME.json (--name, --out-dir) and logging its table; `fits` through `POST /v1/fits` and `python -m
training fit-image`, the others in-process (time_to_quality's PSNR probes in the training loop, their time excluded).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from commandline import OneLineParser

from . import common as c
from .common import IMG, ROOT, log, machine, median, write_json
from .serving import Server

ENCODINGS = ("none", "basic", "positional", "gaussian", "sine", "sinekan", "sinekan-projection")
MODELS = ("sinekan", "bspline-kan", "fourier-kan", "mlp")
# fmt: off
TTQ = ("paper,lr 5e-3,lr 5e-3 cosine 500,minibatch ¼,minibatch ¼ lr 5e-3 cosine 1000,width 128 lr 5e-3 cosine 500,"
       "depth 3 lr 5e-3 cosine 500,lr 1e-2 cosine 500,minibatch ¼ lr 5e-3 cosine 500,minibatch ¼ width 128 lr 5e-3 "
       "cosine 500,minibatch ¼ width 128 lr 1e-2 cosine 500,minibatch ¼ width 128 depth 3 lr 5e-3 cosine 500,minibatch "
       "⅛ width 128 lr 5e-3 cosine 1000,batch 4096 lr 5e-3 cosine 500,batch 4096 width 128 depth 3 lr 5e-3 cosine 500,"
       "lr 5e-3 cosine 500 compile,grid preset").split(",")  # time_to_quality's variants, each spelling its options
OPTIONS = {
    "fits": {"size": 256, "preset": "fourier", "rounds": 2, "fit_threads": 2, "requests": 150, "timeout_s": 1800.0},
    "fourier_table": {"size": 512, "steps": 2000, "depth": 4, "width": 256, "device": "cpu", "threads": 0,
                      "photos": "astronaut,camera,coffee,chelsea,rocket,cat", "texts": "text,text-fourier,text-sinekan",
                      "encodings": ",".join(ENCODINGS), "sigmas": "1,2,5,10,20,50", "sigma_image": "astronaut",
                      "render": False, "variant": [], "plot": str(IMG / "bench-fourier-table.png")},
    "time_to_quality": {"image": "astronaut", "size": 512, "scale": 10.0, "target": 30.0, "variants": ",".join(TTQ),
                        "rounds": 3, "quality": "all", "every": 10, "max_steps": 0, "seed": 0, "device": "cpu",
                        "threads": 0, "plot": str(IMG / "bench-time-to-quality.png")},
    "sinekan_speed": {"hidden": "16;32;64;128;256;128,128;128,128,128", "batches": "1,256", "models": ",".join(MODELS),
                      "repeats": 7, "threads": 1, "plot": str(IMG / "bench-sinekan-speed.png")},
}
# SineKAN rows, parameter-matched (±10 %) to the 4×256 Gaussian MLP: the paper's layer and init on raw coordinates; a
# 64-frequency first grid up to 16 cycles a unit; on 64 features; what `--model sinekan` gives (σ: coffee, rocket, cat)
KAN = "--grid 8 --first-grid 8 --hidden-freq 1 --first-freq 0 --sinekan-init"
SINEKAN = {"sinekan": f"--encoding none --width 128 {KAN} paper",
           "sinekan-dense": f"--encoding none --width 124 {KAN} scaled --first-grid 64 --first-freq 16",
           "sinekan-gaussian": f"--encoding gaussian --features 64 --width 96 {KAN} scaled",
           "sinekan-projection": "--scale 3"}
PAPER = {"natural": {"none": 19.32, "basic": 21.72, "positional": 24.95, "gaussian": 25.57},  # Tancik 2020, Table 1
         "text": {"none": 18.40, "basic": 20.48, "positional": 27.57, "gaussian": 30.47}}  # (test PSNR, dB)
# fmt: on


def parse(name: str, argv: list[str] | None, options: dict | None = None, module: str = "fits"):
    """{option: default}: its type, False a switch, [] repeatable, ... positional, () after `--`; torch on --threads."""
    p = OneLineParser(prog=f"python -m bench.{module} {name}")
    for k, v in {"name": name, "out_dir": None, **(options or OPTIONS)[name]}.items():
        kind = {"action": "store_true"} if v is False else {"action": "append"} if v == [] else {"type": type(v)}
        kind = {"nargs": "+" if v is ... else "*"} if v in (..., ()) else {"default": v, **({} if v is None else kind)}
        p.add_argument(k if v in (..., ()) else f"--{k.replace('_', '-')}", **kind)
    c.set_threads(getattr(a := p.parse_args(argv), "threads", 0))
    return p, a


def md(head: list[str], align: str, rows: list[list]) -> list[str]:
    bar = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return [f"| {' | '.join(head)} |", bar, *(f"| {' | '.join(map(str, r))} |" for r in rows)]


def plot(path, curves: dict, title: str, xlabel: str, ylabel: str, scale: str = "linear", hline=None) -> None:
    """{label: (xs, ys)} as lines; x on a log axis for "log", x and y for "loglog"; a dashed line at `hline`."""
    fig, ax = (plt := c.pyplot()).subplots(figsize=(7, 4), dpi=120, layout="tight")
    for label, (xs, ys) in curves.items():
        ax.plot(xs, ys, "-" if scale == "log" else "o-", label=label, lw=1.2, ms=3)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel, xscale="linear" if scale == "linear" else "log")
    ax.set(yscale="log" if scale == "loglog" else "linear")
    if hline is not None:
        ax.axhline(hline, color="k", ls="--", lw=0.8)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.savefig(path)
    plt.close(fig)


def fits(argv: list[str] | None = None) -> dict:
    """Upload → first served render, POST /v1/fits against fit-image; serving while a worker fits."""
    a = parse("fits", argv)[1]
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from fitstore import FitStore
    from tests.servers import draw_digit, png_bytes
    from training.images import load_image, save_png

    tmp, workers, py = Path(tempfile.mkdtemp(prefix="bench-fits-")), [], [sys.executable, "-m", "training"]
    models, store, photo = tmp / "models", f"sqlite:///{tmp}/fits.sqlite", tmp / "coffee.png"
    shutil.copytree(ROOT / "models", models)
    save_png(load_image("coffee", a.size, crop=True)[0], photo)
    env = {"INR_FIT_STORE": store, "INR_MODEL_CONTROL_MODE": "poll", "INR_REPOSITORY_POLL_SECS": "0.5"}
    srv = Server(models, "fits", {**env, "INR_RENDER_CACHE_BYTES": "0", "INR_FIT_QUEUE_LIMIT": "50"}).wait()
    url, result = srv.url, {"machine": machine(), "args": vars(a), "overhead": [], "serving": {}}
    cli_env = {**os.environ, "OMP_NUM_THREADS": str(a.fit_threads), "MKL_NUM_THREADS": str(a.fit_threads)}

    def worker(threads: int, nice: int, mode: str):  # `python -m training worker`, its log in tmp
        w = ("--store", store, "--models", str(models), "--threads", str(threads), "--nice", str(nice))
        with (tmp / f"worker-{mode}.log").open("ab") as out:
            workers.append(subprocess.Popen([*py, "worker", *w], cwd=ROOT, stdout=out, stderr=out))
        return workers[-1]

    def post(form: dict) -> str:
        job = httpx.post(f"{url}/v1/fits", files={"file": (photo.name, photo.read_bytes())}, data=form, timeout=60)
        return f"{url}/v1/fits/{job.raise_for_status().json()['id']}"

    def to_served(path: str, name: str) -> dict:
        t0, version, end = time.perf_counter(), 1, time.monotonic() + a.timeout_s
        if path == "service":
            job = post({"preset": a.preset, "size": str(a.size), "name": name})
            with httpx.stream("GET", f"{job}/events", timeout=a.timeout_s) as events:  # as the viewer follows it
                next(x for x in events.iter_lines() if x in ("event: succeeded", "event: failed", "event: cancelled"))
            if (rec := httpx.get(job, timeout=30).json())["state"] != "succeeded":
                raise RuntimeError(f"fit {job} ended {rec['state']}: {rec.get('error')}")
            version = rec["version"]
        else:
            fit = ("--image", str(photo), "--size", str(a.size), "--no-progress", "--out", str(models / name))
            subprocess.run([*py, "fit-image", *fit], cwd=ROOT, env=cli_env, stdout=subprocess.DEVNULL, check=True)
        done, pinned = time.perf_counter(), f"{url}/v1/models/{name}/versions/{version}/render"
        while httpx.get(pinned, params={"width": 64, "height": 64}, timeout=60).status_code != 200:
            if time.monotonic() > end:
                raise RuntimeError(f"{name} version {version} was not served in time")
            time.sleep(0.05)
        meta, seconds = json.loads((models / name / str(version) / "metadata.json").read_text()), time.perf_counter()
        row = {"path": path, "seconds": seconds - t0, "fit_done_s": done - t0, "metrics": meta["metrics"]}
        return {**row, "train_s": meta["training"]["train_seconds"]}

    def latencies(n: int) -> dict:  # one client alternating a classify and a render, a new rotation each: no cache
        out, files = {"classify": [], "render": []}, {"files": ("d.png", png_bytes(draw_digit(3, size=64)))}
        with httpx.Client(base_url=f"{url}/v1/models", timeout=120) as h:
            for q in ({"width": 256, "height": 256, "rotate": (i * 0.37) % 360} for i in range(n)):
                out["classify"] += c.time_calls(lambda: h.post("digits/classify", files=files).raise_for_status(), 1, 0)
                out["render"] += c.time_calls(lambda: h.get("astronaut/render", params=q).raise_for_status(), 1, 0)
        ms = {k: 1e3 * np.percentile(v, [50, 99]) for k, v in out.items()}
        return {k: {"p50_ms": p50, "p99_ms": p99, "n": n} for k, (p50, p99) in ms.items()}

    try:
        w = worker(a.fit_threads, 0, "overhead")
        while not FitStore(store).workers():  # started: torch imported, heartbeat sent
            time.sleep(0.2)
        for k, path in ((k, p) for k in range(a.rounds) for p in ("service", "cli")):
            result["overhead"].append(to_served(path, f"{path[:3]}{k}"))
        w.terminate(), w.wait(60)
        latencies(10)  # warm up
        result["serving"]["idle"] = latencies(a.requests)
        for mode, threads, nice in (("fair", 1, 10), ("unfair", 2, 0)):
            w, job = worker(threads, nice, mode), post({"size": str(a.size), "steps": "20000", "name": f"busy{nice}"})
            while (step0 := httpx.get(job, timeout=30).json()["step"]) < 1:
                time.sleep(0.2)
            busy = result["serving"][mode] = {**latencies(a.requests), "worker_threads": threads, "worker_nice": nice}
            busy["fit_steps_during"] = httpx.get(job, timeout=30).json()["step"] - step0
            httpx.delete(job, timeout=30), w.terminate(), w.wait(60)
    finally:
        [(w.terminate(), w.wait(60)) for w in workers if w.poll() is None]
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    write_json(a.name, result, a.out_dir)
    return result


def fourier_md(result: dict) -> str:
    summ, rows = result["summary"], []  # its sets: natural, text or both, in that order
    for e in result["encodings"]:
        rows.append([f"gaussian (σ={result['sigma']:g})" if e == "gaussian" else e])
        for s, v in ((s, summ[s].get(e)) for s in summ):
            ours, paper = v and f"{v['mean']:.2f} ± {v['std']:.2f}", e in PAPER[s] and f"{PAPER[s][e]:.2f}"
            rows[-1] += [ours or "–", paper or "–"]
    head = ["encoding", *(f"{s}: {w}" for s in summ for w in ("ours", "paper"))]
    return "\n".join(md(head, "l" + "rr" * len(summ), rows))


def fourier_table(argv: list[str] | None = None) -> dict:
    """Tancik et al. 2020, Table 1 (test PSNR per encoding), each run a fit-image fit and export."""
    from training.fit_image import fit_image

    p, a = parse("fourier_table", argv)
    sets = {"natural": [i for i in a.photos.split(",") if i], "text": [i for i in a.texts.split(",") if i]}
    variants, encs = c.named_options(a.variant, p, "--variant"), [e for e in a.encodings.split(",") if e]
    encs += [n for n in variants if n not in encs]  # --variant NAME=OPTIONS: fit-image options on the protocol's
    sigmas = [float(s) for s in a.sigmas.split(",")]

    def fit(image: str, enc: str, scale: float, render: bool = False) -> dict:
        argv = f"--image {image} --size {a.size} --steps {a.steps} --lr 1e-3 --schedule constant --batch-size 0 "
        argv += f"--depth {a.depth} --protocol paper --seed 0 --device {a.device} --no-progress --scale {scale:g} "
        mlp = f"--model mlp --encoding {enc} --width {a.width}"
        argv = argv.split() + variants.get(enc, (f"--model sinekan {SINEKAN[enc]}" if enc in SINEKAN else mlp).split())
        with tempfile.TemporaryDirectory() as tmp:  # what `python -m training fit-image ARGV --out DIR` does
            fit_image(c.fit_image_config(argv), Path(tmp, "m"))
            meta, us = json.loads(Path(tmp, "m/1/metadata.json").read_text()), {}
            if render:
                x = np.random.default_rng(0).random((16384, 2), dtype=np.float32)
                sess = c.ort_session(Path(tmp, "m/1/model.onnx"), 1)
                s = median(c.time_calls(lambda: sess.run(["rgb"], {"coords": x}), 5, min_seconds=0.5))
                us["render_us_per_sample"] = round(s / len(x) * 1e6, 3)
        row, t = {k: meta["metrics"][k] for k in ("train_psnr", "test_psnr", "ssim")}, meta["training"]
        row.update(seconds=round(t["train_seconds"], 2), seconds_per_step=round(t["train_seconds"] / t["steps"], 4))
        return {**row, "parameters": meta["architecture"]["parameters"], "argv": " ".join(argv), **us}

    result = {"machine": machine(), "size": a.size, "steps": a.steps, "depth": a.depth, "width": a.width}
    result.update(seeds=[0], encodings=encs, images=sets, runs=[], sigma=sigmas[0], summary={})
    if len(sigmas) > 1:  # σ: the best test PSNR on one image
        sweep = [{"scale": s, **fit(a.sigma_image, "gaussian", s)} for s in sigmas]
        result.update(sigma=max(sweep, key=lambda r: r["test_psnr"])["scale"], sigma_sweep=sweep)
    for kind, image, enc in ((k, i, e) for k, images in sets.items() for i in images for e in encs):
        r = fit(image, enc, result["sigma"], a.render)  # every encoding on an image before the next image
        result["runs"].append({"set": kind, "image": image, "encoding": enc, "seed": 0, **r})
        v = [x["test_psnr"] for x in result["runs"] if (x["set"], x["encoding"]) == (kind, enc)]  # over the images
        result["summary"].setdefault(kind, {})[enc] = {**dict(zip(("mean", "std"), c.mean_std(v))), "n": len(v)}
        write_json(a.name, result, a.out_dir)

    def chart(result, path):
        summ = result["summary"]
        ours = {f"{s} (ours)": (encs, [v.get(e, {}).get("mean", np.nan) for e in encs]) for s, v in summ.items()}
        paper = {f"{s} (paper)": (encs, [PAPER[s].get(e, np.nan) for e in encs]) for s in summ}
        title = f"{a.size}², {a.steps} steps, train [::2, ::2], test held-out"
        plot(path, {**ours, **paper}, title, "encoding", "test PSNR (dB)")

    return c.finish(result, a.plot, chart, fourier_md)


def ttq_md(result: dict) -> str:
    rows, dash = [], lambda x, f="", none="–": none if x is None else format(x, f)  # noqa: E731
    for n, v in result["summary"].items():
        t, sp, q = v["median_seconds_to_target"], v["speedup_vs_paper"], v["final_test_psnr"]
        per_round = ", ".join(dash(s, ".1f") for s in v["seconds_to_target"])
        rows.append([n, dash(t, ".1f", "not reached"), per_round, "/".join(map(dash, v["steps_to_target"]))])
        rows[-1] += [f"{1000 * v['median_seconds_per_step']:.0f}", f"{sp:.1f}×" if sp else "–"]
        rows[-1] += [f"{v['final_train_psnr']:.2f} / {q:.2f}" if q else "–", dash(v["full_seconds"], ".0f")]
    head = ["variant", f"s to {result['target']:g} dB (median)", "per round", "steps", "ms/step", "speed-up"]
    return "\n".join(md([*head, "final train / test PSNR", "full-run s"], "lrlrrrlr", rows))


def time_to_quality(argv: list[str] | None = None) -> dict:
    """Training seconds to a train PSNR per fit-image variant. A name spells its options: paper (lr 1e-3 constant,
    full batch, 4×256, 2000 steps) with word pairs on top; minibatch ¼ / ⅛: a quarter / an eighth of the pixels."""
    p, a = parse("time_to_quality", argv)
    names = [n.strip() for n in a.variants.split(",") if n.strip()]
    if bad := [n for n in names if n not in TTQ]:
        p.error(f"unknown variant(s) {bad}; valid: {', '.join(TTQ)}")
    import torch

    from fitstore import PRESETS
    from training.fit_image import evaluate, split_pixels, train
    from training.images import load_image
    from training.metrics import psnr

    img, quality = load_image(a.image, a.size)[0], set(names if a.quality == "all" else a.quality.split(","))
    (tc, tt, _, _), grid = split_pixels(img, "paper"), PRESETS["grid"]

    def options(name: str) -> str:
        o = {"lr": "1e-3", "schedule": "constant", "batch-size": "0", "depth": "4", "width": "256", "steps": "2000"}
        words = name.replace("minibatch ¼", "batch {q}").replace("minibatch ⅛", "batch {e}")  # word pairs: option value
        words = words.replace("cosine", "schedule cosine steps").replace("batch", "batch-size").split()
        o.update((k, v) for k, v in zip(words, words[1:]) if k in o)
        opts = " ".join(f"--{k} {v}" for k, v in o.items()) + " --compile" * ("compile" in words)
        return " ".join([*grid["argv"], "--steps", str(grid["steps"])]) if name == "grid preset" else opts

    def fit(name: str, opts: str, stop: bool) -> dict:
        opts = opts.format(q=len(tc) // 4, h=len(tc) // 2, e=len(tc) // 8)
        opts += f" --steps {min(a.max_steps, int(opts.split('--steps')[1].split()[0]))}" if a.max_steps else ""
        argv = f"--image {a.image} --size {a.size} --scale {a.scale:g} --protocol paper --device {a.device} --seed "
        argv, x, last = f"{argv}{a.seed} --no-progress {opts}".split(), torch.from_numpy(tc), [time.perf_counter()]
        row = {"variant": name, "argv": " ".join(argv), "stopped_at_target": stop, "seconds_to_target": None}
        row.update(steps_to_target=None, seconds=0.0, curve=[])

        def probe(step: int, loss: float, model) -> bool:  # the probe's own time is not counted
            row["seconds"] += time.perf_counter() - last[0]
            p = psnr(torch.no_grad()(model)(x).numpy(), tt)
            row["curve"].append((step + 1, round(row["seconds"], 3), None if p is None else round(p, 3)))  # None: nan
            if row["steps_to_target"] is None and p is not None and p >= a.target:
                row.update(seconds_to_target=round(row["seconds"], 3), steps_to_target=step + 1)
            last[0] = time.perf_counter()
            return stop and row["steps_to_target"] is not None

        model = train(c.fit_image_config(argv), img, on_step=probe, every=a.every)[0]
        row.update(seconds=round(row["seconds"], 3), steps=row["curve"][-1][0])
        row["seconds_per_step"] = round(row["seconds"] / row["steps"], 5)
        return row if stop else {**row, **{k: evaluate(model, img, "paper")[0][k] for k in ("train_psnr", "test_psnr")}}

    def summary(rows: list[dict]) -> dict:  # per variant, over the rounds
        out = {}
        for n, rs in ((n, [r for r in rows if r["variant"] == n]) for n in names):
            full, hits = next((r for r in rs if not r["stopped_at_target"]), {}), [r["seconds_to_target"] for r in rs]
            v = {"median_seconds_to_target": None if None in hits or not hits else median(hits)}
            v.update({f"{k}_to_target": [r[f"{k}_to_target"] for r in rs] for k in ("seconds", "steps")})
            v.update(median_seconds_per_step=median([r["seconds_per_step"] for r in rs] or [0]))
            v.update(final_train_psnr=full.get("train_psnr"), final_test_psnr=full.get("test_psnr"))
            out.update({n: {**v, "full_seconds": full.get("seconds")}} if rs else {})
        base = out.get("paper", {}).get("median_seconds_to_target")
        for v, t in ((v, v["median_seconds_to_target"]) for v in out.values()):
            v["speedup_vs_paper"] = round(base / t, 2) if base and t else None
        return out

    result = {"machine": machine(), "image": a.image, "size": a.size, "scale": a.scale, "target": a.target}
    result.update(rounds=a.rounds, variants={n: options(n) for n in names}, rows=[])
    fit("warm-up", "--steps 20 --width 64 --depth 2", stop=False)  # a process's first fit pays one-off costs
    for rnd, n in ((rnd, n) for rnd in range(a.rounds) for n in (names if rnd % 2 == 0 else names[::-1])):
        try:
            result["rows"].append({"round": rnd + 1, **fit(n, result["variants"][n], stop=rnd > 0 or n not in quality)})
        except Exception as e:  # one broken variant (e.g. no compiler for torch.compile) must not end the run
            log.warning("round %d %s failed: %s", rnd + 1, n, e)
            result.setdefault("errors", []).append({"round": rnd + 1, "variant": n, "error": repr(e)[:500]})
        result["summary"] = summary(result["rows"])
        write_json(a.name, result, a.out_dir)

    def chart(result, path):
        runs = {n: [r for r in result["rows"] if r["variant"] == n] for n in result.get("summary", {})}
        curves = {n: np.array(min(rs, key=lambda r: r["stopped_at_target"])["curve"]) for n, rs in runs.items()}
        curves = {n: (np.maximum(v[:, 1], 1e-2), v[:, 2]) for n, v in curves.items()}  # a run to the end, else round 1
        title = f"{result['image']} {result['size']}², round 1 (σ={result['scale']:g})"
        plot(path, curves, title, "training seconds (probe time excluded)", "train PSNR (dB)", "log", result["target"])

    return c.finish(result, a.plot, chart, ttq_md)


def speed_md(result: dict) -> str:
    us = {(str(r["hidden"]), r["batch"], r["runtime"], r["model"]): r["us_per_sample"] for r in result["rows"]}
    rows, nan = [], float("nan")
    for k, r in ((tuple(r[x] for x in ("hidden", "batch", "runtime")), r) for r in result["ratios"]):
        cells = [f"{us.get((*k, m), nan):.2f}" for m in MODELS]
        rows.append([*k, *cells, f"{r.get('bspline-kan_over_sinekan', nan):.1f}×"])
    head = ["hidden", "batch", "runtime", "SineKAN", "B-spline KAN", "FourierKAN", "MLP", "B-spline ÷ SineKAN"]
    return "\n".join(md(head, "lrlrrrrr", rows))


def sinekan_speed(argv: list[str] | None = None) -> dict:
    """µs/sample of training.digits' exported classifiers, onnxruntime and torch eager, all of them in each repeat."""
    import torch

    from training.digits.export import export_digits
    from training.digits.models import DigitClassifier, DigitModelConfig

    a, rows = parse("sinekan_speed", argv)[1], []
    specs = [[int(w) for w in s.split(",")] for s in a.hidden.split(";") if s.strip()]
    for h, b in ((h, int(b)) for h in specs for b in a.batches.split(",")):
        x, fns = np.random.default_rng(0).random((b, 1, 28, 28), dtype=np.float32), {}
        for m in a.models.split(","):  # (torch graph, ONNX bytes) as training.digits exports them
            graph, onnx = export_digits(DigitClassifier(DigitModelConfig(model=m, hidden=list(h))).eval())
            sess = c.ort_session(onnx, a.threads)
            fns[(m, "onnxruntime")] = lambda s=sess: s.run(["logits", "probabilities"], {"images": x})
            fns[(m, "torch eager")] = lambda g=graph: torch.inference_mode()(g)(torch.from_numpy(x))
        samples = {k: [f()][:0] for k, f in fns.items()}  # after one warm-up call each
        for k, f in ((k, f) for _ in range(a.repeats) for k, f in fns.items()):
            samples[k] += c.time_calls(f, repeats=1, warmup=0, min_seconds=0.1)
        for (m, rt), s in samples.items():
            rows.append({"hidden": h, "batch": b, "model": m, "runtime": rt, "us_per_sample": 1e6 * median(s) / b})
    us, ratios = {(str(r["hidden"]), r["batch"], r["runtime"], r["model"]): r["us_per_sample"] for r in rows}, []
    for (h, b, rt, m), v in ((k, v) for k, v in us.items() if k[3] == "sinekan"):  # the paper's B-spline KAN ÷ SineKAN
        over = {f"{o}_over_sinekan": us[(h, b, rt, o)] / v for o in MODELS[1:] if (h, b, rt, o) in us}
        ratios.append({"hidden": h, "batch": b, "runtime": rt, **over})
    result = {"machine": machine(), "hidden": specs, "batches": a.batches, "rows": rows, "ratios": ratios}
    write_json(a.name, result, a.out_dir)

    def chart(result, path):
        ort, curves = [r for r in result["rows"] if len(r["hidden"]) == 1 and r["runtime"] == "onnxruntime"], {}
        for m, b in ((m, b) for m in MODELS for b in sorted({r["batch"] for r in ort})):
            if pts := sorted((r["hidden"][0], r["us_per_sample"]) for r in ort if (r["model"], r["batch"]) == (m, b)):
                curves[f"{m}, batch {b}"] = tuple(zip(*pts))
        plot(path, curves, "onnxruntime", "hidden width (784 → h → 10)", "µs / sample", "loglog")

    return c.finish(result, a.plot, chart, speed_md)


def main(argv: list[str] | None = None, scenarios: dict | None = None, module: str = "fits"):
    argv = list(sys.argv[1:] if argv is None else argv)
    scenarios = scenarios or {f.__name__: f for f in (fits, fourier_table, time_to_quality, sinekan_speed)}
    if not argv or argv[0] not in scenarios:
        sys.stderr.write(f"usage: python -m bench.{module} {{{','.join(scenarios)}}} [options]: one of them first\n")
        raise SystemExit(2)
    return scenarios[argv[0]](argv[1:])


if __name__ == "__main__":
    c.setup_logging()
    main()
