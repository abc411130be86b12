"""The digit classifiers: accuracy, calibration, rejection and speed (docs/benchmarks.md, the digits sections).

    python -m bench.digits official --data-dir ../shared/data/mnist --items-dir /usr/share/datasets/fashion-mnist
    python -m bench.digits redrawn --data-dir ../shared/data/mnist-10k --models models
    python -m bench.digits threshold --data-dir D --items-dir I --detector det.pt --checkpoint a.pt b.pt
    python -m bench.digits ablation --data-dir D --row "base=--hidden 128 --epochs 25 --augment" [--checkpoints DIR]
    python -m bench.digits ensembles --data-dir D --candidate "mean3=a.pt,b.pt,c.pt" [--fp16-weights]
    python -m bench.digits paper lr|run|retime|report --data-dir ../shared/data/mnist --epochs 30 --widths 16,32,64

- official, redrawn: the shipped model through the real service (V2 binary tensors with tritonclient, v1 classify
  of JSON pixels or PNG uploads): test accuracy, calibration (ECE, 15 bins), what is rejected of Fashion-MNIST and
  drawn pages (training.digits.outliers, the test seeds); redrawn draws each test digit as ink on a page first.
- threshold, ablation, ensembles: choices made on the validation slice only; the test split is never read.
- paper: the SineKAN paper's comparison (SineKAN, B-spline KAN, FourierKAN, a ReLU MLP; [784, width, 10], grid 8),
  the learning rate (the notebooks' ×{½, 1, 2}) and the epoch kept chosen on the validation slice, then one look at
  the test split, and µs per digit under onnxruntime and torch at each batch. Each training is one line of --results
  (JSON lines); a run already there is skipped, so a sweep resumes. `retime` times every (model, width) again,
  interleaved over --rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import shlex
import time
from pathlib import Path

import httpx
import numpy as np

from . import common
from .common import RESULTS, ROOT, log, machine, mean_std, median, ort_session, pyplot, time_calls, write_json

BATCH = 256  # the digits model's max_batch_size
SHARES = (0.001, 0.002, 0.003, 0.004, 0.005)  # threshold: the shares of validation digits it may reject
MODELS = ("sinekan", "bspline-kan", "fourier-kan", "mlp")
GRID = 8  # every KAN of the reference notebooks
NOTEBOOK = {"sinekan": (4e-4, 0.5), "bspline-kan": (5e-3, 0.01), "fourier-kan": (1e-4, 1.0), "mlp": (8e-4, 0.01)}
# The notebooks' last-epoch test accuracy (%) after 30 epochs (they used the test set as their validation set).
NOTEBOOK_ACCURACY = {
    "sinekan": {16: 96.12, 32: 97.54, 64: 98.10, 128: 98.44, 256: 98.52, 512: 98.60},
    "bspline-kan": {16: 95.56, 32: 97.05, 64: 97.86, 128: 98.02, 256: 98.21, 512: 98.18},
    "fourier-kan": {16: 93.21, 32: 94.91, 64: 95.95, 128: 96.55, 256: 97.09, 512: 97.16},
    "mlp": {16: 91.78, 32: 95.56, 64: 96.82, 128: 97.92, 256: 98.21, 512: 98.42},
}


def share(x) -> float:
    """The share of true values (or the mean), as the result files round it."""
    return round(float(np.mean(x)), 5)


def images(u8: np.ndarray) -> np.ndarray:
    return (u8.astype(np.float32) / 255.0)[:, None]


def v2_outputs(url: str, model: str, x: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """The named outputs for float32 images [N, 1, 28, 28], BATCH at a time, as tritonclient reads them."""
    import tritonclient.http as triton

    client = triton.InferenceServerClient(url.removeprefix("http://"), network_timeout=120)
    parts: dict[str, list] = {n: [] for n in names}
    for i in range(0, len(x), BATCH):
        inp = triton.InferInput("images", list(x[i : i + BATCH].shape), "FP32")
        inp.set_data_from_numpy(np.ascontiguousarray(x[i : i + BATCH]), binary_data=True)
        res = client.infer(model, [inp], outputs=[triton.InferRequestedOutput(n, binary_data=True) for n in names])
        for n in names:
            parts[n].append(res.as_numpy(n))
    client.close()
    return {n: np.concatenate(v) for n, v in parts.items()}


def v2_classes(url: str, model: str, x: np.ndarray, k: int = 2) -> list[list[str]]:
    """The classification extension's top-k strings for the probabilities output (JSON V2)."""
    body = {
        "inputs": [{"name": "images", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}],
        "outputs": [{"name": "probabilities", "parameters": {"classification": k}}],
    }
    r = httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=60)
    r.raise_for_status()
    return np.array(r.json()["outputs"][0]["data"], dtype=object).reshape(len(x), k).tolist()


def v1_classify(url: str, model: str, x: np.ndarray | None = None, pngs: list[bytes] | None = None) -> list[dict]:
    """v1 classify's predictions for float images (JSON pixels) or PNG files (multipart), BATCH (32 files) at a time."""
    preds, n, step = [], len(x) if pngs is None else len(pngs), BATCH if pngs is None else 32
    with httpx.Client(timeout=120) as c:
        for i in range(0, n, step):
            if pngs is None:
                r = c.post(f"{url}/v1/models/{model}/classify", json={"images": x[i : i + step, 0].tolist()})
            else:
                files = [("files", (f"d{i + j}.png", b, "image/png")) for j, b in enumerate(pngs[i : i + step])]
                r = c.post(f"{url}/v1/models/{model}/classify", files=files)
            r.raise_for_status()
            preds += r.json()["predictions"]
    return preds


def official(a) -> dict:
    from training.digits.calibrate import ece
    from training.digits.idx import load_dataset
    from training.digits.outliers import synthetic
    from training.digits.reject import SEEDS

    from .serving import Server

    data = load_dataset(a.data_dir)
    items = load_dataset(a.items_dir, "fashion-mnist").test.images[: a.limit]
    x, y = images(data.test.images[: a.limit]), data.test.labels[: a.limit]
    srv = Server(a.models, "digits", env={"INR_THREADS": "2"}, capture=True).wait()
    try:
        url, model = srv.url, a.model
        meta = httpx.get(f"{url}/v1/models/{model}", timeout=30).json()
        rule = (meta.get("metadata") or meta).get("rejection")
        t0 = time.perf_counter()
        out = v2_outputs(url, model, x, ["probabilities"] + (["is_digit"] if rule else []))
        probs = out["probabilities"]
        result = {"machine": machine(), "models": str(a.models), "digits": len(y)}
        result |= {"v2_accuracy": share(probs.argmax(1) == y), "v2_seconds": round(time.perf_counter() - t0, 2)}
        result |= {"test_ece": round(ece(probs.astype(np.float64), y), 5)}
        result["threshold"] = rule["threshold"] if rule else None
        if rule:
            result["v2_false_rejections"] = share(out["is_digit"][:, 0] < rule["threshold"])
        labels = np.array([-1 if p["label"] is None else p["label"] for p in v1_classify(url, model, x)])
        result |= {"v1_accuracy": share(labels == y), "v1_null": share(labels == -1)}
        others = {"fashion_mnist_test": items, **synthetic(a.generated, SEEDS["test"])}
        for name, u8 in others.items():
            got = v1_classify(url, model, images(u8))
            result |= {f"{name}_null": share([p["label"] is None for p in got]), f"{name}_count": len(u8)}
        probe = np.concatenate([x[:4], images(items[:4])])
        result["classification_extension"] = v2_classes(url, model, probe)
    finally:
        srv.stop()
    version = max((p for p in (a.models / a.model).iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    sess, xb = ort_session((version / "model.onnx").read_bytes(), 1), images(data.test.images[:BATCH])
    result["cpu_one_thread"] = {  # onnxruntime on one thread, the model file alone: median µs per digit
        f"us_per_digit_b{b}": round(
            1e6 * median(time_calls(lambda: sess.run(None, {"images": xb[:b]}), 9, 1, 0.2)) / b, 1
        )
        for b in (1, BATCH)
    }
    return result


def redraw(digit: np.ndarray, rng: np.random.Generator) -> bytes:
    """uint8 [28, 28] white-on-black → a PNG page of random size, dark ink on slightly uneven light paper."""
    from PIL import Image

    page_w, page_h = int(rng.integers(120, 400)), int(rng.integers(120, 400))
    size = int(rng.integers(40, min(page_w, page_h) + 1))
    ink = Image.fromarray(digit).resize((size, size), Image.BICUBIC)
    page = np.full((page_h, page_w), rng.uniform(200, 255), np.float32) + rng.normal(0, 4, (page_h, page_w))
    x, y = int(rng.integers(0, page_w - size + 1)), int(rng.integers(0, page_h - size + 1))
    darkness = rng.uniform(0.75, 1.0)
    page[y : y + size, x : x + size] *= 1 - darkness * np.asarray(ink, np.float32) / 255.0
    buf = io.BytesIO()
    Image.fromarray(np.clip(page, 0, 255).astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def redrawn(a) -> dict:
    from training.digits.idx import load_dataset

    from .serving import Server

    test = load_dataset(a.data_dir).test
    digits, labels = test.images[: a.limit], test.labels[: a.limit]
    sess = ort_session(f"{a.models}/{a.model}/1/model.onnx", threads=1)
    raw = sess.run(["probabilities"], {"images": images(digits)})[0].argmax(1)
    rng = np.random.default_rng(a.seed)
    server = Server(a.models, "inr", {}).wait()
    try:
        meta = httpx.get(f"{server.url}/v1/models/{a.model}", timeout=10).json()
        preds = [p["label"] for p in v1_classify(server.url, a.model, pngs=[redraw(d, rng) for d in digits])]
    finally:
        server.stop()
    result = {"machine": machine(), "model": a.model, "status": meta.get("status"), "samples": len(labels)}
    return result | {"raw_accuracy": share(raw == labels), "redrawn_accuracy": share(np.asarray(preds) == labels)}


def validation_model(paths: list[Path], train_split, fp16: bool):
    """(model, validation slice) of one checkpoint or the logit mean of several, which must hold the same slice."""
    from training.digits.checkpoints import LogitMean, load_checkpoint
    from training.digits.validation import stratified_split
    from training.fp16 import round_weights_fp16

    loaded = [load_checkpoint(p) for p in paths]
    hashes = {info["validation"]["indices_sha256"] for _, _, info in loaded}
    if len(hashes) != 1:
        raise SystemExit(f"error: the checkpoints {', '.join(map(str, paths))} hold different validation slices")
    cfg = loaded[0][1]
    _, val, info = stratified_split(train_split, cfg.val_fraction, cfg.val_seed)
    if info["indices_sha256"] not in hashes:
        raise SystemExit(f"error: '{paths[0]}' was trained on other data than --data-dir (validation slice differs)")
    model = loaded[0][0] if len(loaded) == 1 else LogitMean([m for m, _, _ in loaded]).eval()
    return (round_weights_fp16(model) if fp16 else model), val, cfg


def threshold(a) -> dict:
    """Each share the detector may reject of the validation digits: its threshold, classify accuracy with a rejected
    digit counted wrong, and the share rejected of held-out Fashion-MNIST items and the validation seeds' pages."""
    import torch

    from training.digits.fit import predict_logits, to_tensor
    from training.digits.idx import load_dataset
    from training.digits.outliers import synthetic
    from training.digits.reject import SEEDS, load_detector, scores
    from training.fp16 import round_weights_fp16

    data, items = load_dataset(a.data_dir), load_dataset(a.items_dir, "fashion-mnist")
    model, val, _ = validation_model(a.checkpoint, data.train, fp16=True)
    right = predict_logits(model, to_tensor(val.images), torch.device("cpu")).argmax(1).numpy() == val.labels
    detector, info = load_detector(a.detector)
    digit = scores(round_weights_fp16(detector), val.images)
    others = {"items": items.train.images[-info["config"].get("items_held_out", 10_000) :]}
    other_scores = {k: scores(detector, v) for k, v in {**others, **synthetic(a.generated, SEEDS["val"])}.items()}
    rows = []
    for most in SHARES:
        t = float(np.sort(digit)[int(most * len(digit))])
        row = {"max_false_rejection": most, "threshold": round(t, 6), "digits_rejected": share(digit < t)}
        row |= {"classify_accuracy": share(right & (digit >= t))}
        rows.append(row | {f"{k}_rejected": share(s < t) for k, s in other_scores.items()})
        log.info("%s", rows[-1])
    result = {"machine": machine(), "detector": str(a.detector), "val_accuracy": share(right), "val_size": len(right)}
    return result | {"rows": rows}


def ablation(a) -> dict:
    """Each --row NAME=`fit-digits` options trained on the training digits less the validation slice."""
    from training.cli import build_parser
    from training.digits.checkpoints import save_checkpoint
    from training.digits.cli import fit_config
    from training.digits.fit import train
    from training.digits.idx import load_dataset

    data, result = load_dataset(a.data_dir), {"machine": machine(), "data_dir": a.data_dir, "rows": []}
    for spec in a.row:
        name, options = spec.split("=", 1)  # the options as `fit-digits` reads them
        o = build_parser().parse_args(["fit-digits", "--data-dir", a.data_dir, *shlex.split(options), "--no-progress"])
        cfg = fit_config(o, o.model, o.hidden, augment=o.augment, elastic=o.elastic)
        t0 = time.perf_counter()
        model, info = train(cfg, data)
        hist = info["history"]
        best = max(hist, key=lambda h: h["val_accuracy"])
        row = {"name": name, "options": options, "val_accuracy": hist[-1]["val_accuracy"]}
        row |= {"val_loss": hist[-1].get("val_loss"), "best_val_accuracy": best["val_accuracy"]}
        row |= {"best_epoch": best["epoch"], "seconds": round(time.perf_counter() - t0, 1)}
        row |= {"seconds_per_epoch": info["seconds_per_epoch"], "validation": info["validation"], "history": hist}
        result["rows"].append(row)
        if a.checkpoints:
            save_checkpoint(model, cfg, info, Path(a.checkpoints) / f"{name}.pt")
        log.info("%s: val %.4f (best %.4f at epoch %d)", name, row["val_accuracy"], best["val_accuracy"], best["epoch"])
        write_json(a.name, result, a.out_dir)  # after each row: a long sweep keeps what it finished
    return result


def ensembles(a) -> dict:
    """Each --candidate NAME=ckpt[,ckpt…] (one checkpoint or the logit mean that export-digits ships), scored on the
    validation slice: accuracy and NLL."""
    from training.digits.fit import evaluate
    from training.digits.idx import load_dataset

    data, result = load_dataset(a.data_dir), {"machine": machine(), "data_dir": a.data_dir, "candidates": []}
    for spec in a.candidate:
        name, _, files = spec.partition("=")
        paths = [Path(f) for f in files.split(",") if f]
        model, val, cfg = validation_model(paths, data.train, a.fp16_weights)
        got = evaluate(model, val)
        row = {"name": name, "checkpoints": [str(p) for p in paths], "members": len(paths), "val_seed": cfg.val_seed}
        row |= {"val_size": len(val.labels), "fp16_weights": a.fp16_weights}
        row |= {"val_accuracy": got["test_accuracy"], "val_loss": got["test_loss"]}
        result["candidates"].append(row)
        log.info("%s: val %.4f, NLL %.4f (%d members)", name, row["val_accuracy"], row["val_loss"], len(paths))
    return result


def paper_row(data, kind: str, model: str, width: int, lr: float, seed: int, a) -> dict:
    from training.digits.fit import FitConfig, evaluate, train
    from training.digits.models import DigitModelConfig, count_parameters

    grid, wd = GRID if model != "mlp" else 0, NOTEBOOK[model][1]
    net_cfg = DigitModelConfig(model=model, hidden=[width], grid_size=grid)
    cfg = FitConfig(epochs=a.epochs, lr=lr, weight_decay=wd, seed=seed, progress=False, model=net_cfg)
    t0 = time.perf_counter()
    net, info = train(cfg, data, keep_best=kind == "run")
    row = {"kind": kind, "model": model, "width": width, "grid": grid, "seed": seed, "lr": lr, "weight_decay": wd}
    row |= {"epochs": a.epochs, "train_size": info["validation"]["train_size"], "val_size": info["validation"]["size"]}
    row |= {"val_history": [h["val_accuracy"] for h in info["history"]], "val_accuracy": info["validation"]["accuracy"]}
    row |= {"epoch_kept": info["epoch_kept"], "parameters": count_parameters(net)}
    row |= {"seconds_per_epoch": info["seconds_per_epoch"], "seconds": round(time.perf_counter() - t0, 1)}
    if kind == "run":
        row["test_accuracy"] = evaluate(net, data.test)["test_accuracy"]  # the one look at the test split
        row["inference_us"] = inference_us(net, a)
    return row | {"machine": machine()}


def inference_us(model, a) -> dict:
    """µs per digit of the exported graph, median of timed calls: {"onnxruntime": {batch: µs}, "torch": {…}}."""
    import torch

    from training.digits.export import export_digits

    graph, onnx_bytes = export_digits(model)
    sess, out = ort_session(onnx_bytes, a.threads), {"onnxruntime": {}, "torch": {}}
    for b in a.batches:
        x = np.random.default_rng(0).random((b, 1, 28, 28), dtype=np.float32)
        with torch.inference_mode():
            for rt, fn in (
                ("onnxruntime", lambda: sess.run(None, {"images": x})),
                ("torch", lambda: graph(torch.from_numpy(x))),
            ):
                out[rt][str(b)] = 1e6 * median(time_calls(fn, repeats=5, min_seconds=a.timing_seconds)) / b
    return out


def paper(a) -> list[dict]:
    rows = read_rows(a.results)
    if a.what in ("lr", "run"):
        from training.digits.idx import Split, load_dataset

        data = load_dataset(a.data_dir)
        if a.train_limit:
            tr = data.train
            data = dataclasses.replace(data, train=Split(tr.images[: a.train_limit], tr.labels[: a.train_limit]))
        for seed, width, model in [(s, w, m) for s in a.seeds for w in a.widths for m in a.models]:
            if a.what == "lr":  # at --lr-width, seed 0: the notebooks' rate ×{½, 1, 2}
                if (seed, width) != (a.seeds[0], a.widths[0]):
                    continue
                seed, width, lrs = 0, a.lr_width, [NOTEBOOK[model][0] * f for f in (0.5, 1.0, 2.0)]
            else:  # the rate that scored best on the validation slice (the notebooks' if none ran)
                cands = [r for r in rows if r["kind"] == "lr" and r["model"] == model]
                lrs = [max(cands, key=lambda r: r["val_accuracy"])["lr"] if cands else NOTEBOOK[model][0]]
            for lr in lrs:
                key = (a.what, model, width, lr, seed, a.epochs)
                if any((r["kind"], r["model"], r["width"], r["lr"], r["seed"], r["epochs"]) == key for r in rows):
                    continue
                rows.append(paper_row(data, a.what, model, width, lr, seed, a))
                append_row(a.results, rows[-1])
                log.info("%s %s w%d lr %g seed %d: val %.4f", *key[:5], rows[-1]["val_accuracy"])
    elif a.what == "retime":  # fresh weights stand in: a graph's speed does not depend on them
        from training.digits.models import DigitClassifier, DigitModelConfig

        pairs = sorted({(r["model"], r["width"], r["grid"]) for r in rows if r["kind"] == "run"})
        nets = {p: DigitClassifier(DigitModelConfig(model=p[0], hidden=[p[1]], grid_size=p[2])).eval() for p in pairs}
        samples: dict = {p: [] for p in pairs}
        for _ in range(a.rounds):  # every pair in each round, interleaved
            for p in pairs:
                samples[p].append(inference_us(nets[p], a))
        for (model, width, grid), got in samples.items():
            us = {rt: {b: median([g[rt][b] for g in got]) for b in got[0][rt]} for rt in got[0]}
            row = {"kind": "timing", "model": model, "width": width, "grid": grid, "rounds": a.rounds}
            rows.append(row | {"inference_us": us, "rounds_us": got, "machine": machine()})
            append_row(a.results, rows[-1])
    summ = paper_summary(rows)
    if summ:
        log.info("\n%s", table_md(summ))
        if a.plot:
            paper_plot(summ, a.plot)
    return summ


def read_rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def append_row(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def paper_summary(rows: list[dict]) -> list[dict]:
    """Mean ± std over seeds per (model, width) of the `run` rows; timings from the last interleaved re-timing
    (its centre the median of its rounds) where there is one, else over the seeds' own."""
    groups: dict = {}
    for r in rows:
        if r["kind"] == "run":
            groups.setdefault((r["model"], r["width"]), []).append(r)
    out = []
    for (model, width), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], MODELS.index(kv[0][0]))):
        timed = [r for r in rows if r["kind"] == "timing" and (r["model"], r["width"]) == (model, width)]
        got = timed[-1]["rounds_us"] if timed else [r["inference_us"] for r in rs]
        us = {rt: {b: mean_std([g[rt][b] for g in got]) for b in got[0][rt]} for rt in got[0]}
        if timed:
            us = {rt: {b: (timed[-1]["inference_us"][rt][b], sd) for b, (_, sd) in v.items()} for rt, v in us.items()}
        s = {"model": model, "width": width, "seeds": len(rs), "lr": rs[0]["lr"], "weight_decay": rs[0]["weight_decay"]}
        s |= {"epochs": rs[0]["epochs"], "epoch_kept": [r["epoch_kept"] for r in rs], "parameters": rs[0]["parameters"]}
        s |= {
            "test": mean_std([100 * r["test_accuracy"] for r in rs]),
            "val": mean_std([100 * r["val_accuracy"] for r in rs]),
        }
        out.append(s | {"inference_us": us, "notebook": NOTEBOOK_ACCURACY.get(model, {}).get(width)})
    return out


def table_md(summ: list[dict]) -> str:
    batches = list(summ[0]["inference_us"]["onnxruntime"]) if summ else []
    lines = [
        "| model | width | params | lr | epochs kept | val % | test % (mean ± std) | notebooks' test % | "
        + " | ".join(f"ORT b{b} µs" for b in batches)
        + " |",
        "|---|---:|---:|---:|---|---:|---:|---:|" + "---:|" * len(batches),
    ]
    for s in summ:
        nb, t = f"{s['notebook']:.2f}" if s["notebook"] is not None else "–", s["inference_us"]["onnxruntime"]
        lines.append(
            f"| {s['model']} | {s['width']} | {s['parameters']:,} | {s['lr']:g} | "
            f"{','.join(map(str, s['epoch_kept']))} of {s['epochs']} | {s['val'][0]:.2f} ± {s['val'][1]:.2f} | "
            f"**{s['test'][0]:.2f} ± {s['test'][1]:.2f}** ({s['seeds']} seeds) | {nb} | "
            + " | ".join(f"{t[b][0]:.1f}" for b in batches)
            + " |"
        )
    return "\n".join(lines)


def paper_plot(summ: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for i, m in enumerate(MODELS):
        ss = [s for s in summ if s["model"] == m]
        if not ss:
            continue
        ax1.errorbar(
            *zip(*[(s["width"], *s["test"]) for s in ss]), marker="o", capsize=3, color=f"C{i}", label=f"{m} (here)"
        )
        nb = [(s["width"], s["notebook"]) for s in ss if s["notebook"] is not None]
        if nb:
            ax1.plot(*zip(*nb), ls="--", marker="x", color=f"C{i}", alpha=0.6, label=f"{m} (notebooks, 30 ep.)")
        mid = min(ss, key=lambda s: abs(s["width"] - 64))
        t = mid["inference_us"]["onnxruntime"]
        pts = [(int(b), *t[b]) for b in t]
        ax2.errorbar(*zip(*pts), marker="o", capsize=3, color=f"C{i}", label=f"{m} width {mid['width']}")
    for ax, x, y in (
        (ax1, "hidden width", "test accuracy (%), official 10,000"),
        (ax2, "batch size", "µs per digit, onnxruntime, 1 thread"),
    ):
        ax.set(xscale="log", xlabel=x, ylabel=y)
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    ax2.set_yscale("log")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def csv_ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def main(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(prog="python -m bench.digits", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--threads", type=int, default=1)
    shared.add_argument("--out-dir", type=Path, default=None, help="where NAME.json goes (bench/results)")
    cmds = {
        c: sub.add_parser(c, parents=[shared]) for c in ("official", "redrawn", "threshold", "ablation", "ensembles")
    }
    for c, p in cmds.items():
        p.add_argument("--data-dir", required=True)
        p.add_argument("--name", default=f"digits_{c}")
    for c in ("official", "threshold"):
        cmds[c].add_argument("--items-dir", required=True, help="Fashion-MNIST's IDX files")
        cmds[c].add_argument("--generated", type=int, default=1000, help="pages of each kind and letters")
    for c in ("official", "redrawn"):
        cmds[c].add_argument("--models", type=Path, default=ROOT / "models", help="a repository with a digits model")
        cmds[c].add_argument("--model", default="digits")
        cmds[c].add_argument("--limit", type=int, default=None, help="the first N test digits (and items) only")
    cmds["redrawn"].add_argument("--seed", type=int, default=0)
    cmds["threshold"].add_argument("--detector", type=Path, required=True)
    cmds["threshold"].add_argument("--checkpoint", type=Path, nargs="+", required=True)
    cmds["ablation"].add_argument("--row", action="append", required=True, help="NAME=fit-digits options")
    cmds["ablation"].add_argument("--checkpoints", default=None, help="directory for NAME.pt checkpoints")
    cmds["ensembles"].add_argument("--candidate", action="append", required=True, help="NAME=ckpt[,ckpt...]")
    cmds["ensembles"].add_argument("--fp16-weights", action="store_true", help="weights rounded to float16")
    p = sub.add_parser("paper", parents=[shared])
    p.add_argument("what", choices=("lr", "run", "retime", "report"))
    p.add_argument("--data-dir")
    p.add_argument("--results", type=Path, default=RESULTS / "digits_paper.jsonl")
    p.add_argument("--models", type=lambda s: [m for m in s.split(",") if m], default=list(MODELS))
    p.add_argument("--widths", type=csv_ints, default=[16, 64, 256])
    p.add_argument("--lr-width", type=int, default=64)
    p.add_argument("--seeds", type=csv_ints, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batches", type=csv_ints, default=[1, 16, 64, 256, 1024])
    p.add_argument("--train-limit", type=int, default=None, help="first N training digits only (tests)")
    p.add_argument("--timing-seconds", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=5, help="retime: interleaved rounds")
    p.add_argument("--plot", type=Path, default=None)
    a = ap.parse_args(argv)
    common.setup_logging()
    common.set_threads(a.threads)
    if a.command == "paper":
        if a.what in ("lr", "run") and not a.data_dir:
            p.error("--data-dir is needed to train")
        return paper(a)
    result = COMMANDS[a.command](a)
    log.info("%s", {k: v for k, v in result.items() if k not in ("machine", "classification_extension", "rows")})
    write_json(a.name, result, a.out_dir)
    return result


COMMANDS = {"official": official, "redrawn": redrawn, "threshold": threshold, "ablation": ablation}
COMMANDS |= {"ensembles": ensembles}

if __name__ == "__main__":
    main()
