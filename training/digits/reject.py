"""A "not a digit" detector to ship beside a digit classifier, and its threshold.

The detector is a small SineKAN, [784, 32, 1] at grid 2, trained (binary cross-entropy) to tell the training
digits from what is not a digit (training.digits.outliers): another data set's items (Fashion-MNIST's train
split but its last 10,000) and generated pages and letters. Its threshold is chosen on validation only: the
digit classifier's validation slice of the training digits (the same stratified slice), the last 10,000 items
of the other data set's train split and pages and letters of seeds used nowhere else. The threshold is the
highest that rejects at most `max_false_rejection` of the validation digits. The test splits are read once,
at export, to report the rates (`measure`).
"""

from __future__ import annotations

import math
import pickle
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import UsageError
from .augment import distort
from .fit import EVAL_CHUNK, to_tensor
from .idx import DigitData
from .models import DigitClassifier, DigitModelConfig
from .outliers import synthetic
from .validation import stratified_split

SEEDS = {"train": 1000, "val": 2000, "test": 3000}  # the generated pages and letters of each role


@dataclass
class DetectorConfig:
    hidden: int = 32
    grid: int = 2
    epochs: int = 2
    batch_size: int = 128
    lr: float = 2e-3
    seed: int = 0
    generated: int = 4000  # per page kind and of letters, for training (a quarter as many for validation)
    max_false_rejection: float = 0.005  # of the validation digits
    val_fraction: float = 0.1  # the digit classifier's slice (fit-digits defaults)
    val_seed: int = 0
    items_held_out: int = 10_000  # the last items of the other data set's train split: the threshold's validation

    def model(self) -> DigitModelConfig:
        return DigitModelConfig(model="sinekan", hidden=[self.hidden], grid_size=self.grid, num_classes=1)


def stack(sets: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate(list(sets.values()))


@torch.no_grad()
def scores(detector: torch.nn.Module, images: np.ndarray) -> np.ndarray:
    """P(digit) per uint8 image [N, 28, 28]."""
    detector.eval()
    x = to_tensor(images)
    out = [torch.sigmoid(detector(x[i : i + EVAL_CHUNK]))[:, 0] for i in range(0, len(x), EVAL_CHUNK)]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def rates(detector: torch.nn.Module, threshold: float, digits: np.ndarray, others: dict[str, np.ndarray]) -> dict:
    """The share of digits rejected (false rejections) and of each other set rejected."""
    out = {"digits_rejected": round(float((scores(detector, digits) < threshold).mean()), 5), "digits": len(digits)}
    for name, images in others.items():
        out[f"{name}_rejected"] = round(float((scores(detector, images) < threshold).mean()), 5)
    return out


def train_detector(digits: DigitData, items: DigitData, cfg: DetectorConfig) -> tuple[DigitClassifier, dict]:
    """Train on the digits minus the validation slice against the items minus their last 10,000 and generated
    pages and letters; choose the threshold on the held-out parts."""
    held = cfg.items_held_out
    if len(items.train.images) <= held:
        raise UsageError(f"the other data set needs more than {held} training images, it has {len(items.train.images)}")
    torch.manual_seed(cfg.seed)
    train_digits, val_digits, val_info = stratified_split(digits.train, cfg.val_fraction, cfg.val_seed)
    negatives = np.concatenate([items.train.images[:-held], stack(synthetic(cfg.generated, SEEDS["train"]))])
    x = to_tensor(np.concatenate([train_digits.images, negatives]))
    y = torch.cat([torch.ones(len(train_digits.images)), torch.zeros(len(negatives))])
    model = DigitClassifier(cfg.model())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    steps = cfg.epochs * math.ceil(len(x) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    gen = torch.Generator().manual_seed(cfg.seed)
    for _ in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            xb = distort(x[idx], gen, affine=True)  # drawn digits are not centred like MNIST's
            loss = F.binary_cross_entropy_with_logits(model(xb)[:, 0], y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    val_scores = scores(model, val_digits.images)
    threshold = float(np.sort(val_scores)[int(cfg.max_false_rejection * len(val_scores))])  # rejects ≤ that share
    val_sets = {"items": items.train.images[-held:], **synthetic(cfg.generated // 4, SEEDS["val"])}
    info = {
        "config": asdict(cfg),
        "threshold": threshold,
        "validation": {"rates": rates(model, threshold, val_digits.images, val_sets), "slice": val_info},
        "items": items.name,
    }
    return model, info


def measure(detector: torch.nn.Module, threshold: float, digits: DigitData, items: DigitData, n: int) -> dict:
    """The test rates: the official test digits, the other data set's test split, pages and letters of the test
    seeds (n of each)."""
    return rates(detector, threshold, digits.test.images, {"items": items.test.images, **synthetic(n, SEEDS["test"])})


def save_detector(model: torch.nn.Module, info: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"model_args": model.cfg.to_dict(), "state_dict": model.state_dict(), "info": info}, tmp)
    tmp.replace(path)


def load_detector(path: Path) -> tuple[DigitClassifier, dict]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        model = DigitClassifier(DigitModelConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["state_dict"])
        info = ckpt["info"]
        float(info["threshold"])
    except (OSError, KeyError, TypeError, RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"cannot read digit detector '{path}': {first}") from None
    if model.cfg.num_classes != 1:
        raise UsageError(f"'{path}' is not a digit detector (it has {model.cfg.num_classes} outputs, not 1)")
    return model.eval(), info
