"""Load digit checkpoints (`fit.save_checkpoint` writes them) and export one (or the logit mean of several
seeds of one recipe) to the model repository later.

A checkpoint holds what `fit.rebuild` needs (constructor args, weights), the whole training
config and the training history, so an export from it writes the same metadata as the fit
that made it, with the test split evaluated once, at export.
"""

from __future__ import annotations

import pickle
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from modelrepo import portable

from ..errors import UsageError
from ..fp16 import round_weights_fp16
from .export import export_digit_model
from .fit import FitConfig, evaluate, rebuild, save_checkpoint  # noqa: F401 - save: re-exported
from .idx import DigitData
from .models import DigitModelConfig
from .validation import stratified_split


def load_checkpoint(path: Path) -> tuple[torch.nn.Module, FitConfig, dict]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        fit = dict(ckpt["fit"])
        fit["model"] = DigitModelConfig(**fit["model"])
        return rebuild(ckpt), FitConfig(**fit), ckpt["info"]
    except (OSError, KeyError, TypeError, RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"cannot read digit checkpoint '{path}': {first}") from None


class LogitMean(nn.Module):
    """Members' logits, averaged: one graph, one input, the same outputs as a single model."""

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(images) for m in self.members]).mean(0)


def recipe(cfg: FitConfig) -> dict:
    """What members of one ensemble share: the whole config but the seed (and whether it is a refit)."""
    return {**asdict(cfg), "seed": None, "refit": None}


def check_same_recipe(paths: list[Path], loaded: list, first: tuple) -> None:
    _, cfg, info = first
    for p, (_, other, other_info) in zip(paths, loaded):
        if (
            recipe(other) != recipe(cfg)
            or other_info["validation"]["indices_sha256"] != info["validation"]["indices_sha256"]
        ):
            raise UsageError(f"checkpoint '{p}' has another recipe or validation slice than the first checkpoint")


def ensemble(loaded: list, fp16_weights: bool) -> nn.Module:
    model = loaded[0][0] if len(loaded) == 1 else LogitMean([m for m, _, _ in loaded]).eval()
    return round_weights_fp16(model) if fp16_weights else model


def members(paths: list[Path], loaded: list) -> list[dict]:
    return [
        {"checkpoint": portable(p), "seed": c.seed, "val_accuracy": None if c.refit else i["validation"]["accuracy"]}
        for p, (_, c, i) in zip(paths, loaded)
    ]


CHOSEN = (
    "recipe chosen on the validation slice (training.validation): metrics.val_accuracy is the logit mean "
    "of the held-out checkpoints in metrics.chosen_with, trained on the other {held} digits; the shipped "
    "members are the same recipe refit on all {all} training digits, slice included (no validation score "
    "of their own); the test split is evaluated once, at export"
)


def calibrate(model: nn.Module, val, test) -> dict:
    """The temperature fitted on the validation slice, with NLL and ECE there and on the test split."""
    from .calibrate import fit_temperature, report
    from .fit import predict_logits, to_tensor

    cpu = torch.device("cpu")
    val_logits = predict_logits(model, to_tensor(val.images), cpu).numpy()
    temperature = fit_temperature(val_logits, val.labels)
    test_logits = predict_logits(model, to_tensor(test.images), cpu).numpy()
    return {
        "method": "temperature scaling, fitted on the validation slice (NLL); ECE with 15 equal-width bins",
        "temperature": round(temperature, 5),
        "validation": report(val_logits, val.labels, temperature),
        "test": report(test_logits, test.labels, temperature),
    }


def rejection(detector_path: Path, data: DigitData, items: DigitData, fp16_weights: bool) -> tuple[nn.Module, dict]:
    """The detector (rounded like the classifier) and what the metadata says of it: the threshold chosen on
    validation, its validation rates, and its rates on the test splits (read here, once)."""
    from .reject import load_detector, measure

    detector, info = load_detector(detector_path)
    if fp16_weights:
        detector = round_weights_fp16(detector)
    threshold = float(info["threshold"])
    return detector, {
        "output": "is_digit",
        "threshold": round(threshold, 6),
        "rule": "an image whose is_digit is below the threshold is not a digit (label null)",
        "chosen_on": "validation: the classifier's slice of the training digits, the last 10,000 items of "
        f"{info['items']}'s train split, generated pages and letters (training.digits.reject)",
        "detector": {"checkpoint": portable(detector_path), **info["config"]},
        "validation": info["validation"]["rates"],
        "test": measure(detector, threshold, data, items, n=1000),
    }


def export_checkpoint(
    paths: list[Path],
    data: DigitData,
    out: Path,
    fp16_weights: bool = False,
    chosen_with: list[Path] | None = None,
    calibrated: bool = False,
    detector: Path | None = None,
    items: DigitData | None = None,
) -> dict:
    """Export one checkpoint, or the logit mean of several trained with one recipe and validation slice
    (different seeds). The validation accuracy is the exported model's (with `fp16_weights`: the model
    with its weights rounded to float16, as the file stores them); the test split is read once.

    Refit checkpoints (`fit-digits --refit`) saw the slice, so they need `chosen_with`: the held-out
    checkpoints of the same recipe that it was chosen with; their logit mean's validation accuracy is
    the one the metadata reports.

    `calibrated`: fit a temperature on the validation slice (not for refits: they saw it). `detector` (a
    fit-digit-detector checkpoint) with `items` (the other data set it was trained against): ship it in the
    graph (is_digit) with its threshold."""
    loaded = [load_checkpoint(p) for p in paths]
    check_same_recipe(paths, loaded, loaded[0])
    cfg, info = loaded[0][1], loaded[0][2]
    if cfg.refit and not chosen_with:
        raise UsageError(
            "refit checkpoints have no validation score of their own: give --chosen-with the "
            "held-out checkpoints the recipe was chosen with"
        )
    if chosen_with and not cfg.refit:
        raise UsageError("--chosen-with is for refit checkpoints (fit-digits --refit)")
    if calibrated and cfg.refit:
        raise UsageError("--calibrate needs held-out checkpoints: refit ones saw the validation slice")
    if detector is not None and items is None:
        raise UsageError("--detector needs --outliers-dir, the images it was trained to reject")
    _, val, _ = stratified_split(data.train, cfg.val_fraction, cfg.val_seed)
    metrics: dict = {}
    if chosen_with:
        held = [load_checkpoint(p) for p in chosen_with]
        check_same_recipe(chosen_with, held, loaded[0])
        bad = [p for p, (_, c, _) in zip(chosen_with, held) if c.refit]
        if bad:
            raise UsageError(f"--chosen-with checkpoint '{bad[0]}' is a refit; it saw the validation slice")
        metrics["chosen_with"] = members(chosen_with, held)
        val_accuracy = evaluate(ensemble(held, fp16_weights), val)["test_accuracy"]
    model = ensemble(loaded, fp16_weights)
    if not chosen_with:
        val_accuracy = evaluate(model, val)["test_accuracy"]
    metrics = {**evaluate(model, data.test), **metrics}  # the one look at the test split
    metrics["val_accuracy"] = val_accuracy
    metrics["members"] = members(paths, loaded)
    metrics["train_accuracy_last_epoch"] = info["history"][-1]["train_accuracy"]
    info, kw = {**info, "checkpoints": [portable(p) for p in paths]}, {}
    if calibrated:
        kw["calibration"] = calibrate(model, val, data.test)
    if detector is not None:
        kw["detector"], kw["rejection"] = rejection(detector, data, items, fp16_weights)
    if chosen_with:
        kw["selection"] = CHOSEN.format(held=len(data.train.labels) - len(val.labels), all=len(data.train.labels))
        info["validation"] = {
            **info["validation"],
            "accuracy": val_accuracy,
            "accuracy_of": "the held-out logit mean (metrics.chosen_with)",
            "refit_member_score_on_seen_slice": info["validation"]["accuracy"],
        }
        info["history_note"] = "first member's curve; its val_accuracy is on the slice it trained on (refit)"
    return export_digit_model(
        model, cfg, data, out, metrics, info, ensemble=len(loaded), fp16_weights=fp16_weights, **kw
    )
