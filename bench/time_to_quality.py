"""Seconds to reach a target PSNR (docs/benchmarks.md, time_to_quality) on the training pixels of a photo.

Each variant is a `python -m training fit-image` configuration (same image, σ and protocol).
The clock counts training only: every EVERY steps a probe measures PSNR on all training pixels
and its own time is subtracted. Variants run in rounds, in alternating order, so every variant
sees the same machine load; medians over rounds are quoted. Round 1 runs each variant (or those
named by --quality) to the end of its schedule (final train/test PSNR = quality); later rounds
stop at the target. A short warm-up fit runs first and is not reported.

Full protocol (512² photo, paper config against the faster ones):
    python -m bench.time_to_quality
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fitstore import PRESETS
from training.fit_image import evaluate, split_pixels, train
from training.images import load_image
from training.metrics import psnr

from .common import IMG, finish, fit_image_config, log, machine, median, pyplot, set_threads, setup_logging, write_json

PAPER = "--lr 1e-3 --schedule constant --batch-size 0 --depth 4 --width 256 --steps 2000"
# name -> fit-image options; {h}, {q}, {e}: a half, a quarter, an eighth of the training pixels.
VARIANTS = {
    "paper": PAPER,
    "lr 5e-3": "--lr 5e-3 --schedule constant --batch-size 0 --depth 4 --width 256 --steps 2000",
    "lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size 0 --depth 4 --width 256 --steps 500",
    "minibatch ¼": "--lr 1e-3 --schedule constant --batch-size {q} --depth 4 --width 256 --steps 2000",
    "minibatch ¼ lr 5e-3 cosine 1000": "--lr 5e-3 --schedule cosine --batch-size {q} --depth 4 --width 256 "
    "--steps 1000",
    "width 128 lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size 0 --depth 4 --width 128 --steps 500",
    "depth 3 lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size 0 --depth 3 --width 256 --steps 500",
    "lr 1e-2 cosine 500": "--lr 1e-2 --schedule cosine --batch-size 0 --depth 4 --width 256 --steps 500",
    "minibatch ¼ lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size {q} --depth 4 --width 256 --steps 500",
    "minibatch ¼ width 128 lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size {q} --depth 4 --width 128 "
    "--steps 500",
    "minibatch ¼ width 128 lr 1e-2 cosine 500": "--lr 1e-2 --schedule cosine --batch-size {q} --depth 4 --width 128 "
    "--steps 500",
    "minibatch ¼ width 128 depth 3 lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size {q} --depth 3 "
    "--width 128 --steps 500",
    "minibatch ⅛ width 128 lr 5e-3 cosine 1000": "--lr 5e-3 --schedule cosine --batch-size {e} --depth 4 --width 128 "
    "--steps 1000",
    "batch 4096 lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size 4096 --depth 4 --width 256 --steps 500",
    "batch 4096 width 128 depth 3 lr 5e-3 cosine 500": "--lr 5e-3 --schedule cosine --batch-size 4096 --depth 3 "
    "--width 128 --steps 500",
    "lr 5e-3 cosine 500 compile": "--lr 5e-3 --schedule cosine --batch-size 0 --depth 4 --width 256 --steps 500 "
    "--compile",
    # the POST /v1/fits default preset as it is now (fitstore.PRESETS["grid"]); σ does not apply
    "grid preset": " ".join([*PRESETS["grid"]["argv"], "--steps", str(PRESETS["grid"]["steps"])]),
}


class Probe:
    """on_step callback: PSNR on the training pixels, with the probe's own time excluded."""

    def __init__(self, coords: np.ndarray, rgb: np.ndarray, target: float, stop: bool):
        self.x, self.y, self.target, self.stop = torch.from_numpy(coords), rgb, target, stop
        self.clock, self.curve, self.hit = 0.0, [], None
        self.last = time.perf_counter()

    def __call__(self, step: int, loss: float, model: torch.nn.Module) -> bool:
        self.clock += time.perf_counter() - self.last
        with torch.no_grad():
            p = psnr(model(self.x).numpy(), self.y)
        self.curve.append((step + 1, round(self.clock, 3), None if p is None else round(p, 3)))  # None: nan
        if self.hit is None and p is not None and p >= self.target:
            self.hit = {"seconds": round(self.clock, 3), "steps": step + 1}
        self.last = time.perf_counter()
        return self.stop and self.hit is not None


def run_variant(name: str, opts: str, a: argparse.Namespace, img: np.ndarray, stop: bool) -> dict:
    tc, tt, _, _ = split_pixels(img, "paper")
    opts = opts.format(q=len(tc) // 4, h=len(tc) // 2, e=len(tc) // 8)
    if a.max_steps:
        opts += f" --steps {min(a.max_steps, int(opts.split('--steps')[1].split()[0]))}"
    argv = [
        "--image",
        a.image,
        "--size",
        str(a.size),
        "--scale",
        f"{a.scale:g}",
        "--protocol",
        "paper",
        "--device",
        a.device,
        "--seed",
        str(a.seed),
        "--no-progress",
        *opts.split(),
    ]
    cfg = fit_image_config(argv)
    probe = Probe(tc, tt, a.target, stop)
    model, _ = train(cfg, img, on_step=probe, every=a.every)
    row = {
        "variant": name,
        "argv": " ".join(argv),
        "stopped_at_target": stop,
        "seconds_to_target": probe.hit["seconds"] if probe.hit else None,
        "steps_to_target": probe.hit["steps"] if probe.hit else None,
        "seconds": round(probe.clock, 3),
        "steps": probe.curve[-1][0],
        "curve": probe.curve,
    }
    row["seconds_per_step"] = round(row["seconds"] / row["steps"], 5)
    if not stop:
        metrics, _ = evaluate(model, img, "paper")
        row.update(train_psnr=metrics["train_psnr"], test_psnr=metrics["test_psnr"])
    return row


def summarise(rows: list[dict], names: list[str]) -> dict:
    out = {}
    for n in names:
        rs = [r for r in rows if r["variant"] == n]
        if not rs:
            continue
        hits = [r["seconds_to_target"] for r in rs if r["seconds_to_target"] is not None]
        full = next((r for r in rs if not r["stopped_at_target"]), {})
        out[n] = {
            "median_seconds_to_target": median(hits) if len(hits) == len(rs) and hits else None,
            "seconds_to_target": [r["seconds_to_target"] for r in rs],
            "steps_to_target": [r["steps_to_target"] for r in rs],
            "median_seconds_per_step": median([r["seconds_per_step"] for r in rs]),
            "final_train_psnr": full.get("train_psnr"),
            "final_test_psnr": full.get("test_psnr"),
            "full_seconds": full.get("seconds"),
        }
    base = out.get("paper", {}).get("median_seconds_to_target")
    for v in out.values():
        t = v["median_seconds_to_target"]
        v["speedup_vs_paper"] = round(base / t, 2) if base and t else None
    return out


def table_md(result: dict) -> str:
    lines = [
        f"| variant | s to {result['target']:g} dB (median) | per round | steps | ms/step | speed-up | "
        "final train / test PSNR | full-run s |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for n, v in result["summary"].items():
        t = v["median_seconds_to_target"]
        rounds = ", ".join("–" if s is None else f"{s:.1f}" for s in v["seconds_to_target"])
        steps = "/".join("–" if s is None else str(s) for s in v["steps_to_target"])
        q = f"{v['final_train_psnr']:.2f} / {v['final_test_psnr']:.2f}" if v["final_test_psnr"] is not None else "–"
        fs = f"{v['full_seconds']:.0f}" if v["full_seconds"] is not None else "–"
        sp = f"{v['speedup_vs_paper']:.1f}×" if v["speedup_vs_paper"] else "–"
        lines.append(
            f"| {n} | {'not reached' if t is None else f'{t:.1f}'} | {rounds} | {steps} | "
            f"{1000 * v['median_seconds_per_step']:.0f} | {sp} | {q} | {fs} |"
        )
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for n in result.get("summary", {}):
        rs = [r for r in result["rows"] if r["variant"] == n]
        r = next((r for r in rs if not r["stopped_at_target"]), rs[0])
        c = np.array(r["curve"])
        ax.semilogx(np.maximum(c[:, 1], 1e-2), c[:, 2], label=n, lw=1.2)
    ax.axhline(result["target"], color="k", ls="--", lw=0.8)
    ax.set_xlabel("training seconds (probe time excluded)")
    ax.set_ylabel("train PSNR (dB)")
    ax.set_title(f"{result['image']} {result['size']}², round 1 (σ={result['scale']:g})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.time_to_quality", description=__doc__.splitlines()[0])
    p.add_argument("--image", default="astronaut")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--scale", type=float, default=10.0, help="Gaussian σ, the same for every variant")
    p.add_argument("--target", type=float, default=30.0, help="train PSNR to reach (dB)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names from the list")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--quality",
        default="all",
        help="variants run to the end of their schedule in round 1 for final PSNR (all, or names)",
    )
    p.add_argument("--max-steps", type=int, default=0, help="cap every schedule at this many steps (smoke tests)")
    p.add_argument("--every", type=int, default=10, help="probe interval in steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--name", default="time_to_quality")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--plot", default=str(IMG / "bench-time-to-quality.png"))
    a = p.parse_args(argv)
    set_threads(a.threads)
    names = [n.strip() for n in a.variants.split(",") if n.strip()]
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s) {bad}; valid: {', '.join(VARIANTS)}")
    img, _ = load_image(a.image, a.size)
    result = {
        "machine": machine(),
        "image": a.image,
        "size": a.size,
        "scale": a.scale,
        "target": a.target,
        "rounds": a.rounds,
        "variants": {n: VARIANTS[n] for n in names},
        "rows": [],
    }
    quality = set(names) if a.quality == "all" else {n.strip() for n in a.quality.split(",")}
    # Warm-up: the first fit in a process pays one-off costs (allocator, kernels, page faults).
    run_variant("warm-up", "--steps 20 --width 64 --depth 2", a, img, stop=False)
    for rnd in range(a.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for n in order:
            try:
                row = run_variant(n, VARIANTS[n], a, img, stop=rnd > 0 or n not in quality)
            except Exception as e:  # one broken variant (e.g. no compiler for torch.compile) must not end the run
                log.warning("round %d %s failed: %s", rnd + 1, n, e)
                result.setdefault("errors", []).append({"round": rnd + 1, "variant": n, "error": repr(e)[:500]})
                continue
            result["rows"].append({"round": rnd + 1, **row})
            log.info(
                "round %d %-32s %s s to %g dB (%s steps), %.1f ms/step",
                rnd + 1,
                n,
                row["seconds_to_target"],
                a.target,
                row["steps_to_target"],
                1000 * row["seconds_per_step"],
            )
            result["summary"] = summarise(result["rows"], names)
            write_json(a.name, result, a.out_dir)
    return finish(result, a.plot, plot, table_md)


if __name__ == "__main__":
    setup_logging()
    main()
