"""compare-digits: every model × hidden width × depth on the same data and the same budget.

Each run trains with the same FitConfig (epochs, batch, lr, seed; no augmentation), then
measures test accuracy, parameters, training seconds per epoch (median over epochs) and
inference µs/sample under onnxruntime and torch at batch 1 and 256 (median of ≥ 5 calls
lasting ≥ timing_seconds, both on the same number of CPU threads).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..repository import command_line
from .export import export_digits
from .fit import FitConfig, evaluate, to_tensor, train
from .idx import DigitData, Split
from .models import DigitModelConfig, count_parameters

log = logging.getLogger(__name__)
TIMING_BATCHES = (1, 256)
TIMING_MIN_CALLS = 5


@dataclass
class CompareConfig:
    models: list[str]
    widths: list[int]
    depths: list[int]
    fit: FitConfig = field(default_factory=FitConfig)
    grid: int = 0  # 0 = each model's default grid
    threads: int = 1
    train_limit: int | None = None
    timing_seconds: float = 0.3  # each inference timing repeats for at least this long

    def runs(self):
        for depth in self.depths:
            for width in self.widths:
                for model in self.models:
                    yield model, depth, width


def median_call_us(fn, per_call: int, seconds: float) -> float:
    """Median wall time of fn() in µs per sample, over ≥ 5 calls and ≥ `seconds`, after 2 warm-up calls."""
    fn(), fn()
    times, start = [], time.perf_counter()
    while len(times) < TIMING_MIN_CALLS or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6 / per_call


def inference_us(graph: torch.nn.Module, onnx_bytes: bytes, images: np.ndarray, threads: int, seconds: float) -> dict:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    opts.log_severity_level = 3
    sess = ort.InferenceSession(onnx_bytes, sess_options=opts, providers=["CPUExecutionProvider"])
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    out = {}
    try:
        for b in TIMING_BATCHES:
            x = np.ascontiguousarray(images[:b])
            xt = torch.from_numpy(x)
            out[f"ort_b{b}_us"] = median_call_us(lambda: sess.run(None, {"images": x}), b, seconds)
            with torch.inference_mode():
                out[f"torch_b{b}_us"] = median_call_us(lambda: graph(xt), b, seconds)
    finally:
        torch.set_num_threads(saved)
    return out


def limit(data: DigitData, n: int | None) -> DigitData:
    if n is None or n >= len(data.train.labels):
        return data
    return dataclasses.replace(data, train=Split(data.train.images[:n], data.train.labels[:n]))


def run_compare(cfg: CompareConfig, data: DigitData) -> list[dict]:
    data = limit(data, cfg.train_limit)
    images = to_tensor(data.test.images[: max(TIMING_BATCHES)]).numpy()
    rows = []
    total = len(cfg.models) * len(cfg.widths) * len(cfg.depths)
    for i, (model_name, depth, width) in enumerate(cfg.runs(), 1):
        fit = dataclasses.replace(
            cfg.fit,
            progress=False,
            model=DigitModelConfig(model=model_name, hidden=[width] * depth, grid_size=cfg.grid),
        )
        model, info = train(fit, data)
        metrics = evaluate(model, data.test)
        graph, onnx_bytes = export_digits(model)
        row = {
            "model": model_name,
            "depth": depth,
            "width": width,
            "grid": fit.model.grid_size,
            "parameters": count_parameters(model),
            "test_accuracy": metrics["test_accuracy"],
            "train_accuracy": info["history"][-1]["train_accuracy"],
            "seconds_per_epoch": info["seconds_per_epoch"],
            "onnx_bytes": len(onnx_bytes),
            **inference_us(graph, onnx_bytes, images, cfg.threads, cfg.timing_seconds),
        }
        rows.append(row)
        log.warning("[%d/%d] %s", i, total, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()})
    return rows


def markdown_table(rows: list[dict], cfg: CompareConfig, data: DigitData) -> str:
    f = cfg.fit
    train_n = min(len(data.train.labels), cfg.train_limit or len(data.train.labels))
    grids = ", ".join(sorted({f"{r['model']} {r['grid']}" for r in rows if r["model"] != "mlp"})) or "none"
    head = [
        f"Dataset `{data.name}` from `{data.directory}`: {train_n} training images, "
        f"{len(data.test.labels)} test images. Budget for every run: {f.epochs} epochs, batch {f.batch_size}, "
        f"AdamW lr {f.lr:g} (weight decay {f.weight_decay:g}), LR × {f.gamma:g} per epoch, seed {f.seed}, "
        f"no augmentation. Grid size: {grids}. Accuracy is the last "
        f"epoch's. Inference: median µs per sample, {cfg.threads} CPU thread(s), onnxruntime (ORT) and "
        f"torch eager. Run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
        f"({torch.get_num_threads()} torch threads for training); command: `{command_line()}`.",
        "",
        "| model | depth | width | params | test acc | s/epoch | ORT b1 µs | ORT b256 µs | torch b1 µs "
        "| torch b256 µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        head.append(
            f"| {r['model']} | {r['depth']} | {r['width']} | {r['parameters']:,} | "
            f"{100 * r['test_accuracy']:.2f} % | {r['seconds_per_epoch']:.2f} | {r['ort_b1_us']:.1f} | "
            f"{r['ort_b256_us']:.2f} | {r['torch_b1_us']:.1f} | {r['torch_b256_us']:.2f} |"
        )
    return "\n".join(head) + "\n"


def plot(rows: list[dict], cfg: CompareConfig, data: DigitData, prefix: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prefix.parent.mkdir(parents=True, exist_ok=True)
    marker = dict(zip(cfg.models, "osd^v<>"))
    paths = []

    def series(model, depth, key):
        rs = sorted((r for r in rows if r["model"] == model and r["depth"] == depth), key=lambda r: r["width"])
        return [r["width"] for r in rs], [r[key] for r in rs], [r["parameters"] for r in rs]

    fig, axes = plt.subplots(1, len(cfg.depths) + 1, figsize=(4 * (len(cfg.depths) + 1), 3.6), dpi=110)
    for ax, depth in zip(axes, cfg.depths):
        for m in cfg.models:
            w, acc, _ = series(m, depth, "test_accuracy")
            ax.semilogx(w, [100 * a for a in acc], marker=marker[m], label=m, base=2)
        ax.set_title(f"{depth} hidden layer{'s' if depth > 1 else ''}")
        ax.set_xlabel("hidden width")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
    for m in cfg.models:
        for depth in cfg.depths:
            _, acc, p = series(m, depth, "test_accuracy")
            axes[-1].semilogx(
                p,
                [100 * a for a in acc],
                marker=marker[m],
                ls="none",
                alpha=0.5 + 0.5 / depth,
                color=f"C{cfg.models.index(m)}",
                label=m if depth == cfg.depths[0] else None,
            )
    axes[-1].set_xlabel("parameters")
    axes[-1].set_title("accuracy against size")
    axes[-1].grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{data.name}: {cfg.fit.epochs} epochs, same budget for all")
    fig.tight_layout()
    paths.append(save(fig, prefix, "accuracy"))

    keys = [
        ("seconds_per_epoch", "train s/epoch"),
        ("ort_b1_us", "ORT µs/sample, batch 1"),
        ("ort_b256_us", "ORT µs/sample, batch 256"),
        ("torch_b256_us", "torch µs/sample, batch 256"),
    ]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.6), dpi=110)
    for ax, (key, title) in zip(axes, keys):
        for m in cfg.models:
            pts = sorted((r["parameters"], r[key]) for r in rows if r["model"] == m)
            ax.loglog([p for p, _ in pts], [v for _, v in pts], marker=marker[m], label=m)
        ax.set_title(title)
        ax.set_xlabel("parameters")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{data.name}: speed against size ({cfg.threads} inference thread(s))")
    fig.tight_layout()
    paths.append(save(fig, prefix, "speed"))
    return paths


def save(fig, prefix: Path, what: str) -> Path:
    import matplotlib.pyplot as plt

    final = prefix.with_name(f"{prefix.name}-{what}.png")
    tmp = final.with_name(f".{final.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.rename(final)
    return final


def write_results(rows: list[dict], cfg: CompareConfig, data: DigitData, table: Path, plots: Path) -> None:
    table.parent.mkdir(parents=True, exist_ok=True)
    tmp = table.with_name(f".{table.name}.tmp")
    tmp.write_text(markdown_table(rows, cfg, data))
    plot(rows, cfg, data, plots)
    tmp.rename(table)
