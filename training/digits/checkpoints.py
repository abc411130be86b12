"""Save a trained digit model as a torch checkpoint, and export one (or the logit mean of several
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

from ..errors import UsageError
from .compact import round_weights_fp16
from .fit import FitConfig, checkpoint, evaluate, export_digit_model, rebuild
from .idx import DigitData
from .models import DigitModelConfig
from .validation import stratified_split


def save_checkpoint(model, cfg: FitConfig, info: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({**checkpoint(model, cfg), "info": info}, tmp)
    tmp.replace(path)


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


def export_checkpoint(paths: list[Path], data: DigitData, out: Path, fp16_weights: bool = False) -> dict:
    """Export one checkpoint, or the logit mean of several trained with one recipe and validation slice
    (different seeds). The validation accuracy is the exported model's (with `fp16_weights`: the model
    with its weights rounded to float16, as the file stores them); the test split is read once."""
    loaded = [load_checkpoint(p) for p in paths]
    _, cfg, info = loaded[0]
    for p, (_, other, other_info) in zip(paths[1:], loaded[1:]):
        same = {**asdict(other), "seed": cfg.seed} == asdict(cfg) and other_info["validation"]["indices_sha256"] \
            == info["validation"]["indices_sha256"]
        if not same:
            raise UsageError(f"checkpoint '{p}' has another recipe or validation slice than '{paths[0]}'")
    model = loaded[0][0] if len(loaded) == 1 else LogitMean([m for m, _, _ in loaded]).eval()
    if fp16_weights:
        round_weights_fp16(model)
    _, val, _ = stratified_split(data.train, cfg.val_fraction, cfg.val_seed)
    val_accuracy = evaluate(model, val)["test_accuracy"]
    metrics = evaluate(model, data.test)  # the one look at the test split
    metrics["val_accuracy"] = val_accuracy
    metrics["members"] = [{"checkpoint": str(p), "seed": c.seed, "val_accuracy": i["validation"]["accuracy"]}
                          for p, (_, c, i) in zip(paths, loaded)]
    metrics["train_accuracy_last_epoch"] = info["history"][-1]["train_accuracy"]
    return export_digit_model(model, cfg, data, out, metrics, {**info, "checkpoints": [str(p) for p in paths]},
                              ensemble=len(loaded), fp16_weights=fp16_weights)
