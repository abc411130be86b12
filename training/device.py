"""Device choice: CUDA when it really works, else CPU."""

from __future__ import annotations

import logging

import torch

from .errors import UsageError

log = logging.getLogger(__name__)


def pick_device(name: str = "auto") -> torch.device:
    if name not in ("auto", "cpu", "cuda"):
        raise UsageError(f"unknown device '{name}'; valid: auto, cpu, cuda")
    if name == "cpu":
        return torch.device("cpu")
    ok = False
    if torch.cuda.is_available():
        try:
            torch.zeros(1, device="cuda").add_(1)
            ok = True
        except RuntimeError as e:  # driver present but unusable
            log.warning("CUDA is present but does not work: %s", e)
    if name == "cuda" and not ok:
        raise UsageError("--device cuda was asked for, but CUDA does not work on this machine")
    dev = torch.device("cuda" if ok else "cpu")
    log.info("training on %s", dev)
    return dev
