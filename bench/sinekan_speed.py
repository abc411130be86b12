"""Inference µs/sample (docs/benchmarks.md, sinekan_speed) of exported SineKAN against B-spline KAN, FourierKAN and MLP.

The digit classifiers of `training.digits` ([784, hidden…, 10], each model at its default grid:
SineKAN G=8, B-spline KAN G=5 cubic, FourierKAN G=8) are exported with the digits export code
(logits + softmax graph) and timed under onnxruntime, and in torch eager as the paper did
(PyTorch modules), at batch 1 and 256, all models interleaved in each repeat. Weights are the
initialisation: inference time does not depend on their values.

A SineKAN layer is sin(x·ω + φ) over [N, in, G] followed by one GEMM [N, in·G] × [in·G, out].
The "floor" row times exactly that in torch (sines + GEMM, nothing else) for the 1-hidden-layer
SineKAN, so the export can be read against what its maths needs.

    python -m bench.sinekan_speed        # widths 16…256 at depth 1, and depths 2, 3 at width 128
"""

from __future__ import annotations

import argparse

import numpy as np

from .common import IMG, log, machine, median, ort_session, pyplot, set_threads, setup_logging, time_calls, write_json

MODELS = ("sinekan", "bspline-kan", "fourier-kan", "mlp")


def build(model: str, hidden: list[int], threads: int):
    """(torch graph, onnxruntime session, net) of one digit classifier, exported by training.digits."""
    from training.digits.export import export_digits
    from training.digits.models import DigitClassifier, DigitModelConfig

    net = DigitClassifier(DigitModelConfig(model=model, hidden=list(hidden))).eval()
    graph, onnx_bytes = export_digits(net)
    return graph, ort_session(onnx_bytes, threads), net


def sinekan_floor(net, batch: int):
    """sin(x·ω + φ) and one GEMM per layer, with the amplitudes pre-flattened: the maths, no more."""
    import torch

    layers = [
        (
            layer.frequencies.detach()[:, None],
            layer.phase.t().contiguous(),
            layer.amplitudes.detach().permute(0, 2, 1).reshape(layer.out_dim, -1).t().contiguous(),
            layer.bias.detach(),
        )
        for layer in net.body
    ]
    x0 = torch.rand(batch, 784) * 2 - 1

    def run():
        with torch.inference_mode():
            x = x0
            for w, ph, a, b in layers:  # sines [N, G, in], then one GEMM
                x = torch.addmm(b, torch.sin(x[:, None, :] * w + ph).reshape(x.shape[0], -1), a)
            return x

    return run


def measure(specs: list[list[int]], batches: list[int], models: list[str], repeats: int, threads: int) -> list[dict]:
    import torch

    rows = []
    for hidden in specs:
        built = {m: build(m, hidden, threads) for m in models}
        for batch in batches:
            x = np.random.default_rng(0).random((batch, 1, 28, 28), dtype=np.float32)
            tx = torch.from_numpy(x)
            fns = {}
            for m, (graph, sess, net) in built.items():
                fns[(m, "onnxruntime")] = lambda s=sess: s.run(["logits", "probabilities"], {"images": x})
                fns[(m, "torch eager")] = lambda g=graph: _torch_call(g, tx)
            if "sinekan" in built and len(hidden) == 1:
                fns[("sinekan floor (sines + 1 GEMM)", "torch")] = sinekan_floor(built["sinekan"][2], batch)
            for f in fns.values():
                f()
            samples = {k: [] for k in fns}
            for _ in range(repeats):
                for k, f in fns.items():
                    samples[k] += time_calls(f, repeats=1, warmup=0, min_seconds=0.1)
            for (m, rt), s in samples.items():
                us = 1e6 * median(s) / batch
                rows.append({"hidden": hidden, "batch": batch, "model": m, "runtime": rt, "us_per_sample": us})
                log.info("hidden %-12s batch %3d %-30s %-11s %9.2f µs/sample", hidden, batch, m, rt, us)
    return rows


def _torch_call(graph, tx):
    import torch

    with torch.inference_mode():
        return graph(tx)


def ratios(rows: list[dict]) -> list[dict]:
    """B-spline KAN / SineKAN time per (hidden, batch, runtime): the paper's claimed 4–8×."""
    out = []
    key = {(str(r["hidden"]), r["batch"], r["runtime"], r["model"]): r["us_per_sample"] for r in rows}
    for (h, b, rt, m), us in key.items():
        if m == "sinekan":
            row = {"hidden": h, "batch": b, "runtime": rt}
            for other in ("bspline-kan", "fourier-kan", "mlp"):
                if (h, b, rt, other) in key:
                    row[f"{other}_over_sinekan"] = key[(h, b, rt, other)] / us
            out.append(row)
    return out


def table_md(result: dict) -> str:
    rows = result["rows"]
    lines = [
        "| hidden | batch | runtime | SineKAN | B-spline KAN | FourierKAN | MLP | B-spline ÷ SineKAN |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    key = {(str(r["hidden"]), r["batch"], r["runtime"], r["model"]): r["us_per_sample"] for r in rows}
    for r in result["ratios"]:
        h, b, rt = r["hidden"], r["batch"], r["runtime"]
        cells = [f"{key.get((h, b, rt, m), float('nan')):.2f}" for m in MODELS]
        lines.append(
            f"| {h} | {b} | {rt} | "
            + " | ".join(cells)
            + f" | {r.get('bspline-kan_over_sinekan', float('nan')):.1f}× |"
        )
    floor = [r for r in rows if r["model"].startswith("sinekan floor")]
    if floor:
        lines += [
            "",
            "| hidden | batch | SineKAN onnxruntime | floor: sines + 1 GEMM (torch) | export ÷ floor |",
            "|---|---:|---:|---:|---:|",
        ]
        for f in floor:
            h, b = str(f["hidden"]), f["batch"]
            ort_us = key.get((h, b, "onnxruntime", "sinekan"), float("nan"))
            lines.append(f"| {h} | {b} | {ort_us:.2f} | {f['us_per_sample']:.2f} | {ort_us / f['us_per_sample']:.2f} |")
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), dpi=120, sharey=False)
    depth1 = [r for r in result["rows"] if len(r["hidden"]) == 1 and r["runtime"] == "onnxruntime"]
    for ax, batch in zip(axes, sorted({r["batch"] for r in depth1})):
        for m in MODELS:
            pts = sorted(
                (r["hidden"][0], r["us_per_sample"]) for r in depth1 if r["model"] == m and r["batch"] == batch
            )
            if pts:
                ax.loglog(*zip(*pts), "o-", label=m, base=2)
        ax.set_title(f"onnxruntime, batch {batch}")
        ax.set_xlabel("hidden width (784 → h → 10)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("µs / sample")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.sinekan_speed", description=__doc__.splitlines()[0])
    p.add_argument(
        "--hidden",
        default="16;32;64;128;256;128,128;128,128,128",
        help="';'-separated hidden-layer lists, e.g. '64;128,128'",
    )
    p.add_argument("--batches", default="1,256")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads")
    p.add_argument("--name", default="sinekan_speed")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--plot", default=str(IMG / "bench-sinekan-speed.png"))
    a = p.parse_args(argv)
    set_threads(a.threads)
    specs = [[int(w) for w in s.split(",")] for s in a.hidden.split(";") if s.strip()]
    result = {
        "machine": machine(),
        "hidden": specs,
        "batches": a.batches,
        "rows": measure(specs, [int(b) for b in a.batches.split(",")], a.models.split(","), a.repeats, a.threads),
    }
    result["ratios"] = ratios(result["rows"])
    write_json(a.name, result, a.out_dir)
    if a.plot:
        plot(result, a.plot)
    log.info("\n%s", table_md(result))
    return result


if __name__ == "__main__":
    setup_logging()
    main()
