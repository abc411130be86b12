"""Train a digit classifier on IDX data and export it to the model repository.

Protocol (SineKAN paper, MNIST): inputs normalised to [−1, 1] (inside the model), batch 64,
AdamW, cross-entropy; the LR decays by γ = 0.9 per epoch unless another schedule is asked for.
A stratified, seeded slice of the training digits is held out for validation: each epoch is
scored on it, and the test split is evaluated once, after the last epoch.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..device import pick_device
from ..errors import UsageError
from .augment import AUG_PROB, ELASTIC_ALPHA_PX, ELASTIC_SIGMA_PX, distort, random_affine  # noqa: F401
from .idx import DigitData, Split
from .models import DigitClassifier, DigitModelConfig
from .validation import check_fraction, stratified_split

log = logging.getLogger(__name__)
EVAL_CHUNK = 1024
MAX_BATCH = 256
PARITY_ATOL = 1e-5
SCHEDULES = ("exponential", "cosine", "onecycle")


@dataclass
class FitConfig:
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    gamma: float = 0.9  # LR multiplier per epoch (ExponentialLR)
    augment: bool = False  # random affine on half of each batch
    elastic: bool = False  # elastic distortion (Simard et al. 2003) on that half
    distort_share: float = AUG_PROB  # share of each batch that the distortions above resample
    elastic_alpha: float = ELASTIC_ALPHA_PX  # elastic: displacement scale α, px
    elastic_sigma: float = ELASTIC_SIGMA_PX  # elastic: smoothing σ of the displacement field, px
    schedule: str = "exponential"  # exponential (× gamma per epoch) | cosine | onecycle (per step)
    label_smoothing: float = 0.0
    ema: float = 0.0  # decay of an exponential moving average of the weights; 0 = off
    val_fraction: float = 0.1  # stratified validation slice of the training digits
    val_seed: int = 0  # draws that slice (fixed across training seeds)
    refit: bool = False  # train on the slice too: the final fit of a recipe chosen on it
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    model: DigitModelConfig = field(default_factory=DigitModelConfig)

    def validate(self) -> None:
        if not 1 <= self.epochs <= 10_000:
            raise UsageError(f"--epochs must be in 1..10000, got {self.epochs}")
        if not 1 <= self.batch_size <= 1_000_000:
            raise UsageError(f"--batch-size must be a positive integer, got {self.batch_size}")
        for name, v in (("--lr", self.lr), ("--gamma", self.gamma)):
            if not (v > 0 and math.isfinite(v)):
                raise UsageError(f"{name} must be a positive finite number, got {v}")
        for name, v in (("--elastic-alpha", self.elastic_alpha), ("--elastic-sigma", self.elastic_sigma)):
            if not (0 < v <= 100 and math.isfinite(v)):
                raise UsageError(f"{name} must be a distance in pixels in (0, 100], got {v}")
        if not (0.0 < self.distort_share <= 1.0):
            raise UsageError(f"--distort-share must be in (0, 1], got {self.distort_share}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise UsageError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"unknown schedule '{self.schedule}'; valid: {', '.join(SCHEDULES)}")
        if not (0.0 <= self.label_smoothing < 1.0):
            raise UsageError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        if not (0.0 <= self.ema < 1.0):
            raise UsageError(f"--ema must be a decay in [0, 1) (0 = off), got {self.ema}")
        check_fraction(self.val_fraction)


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, 28, 28] → float32 [N, 1, 28, 28] in [0, 1]: the exported model's input."""
    return torch.from_numpy(images).float().div_(255.0).unsqueeze(1)


@torch.no_grad()
def predict_logits(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    model.eval()
    out = [model(x[i : i + EVAL_CHUNK].to(device)).cpu() for i in range(0, len(x), EVAL_CHUNK)]
    return torch.cat(out)


def confusion_matrix(labels: np.ndarray, pred: np.ndarray, n: int = 10) -> np.ndarray:
    """Rows: true class; columns: predicted class."""
    return np.bincount(labels * n + pred, minlength=n * n).reshape(n, n)


def evaluate(model: torch.nn.Module, split: Split, device: torch.device | None = None) -> dict:
    device = device or torch.device("cpu")
    logits = predict_logits(model, to_tensor(split.images), device)
    labels = torch.from_numpy(split.labels)
    pred = logits.argmax(1).numpy()
    return {
        "test_accuracy": round(float((pred == split.labels).mean()), 5),
        "test_loss": round(float(F.cross_entropy(logits, labels)), 5),
        "confusion_matrix": confusion_matrix(split.labels, pred).tolist(),
    }


def make_schedule(cfg: FitConfig, opt: torch.optim.Optimizer, steps_per_epoch: int):
    """(scheduler, steps it per batch?): ExponentialLR per epoch, cosine / one-cycle per batch."""
    total = cfg.epochs * steps_per_epoch
    if cfg.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total), True
    if cfg.schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total), True
    return torch.optim.lr_scheduler.ExponentialLR(opt, gamma=cfg.gamma), False


def train(cfg: FitConfig, data: DigitData, on_epoch=None, keep_best: bool = False) -> tuple[DigitClassifier, dict]:
    """Train for cfg.epochs on the training digits minus the validation slice (with `refit`: on all of
    them, so the per-epoch score on the slice is on seen digits); score every epoch on that slice.
    Return the model (the weight average with `ema`; CPU, eval mode) and its history; with `keep_best`,
    the weights of the epoch that scored best on the slice (the number of epochs chosen on validation)."""
    cfg.validate()
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    train_split, val_split, val_info = stratified_split(data.train, cfg.val_fraction, cfg.val_seed)
    if cfg.refit:
        train_split = data.train
        val_info = {**val_info, "refit": True, "train_size": len(train_split.labels)}
    model = DigitClassifier(cfg.model).to(device)
    average = (
        torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(cfg.ema))
        if cfg.ema
        else None
    )
    x, y = to_tensor(train_split.images).to(device), torch.from_numpy(train_split.labels).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched, per_step = make_schedule(cfg, opt, math.ceil(len(x) / cfg.batch_size))
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    history, epoch_seconds, best = [], [], (-1.0, 0, None)
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        order = torch.randperm(len(x), generator=gen, device=device)
        bar = tqdm(
            range(0, len(x), cfg.batch_size),
            disable=not cfg.progress,
            unit="batch",
            leave=True,
            desc=f"epoch {epoch}/{cfg.epochs}",
            mininterval=0.5,
        )
        t0 = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        for i in bar:
            idx = order[i : i + cfg.batch_size]
            xb, yb = x[idx], y[idx]
            if cfg.augment or cfg.elastic:
                xb = distort(
                    xb,
                    gen,
                    affine=cfg.augment,
                    elastic=cfg.elastic,
                    p=cfg.distort_share,
                    alpha=cfg.elastic_alpha,
                    sigma=cfg.elastic_sigma,
                )
            logits = model(xb)
            loss = F.cross_entropy(logits, yb, label_smoothing=cfg.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if average is not None:
                average.update_parameters(model)
            if per_step:
                sched.step()
            loss_sum += loss.item() * len(idx)
            correct += int((logits.argmax(1) == yb).sum())
            seen += len(idx)
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}", acc=f"{correct / seen:.4f}", refresh=False)
        if not per_step:
            sched.step()
        epoch_seconds.append(time.perf_counter() - t0)
        if not math.isfinite(loss_sum):
            raise UsageError(f"training diverged at epoch {epoch} (loss {loss_sum}); try a smaller --lr")
        scored = average.module if average is not None else model
        val = evaluate(scored, val_split, device)
        row = {
            "epoch": epoch,
            "train_loss": round(loss_sum / seen, 5),
            "train_accuracy": round(correct / seen, 5),
            "val_accuracy": val["test_accuracy"],
            "val_loss": val["test_loss"],
            "seconds": round(epoch_seconds[-1], 3),
        }
        history.append(row)
        if keep_best and row["val_accuracy"] > best[0]:
            best = (row["val_accuracy"], epoch, {k: v.detach().clone() for k, v in scored.state_dict().items()})
        bar.set_postfix(
            loss=f"{row['train_loss']:.4f}", acc=f"{row['train_accuracy']:.4f}", val_acc=f"{row['val_accuracy']:.4f}"
        )
        bar.close()
        log.info("epoch %d: %s", epoch, row)
        if on_epoch is not None:
            on_epoch(row)
    final = average.module if average is not None else model
    if keep_best:
        final.load_state_dict(best[2])
    info = {
        "train_seconds": round(sum(epoch_seconds), 3),
        "seconds_per_epoch": round(float(np.median(epoch_seconds)), 3),
        "device": str(device),
        "validation": {**val_info, "accuracy": best[0] if keep_best else history[-1]["val_accuracy"]},
        "epoch_kept": best[1] if keep_best else cfg.epochs,
        "history": history,
    }
    return final.cpu().eval(), info


def checkpoint(model: DigitClassifier, cfg: FitConfig) -> dict:
    """What export needs to rebuild the module: constructor args plus weights."""
    return {"model_args": cfg.model.to_dict(), "state_dict": model.state_dict(), "fit": asdict(cfg)}


def rebuild(ckpt: dict) -> DigitClassifier:
    model = DigitClassifier(DigitModelConfig(**ckpt["model_args"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def save_checkpoint(model: torch.nn.Module, cfg: FitConfig, info: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({**checkpoint(model, cfg), "info": info}, tmp)
    tmp.replace(path)
