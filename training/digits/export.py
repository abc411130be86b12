"""A digit classifier into the model repository: the ONNX graph (logits and probabilities, the normalisation
inside), its parity with torch on the test split, its metadata; and `fit_digits`, train → score → export."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from ..export import ExportParityError, export_onnx, ort_session
from ..repository import TensorSpec, write_model_dir
from .fit import MAX_BATCH, PARITY_ATOL, FitConfig, checkpoint, evaluate, rebuild, save_checkpoint, to_tensor, train
from .idx import CLASS_NAMES, DigitData
from .models import WithProbabilities, count_parameters

log = logging.getLogger(__name__)


def output_names(detector: torch.nn.Module | None) -> list[str]:
    return ["logits", "probabilities"] + (["is_digit"] if detector is not None else [])


def export_digits(
    model: torch.nn.Module, temperature: float = 1.0, detector: torch.nn.Module | None = None
) -> tuple[WithProbabilities, bytes]:
    graph = WithProbabilities(model, temperature, detector).eval()
    return graph, export_onnx(graph, torch.rand(2, 1, 28, 28), "images", output_names(detector))


def check_digits_parity(graph: WithProbabilities, onnx_bytes: bytes, images: np.ndarray) -> dict:
    """torch vs onnxruntime on `images` (float32 [N,1,28,28]): same argmax, |Δp| ≤ 1e-5 (and |Δ is_digit|)."""
    names = output_names(graph.detector)
    with torch.no_grad():
        want = [t.numpy() for t in graph(torch.from_numpy(images))]
    sess = ort_session(onnx_bytes)
    runs = [sess.run(names, {"images": images[i : i + MAX_BATCH]}) for i in range(0, len(images), MAX_BATCH)]
    got = [np.concatenate([r[k] for r in runs]) for k in range(len(names))]
    probs, got_p = want[1], got[1]
    report = {
        "samples": len(images),
        "max_abs_diff_probabilities": float(np.max(np.abs(probs - got_p))),
        "max_abs_diff_logits": float(np.max(np.abs(want[0] - got[0]))),
        "argmax_mismatches": int(np.sum(probs.argmax(1) != got_p.argmax(1))),
    }
    if graph.detector is not None:
        report["max_abs_diff_is_digit"] = float(np.max(np.abs(want[2] - got[2])))
    worst = max(report["max_abs_diff_probabilities"], report.get("max_abs_diff_is_digit", 0.0))
    if report["argmax_mismatches"] or not worst <= PARITY_ATOL:
        raise ExportParityError(f"onnxruntime differs from torch on the test split: {report}")
    log.info("export parity: %s", report)
    return report


SELECTED = (
    "hyperparameters chosen on the validation slice (training.validation); the test split is "
    "evaluated once, after training"
)


def export_digit_model(
    model: torch.nn.Module,
    cfg: FitConfig,
    data: DigitData,
    out: Path,
    metrics: dict,
    info: dict,
    ensemble: int = 1,
    fp16_weights: bool = False,
    selection: str = SELECTED,
    calibration: dict | None = None,
    detector: torch.nn.Module | None = None,
    rejection: dict | None = None,
) -> dict:
    """`ensemble` > 1: `model` averages the logits of that many members trained with `cfg` but for the seed.
    `fp16_weights`: `model`'s weights (and the detector's) are already rounded to float16
    (training.fp16.round_weights_fp16, before they were scored); the file stores them as float16.
    `calibration` (training.digits.calibrate: its `temperature` divides the logits in the graph) and
    `rejection` (training.digits.reject, with `detector`: the graph's is_digit output and its `threshold`)
    go into the metadata, where the service reads them."""
    temperature = (calibration or {}).get("temperature", 1.0)
    graph, onnx_bytes = export_digits(model, temperature, detector)
    storage = {"weights": "float32"}
    if fp16_weights:
        from ..fp16 import store_weights_fp16

        onnx_bytes, storage = store_weights_fp16(onnx_bytes)
    parity = check_digits_parity(graph, onnx_bytes, to_tensor(data.test.images).numpy())
    arch = cfg.model.to_dict()
    what = f"{cfg.model.model} {cfg.model.dims}" + (f" x{ensemble} (mean of logits)" if ensemble > 1 else "")
    meta = {
        "description": f"{what} digit classifier trained on {data.name}",
        "architecture": {**arch, "parameters": count_parameters(model), "ensemble": ensemble},
        "dataset": {**data.describe(), "classes": CLASS_NAMES[data.name]},
        "preprocessing": "images in [0,1], white on black; the graph maps them to [-1,1]",
        "metrics": metrics,
        "training": {
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "optimizer": "AdamW",
            "lr": cfg.lr,
            "weight_decay": cfg.weight_decay,
            "schedule": cfg.schedule,
            "lr_decay_per_epoch": cfg.gamma,
            "augment": cfg.augment,
            "elastic": cfg.elastic,
            "distort_share": cfg.distort_share,
            "elastic_alpha_px": cfg.elastic_alpha,
            "elastic_sigma_px": cfg.elastic_sigma,
            "label_smoothing": cfg.label_smoothing,
            "ema": cfg.ema,
            "seed": cfg.seed,
            **info,
        },
        "selection": selection,
        "export": {"opset": 17, "parity": parity, **storage},
    }
    if calibration is not None:
        meta["calibration"] = calibration
    if rejection is not None:
        meta["rejection"] = rejection
    outputs = [TensorSpec("logits", "FP32", [-1, 10]), TensorSpec("probabilities", "FP32", [-1, 10])]
    if detector is not None:
        outputs.append(TensorSpec("is_digit", "FP32", [-1, 1]))
    return write_model_dir(
        out,
        task="digits",
        onnx_bytes=onnx_bytes,
        inputs=[TensorSpec("images", "FP32", [-1, 1, 28, 28])],
        outputs=outputs,
        metadata=meta,
        max_batch_size=MAX_BATCH,
        dynamic_batching_us=2000,
    )


def fit_digits(cfg: FitConfig, data: DigitData, out: Path | None, checkpoint_path: Path | None = None) -> dict:
    cfg.validate()
    model, info = train(cfg, data)
    if checkpoint_path is not None:
        save_checkpoint(model, cfg, info, checkpoint_path)
    model = rebuild(checkpoint(model, cfg))  # export what a checkpoint restores
    metrics = evaluate(model, data.test)  # the one look at the test split
    metrics["val_accuracy"] = None if cfg.refit else info["validation"]["accuracy"]
    metrics["train_accuracy_last_epoch"] = info["history"][-1]["train_accuracy"]
    if out is None:
        return {"metrics": metrics}
    selection = (
        SELECTED
        if not cfg.refit
        else (
            "refit on all training digits, the validation slice included, so it has no validation score "
            "of its own (metrics.val_accuracy is null); the test split is evaluated once, after training"
        )
    )
    return export_digit_model(model, cfg, data, out, metrics, info, selection=selection)
