"""The SineKAN paper's MNIST comparison on the full data (docs/benchmarks.md, digits_paper).

SineKAN, B-spline KAN (efficient-kan), FourierKAN and a ReLU MLP, one hidden layer [784, width, 10], grid 8
for the KANs (the reference notebooks' size), each trained on the 60,000 training digits minus a stratified
validation slice (10 %, seed 0), then scored once on the official 10,000 test digits. Every choice is made on
the slice: the learning rate (`lr`: the notebooks' rate ×{½, 1, 2} at width 64, seed 0) and the epoch kept
(`run`: the weights of the epoch that scored best on it, out of --epochs). Inference: µs per digit under
onnxruntime and torch eager, one thread, at each --batches size (median of timed calls).

    python -m bench.digits_paper lr  --data-dir ../shared/data/mnist --epochs 3
    python -m bench.digits_paper run --data-dir ../shared/data/mnist --epochs 3 --widths 16,64,256 --seeds 0,1,2
    python -m bench.digits_paper report --plot docs/img/digits-paper.png

Each finished training is one line of --results (JSON lines, default bench/results/digits_paper.jsonl); a run
already there is skipped, so an interrupted sweep resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from .common import RESULTS, log, machine, mean_std, median, ort_session, pyplot, set_threads, setup_logging, time_calls

MODELS = ("sinekan", "bspline-kan", "fourier-kan", "mlp")
GRID = 8  # every KAN of the reference notebooks (SineKAN_MNIST_Demo, B_SplineKAN_MNIST, FourierKAN_MNIST)
# The notebooks' AdamW settings per model (lr, weight decay; LR × 0.9 per epoch, batch 64, 30 epochs).
NOTEBOOK = {
    "sinekan": (4e-4, 0.5),
    "bspline-kan": (5e-3, 0.01),
    "fourier-kan": (1e-4, 1.0),
    "mlp": (8e-4, 0.01),
}
LR_FACTORS = (0.5, 1.0, 2.0)
# Their last-epoch test accuracy (%) after 30 epochs, width 16…512, grid 8 (the notebooks' width sweep);
# the notebooks used the test set as their validation set.
NOTEBOOK_ACCURACY = {
    "sinekan": {16: 96.12, 32: 97.54, 64: 98.10, 128: 98.44, 256: 98.52, 512: 98.60},
    "bspline-kan": {16: 95.56, 32: 97.05, 64: 97.86, 128: 98.02, 256: 98.21, 512: 98.18},
    "fourier-kan": {16: 93.21, 32: 94.91, 64: 95.95, 128: 96.55, 256: 97.09, 512: 97.16},
    "mlp": {16: 91.78, 32: 95.56, 64: 96.82, 128: 97.92, 256: 98.21, 512: 98.42},
}
BATCHES = (1, 16, 64, 256, 1024)
DEFAULT_RESULTS = RESULTS / "digits_paper.jsonl"


def config(model: str, width: int, lr: float, weight_decay: float, epochs: int, seed: int):
    from training.digits.fit import FitConfig
    from training.digits.models import DigitModelConfig

    grid = GRID if model != "mlp" else 0
    return FitConfig(
        epochs=epochs,
        lr=lr,
        weight_decay=weight_decay,
        seed=seed,
        progress=False,
        model=DigitModelConfig(model=model, hidden=[width], grid_size=grid),
    )


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def inference_us(model, batches, threads: int, seconds: float) -> dict:
    """µs per digit of the exported graph: {"onnxruntime": {batch: µs}, "torch": {batch: µs}}."""
    import torch

    from training.digits.export import export_digits

    graph, onnx_bytes = export_digits(model)
    sess = ort_session(onnx_bytes, threads)
    out: dict = {"onnxruntime": {}, "torch": {}}
    for b in batches:
        x = np.random.default_rng(0).random((b, 1, 28, 28), dtype=np.float32)
        tx = torch.from_numpy(x)

        def run_torch():
            with torch.inference_mode():
                graph(tx)

        out["onnxruntime"][str(b)] = (
            1e6 * median(time_calls(lambda: sess.run(None, {"images": x}), repeats=5, min_seconds=seconds)) / b
        )
        out["torch"][str(b)] = 1e6 * median(time_calls(run_torch, repeats=5, min_seconds=seconds)) / b
    return out


def train_one(data, kind: str, model: str, width: int, lr: float, wd: float, a) -> dict:
    from training.digits.fit import evaluate, train
    from training.digits.models import count_parameters

    cfg = config(model, width, lr, wd, a.epochs, a.seed_now)
    t0 = time.perf_counter()
    net, info = train(cfg, data, keep_best=kind == "run")
    row = {
        "kind": kind,
        "model": model,
        "width": width,
        "grid": cfg.model.grid_size,
        "seed": cfg.seed,
        "lr": lr,
        "weight_decay": wd,
        "epochs": cfg.epochs,
        "train_size": info["validation"]["train_size"],
        "val_size": info["validation"]["size"],
        "val_history": [h["val_accuracy"] for h in info["history"]],
        "val_accuracy": info["validation"]["accuracy"],
        "epoch_kept": info["epoch_kept"],
        "parameters": count_parameters(net),
        "seconds_per_epoch": info["seconds_per_epoch"],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if kind == "run":
        row["test_accuracy"] = evaluate(net, data.test)["test_accuracy"]  # the one look at the test split
        row["inference_us"] = inference_us(net, a.batches, a.threads, a.timing_seconds)
    row["machine"] = machine()
    return row


def chosen_lr(rows: list[dict], model: str) -> float:
    """The learning rate whose `lr` run scored best on the validation slice (the notebooks' if none ran)."""
    cands = [r for r in rows if r["kind"] == "lr" and r["model"] == model]
    if not cands:
        return NOTEBOOK[model][0]
    return max(cands, key=lambda r: r["val_accuracy"])["lr"]


def done(rows, kind, model, width, lr, seed, epochs) -> bool:
    return any(
        r["kind"] == kind
        and r["model"] == model
        and r["width"] == width
        and r["lr"] == lr
        and r["seed"] == seed
        and r["epochs"] == epochs
        for r in rows
    )


def sweep(a, data, kind: str) -> None:
    rows = read_rows(a.results)
    for seed in a.seeds if kind == "run" else [0]:
        for width in a.widths if kind == "run" else [a.lr_width]:
            for model in a.models:
                wd = NOTEBOOK[model][1]
                lrs = [chosen_lr(rows, model)] if kind == "run" else [NOTEBOOK[model][0] * f for f in LR_FACTORS]
                for lr in lrs:
                    if done(rows, kind, model, width, lr, seed, a.epochs):
                        continue
                    a.seed_now = seed
                    row = train_one(data, kind, model, width, lr, wd, a)
                    append(a.results, row)
                    rows.append(row)
                    log.info(
                        "%s %s w%d lr %g seed %d: val %.4f (epoch %d)%s, %.0f s",
                        kind,
                        model,
                        width,
                        lr,
                        seed,
                        row["val_accuracy"],
                        row["epoch_kept"],
                        f", test {row['test_accuracy']:.4f}" if "test_accuracy" in row else "",
                        row["seconds"],
                    )


def retime(a) -> None:
    """Time every (model, width) of the runs again, all interleaved in each of --rounds rounds (the graph's speed
    does not depend on its weights, so fresh ones stand in): one `timing` row each, the median of the rounds."""
    from training.digits.models import DigitClassifier, DigitModelConfig

    rows = read_rows(a.results)
    pairs = sorted({(r["model"], r["width"], r["grid"]) for r in rows if r["kind"] == "run"})
    nets = {p: DigitClassifier(DigitModelConfig(model=p[0], hidden=[p[1]], grid_size=p[2])).eval() for p in pairs}
    samples: dict = {p: [] for p in pairs}
    for _ in range(a.rounds):
        for p in pairs:
            samples[p].append(inference_us(nets[p], a.batches, a.threads, a.timing_seconds))
    for (model, width, grid), got in samples.items():
        us = {rt: {b: median([g[rt][b] for g in got]) for b in got[0][rt]} for rt in got[0]}
        append(
            a.results,
            {
                "kind": "timing",
                "model": model,
                "width": width,
                "grid": grid,
                "rounds": a.rounds,
                "inference_us": us,
                "rounds_us": got,
                "machine": machine(),
            },
        )


def summary(rows: list[dict]) -> list[dict]:
    """Mean ± std over seeds per (model, width) of the `run` rows."""
    groups: dict = {}
    for r in rows:
        if r["kind"] == "run":
            groups.setdefault((r["model"], r["width"]), []).append(r)
    out = []
    for (model, width), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], MODELS.index(kv[0][0]))):
        acc = mean_std([100 * r["test_accuracy"] for r in rs])
        val = mean_std([100 * r["val_accuracy"] for r in rs])
        timed = [r for r in rows if r["kind"] == "timing" and (r["model"], r["width"]) == (model, width)]
        if timed:  # the interleaved re-timing: spread over its rounds
            t = timed[-1]
            timing = {
                rt: {b: mean_std([g[rt][b] for g in t["rounds_us"]]) for b in t["inference_us"][rt]}
                for rt in t["inference_us"]
            }
            for rt in timing:  # the centre is the median of the rounds
                timing[rt] = {b: (t["inference_us"][rt][b], sd) for b, (_, sd) in timing[rt].items()}
        else:
            timing = {
                rt: {b: mean_std([r["inference_us"][rt][b] for r in rs]) for b in rs[0]["inference_us"][rt]}
                for rt in rs[0]["inference_us"]
            }
        out.append(
            {
                "model": model,
                "width": width,
                "seeds": len(rs),
                "lr": rs[0]["lr"],
                "weight_decay": rs[0]["weight_decay"],
                "epochs": rs[0]["epochs"],
                "epoch_kept": [r["epoch_kept"] for r in rs],
                "parameters": rs[0]["parameters"],
                "test": acc,
                "val": val,
                "inference_us": timing,
                "notebook": NOTEBOOK_ACCURACY.get(model, {}).get(width),
            }
        )
    return out


def table_md(summ: list[dict]) -> str:
    batches = list(summ[0]["inference_us"]["onnxruntime"]) if summ else []
    head = " | ".join(f"ORT b{b} µs" for b in batches)
    lines = [
        f"| model | width | params | lr | epochs kept | val % | test % (mean ± std) | notebooks' test % | {head} |",
        "|---|---:|---:|---:|---|---:|---:|---:|" + "---:|" * len(batches),
    ]
    for s in summ:
        t = s["inference_us"]["onnxruntime"]
        nb = f"{s['notebook']:.2f}" if s["notebook"] is not None else "–"
        lines.append(
            f"| {s['model']} | {s['width']} | {s['parameters']:,} | {s['lr']:g} | "
            f"{','.join(map(str, s['epoch_kept']))} of {s['epochs']} | {s['val'][0]:.2f} ± {s['val'][1]:.2f} | "
            f"**{s['test'][0]:.2f} ± {s['test'][1]:.2f}** ({s['seeds']} seeds) | {nb} | "
            + " | ".join(f"{t[b][0]:.1f}" for b in batches)
            + " |"
        )
    return "\n".join(lines)


def plot(summ: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for i, m in enumerate(MODELS):
        ss = [s for s in summ if s["model"] == m]
        if not ss:
            continue
        w = [s["width"] for s in ss]
        ax1.errorbar(
            w,
            [s["test"][0] for s in ss],
            yerr=[s["test"][1] for s in ss],
            marker="o",
            capsize=3,
            color=f"C{i}",
            label=f"{m} (here)",
        )
        nb = [(s["width"], s["notebook"]) for s in ss if s["notebook"] is not None]
        if nb:
            ax1.plot(*zip(*nb), ls="--", marker="x", color=f"C{i}", alpha=0.6, label=f"{m} (notebooks, 30 ep.)")
        mid = sorted(ss, key=lambda s: abs(s["width"] - 64))[0]
        t = mid["inference_us"]["onnxruntime"]
        bs = [int(b) for b in t]
        ax2.errorbar(
            bs,
            [t[b][0] for b in t],
            yerr=[t[b][1] for b in t],
            marker="o",
            capsize=3,
            color=f"C{i}",
            label=f"{m} width {mid['width']}",
        )
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("hidden width")
    ax1.set_ylabel("test accuracy (%), official 10,000")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("batch size")
    ax2.set_ylabel("µs per digit, onnxruntime, 1 thread")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def csv_ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("lr", "run", "retime", "report"))
    ap.add_argument("--data-dir")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--widths", type=csv_ints, default=[16, 64, 256])
    ap.add_argument("--lr-width", type=int, default=64)
    ap.add_argument("--seeds", type=csv_ints, default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batches", type=csv_ints, default=list(BATCHES))
    ap.add_argument("--train-limit", type=int, default=None, help="first N training digits only (tests)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timing-seconds", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=5, help="retime: interleaved rounds")
    ap.add_argument("--plot", type=Path, default=None)
    a = ap.parse_args(argv)
    a.models = [m for m in a.models.split(",") if m]
    setup_logging()
    set_threads(a.threads)
    if a.what == "retime":
        retime(a)
    elif a.what != "report":
        if not a.data_dir:
            ap.error("--data-dir is needed to train")
        from training.digits.idx import Split, load_dataset

        data = load_dataset(a.data_dir)
        if a.train_limit:
            tr = data.train
            data = dataclasses.replace(data, train=Split(tr.images[: a.train_limit], tr.labels[: a.train_limit]))
        sweep(a, data, a.what)
    summ = summary(read_rows(a.results))
    if summ:
        log.info("\n%s", table_md(summ))
        if a.plot:
            plot(summ, a.plot)
    return summ


if __name__ == "__main__":
    main()
