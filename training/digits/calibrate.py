"""Temperature scaling (Guo et al. 2017, "On calibration of modern neural networks") and the expected
calibration error.

One scalar T divides the logits, fitted on held-out digits by minimising their negative log-likelihood; the
arg max, so the accuracy, does not change. ECE: the confidences (top probabilities) in 15 equal-width bins,
Σ_bins (n_bin / N)·|accuracy_bin − mean confidence_bin|.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

ECE_BINS = 15
T_RANGE = (0.05, 20.0)


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    z = torch.from_numpy(np.asarray(logits, np.float64)) / temperature
    return float(F.cross_entropy(z, torch.from_numpy(np.asarray(labels, np.int64))))


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The T > 0 that minimises the NLL of softmax(logits / T) (L-BFGS on log T, clamped to T_RANGE)."""
    z = torch.from_numpy(np.asarray(logits, np.float64))
    y = torch.from_numpy(np.asarray(labels, np.int64))
    log_t = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(z / log_t.exp(), y)
        loss.backward()
        return loss

    opt.step(closure)
    return float(np.clip(log_t.exp().item(), *T_RANGE))


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = np.asarray(logits, np.float64) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def ece(probabilities: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    conf = probabilities.max(axis=1)
    right = probabilities.argmax(axis=1) == labels
    which = np.minimum((conf * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        members = which == b
        if members.any():
            total += members.mean() * abs(right[members].mean() - conf[members].mean())
    return float(total)


def report(logits: np.ndarray, labels: np.ndarray, temperature: float) -> dict:
    """NLL and ECE before (T = 1) and after temperature scaling."""
    return {
        "nll_before": round(nll(logits, labels), 5),
        "nll": round(nll(logits, labels, temperature), 5),
        "ece_before": round(ece(softmax(logits), labels), 5),
        "ece": round(ece(softmax(logits, temperature), labels), 5),
        "samples": len(labels),
    }
