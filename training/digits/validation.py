"""A stratified, seeded validation slice of the training digits.

Hyperparameters are chosen on it; the test split is evaluated once, at the end of a fit.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import UsageError
from .idx import Split


def check_fraction(fraction: float) -> None:
    if not (0.0 < fraction < 1.0):
        raise UsageError(f"--val-fraction must be in (0, 1), got {fraction}")


def stratified_split(split: Split, fraction: float, seed: int) -> tuple[Split, Split, dict]:
    """(train, validation, description): round(fraction · n_c) digits of each class c, drawn with
    `seed`, go to validation (at least one per class present, and at least one left to train on)."""
    check_fraction(fraction)
    rng = np.random.default_rng(seed)
    val_idx = []
    for c in np.unique(split.labels):
        members = np.flatnonzero(split.labels == c)
        if len(members) < 2:
            raise UsageError(f"class {c} has {len(members)} training digit(s); a validation split needs >= 2")
        k = min(max(1, int(round(fraction * len(members)))), len(members) - 1)
        val_idx.append(rng.choice(members, size=k, replace=False))
    val = np.sort(np.concatenate(val_idx))
    keep = np.ones(len(split.labels), bool)
    keep[val] = False
    train_part = Split(images=split.images[keep], labels=split.labels[keep])
    val_part = Split(images=split.images[val], labels=split.labels[val])
    info = {
        "fraction": fraction,
        "seed": seed,
        "stratified": True,
        "size": int(len(val)),
        "train_size": int(keep.sum()),
        "per_class": np.bincount(val_part.labels, minlength=10).tolist(),
        "indices_sha256": hashlib.sha256(val.astype("<i8").tobytes()).hexdigest()[:16],
    }
    return train_part, val_part, info
