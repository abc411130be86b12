"""Start a grid model from its image: the tables as a Laplacian pyramid, the head as a linear map.

A random grid model needs several epochs of its image before the finest levels hold anything, and on a
CPU an epoch of a 4 MP photo is most of a minute. Yet the model can hold the image's pyramid outright:
- the MLP head is set to an exact linear map of the features (layer 1 copies each feature f as
  ReLU(f) and ReLU(−f), the hidden layers pass those on, the last layer takes their difference
  times a colour direction), its other units kept random with zero outgoing weights so that they
  start contributing as soon as training moves those weights;
- each feature slot of a dense level is given one colour channel of an opponent basis of the image's
  logits (luma (1,1,1)/√3 on every level's first feature, chroma on the others: the eye, JPEG and
  PSNR all find chroma smoother), and the levels of a channel, coarse to fine, are fitted to what the
  coarser ones left: area-downsampled, then one back-projection step through the model's own bilinear
  interpolation (grid_sample, exactly as the forward pass reads the table).
The sum is what the model computes at step 0, so training starts from a blurred copy of the photo rather
than from grey, and spends its steps on detail. Hashed levels and heads that cannot be linear (SineKAN,
an MLP narrower than twice the features, or of depth 1) keep their random start.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .base import INITS  # noqa: F401 - re-exported: pyramid (this start) | random
from .grid import MultiresGrid

log = logging.getLogger(__name__)
LOGIT_EPS = 0.5 / 255  # targets are clipped to [eps, 1 − eps] before the logit
BASIS = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, -1.0], [1.0, -2.0, 1.0]])
BASIS = BASIS / BASIS.norm(dim=1, keepdim=True)  # rows: luma, two opponent chroma; orthonormal
BACKPROJECTIONS = 8  # per level (fit_level); chosen on the validation photo, docs/benchmarks.md, native_fit


def linear_head(body: nn.Module, d: int) -> torch.Tensor | None:
    """Set an MLP body (Linear, ReLU, …, Linear) to an exact linear map of its first d inputs; return the last
    layer's weight slice [out, d] that the caller fills with the map, or None when the body cannot be linear."""
    layers = [m for m in body if isinstance(m, nn.Linear)]
    if len(layers) < 2 or any(not isinstance(m, (nn.Linear, nn.ReLU)) for m in body):
        return None
    if layers[0].in_features != d or any(m.out_features < 2 * d for m in layers[:-1]):
        return None
    with torch.no_grad():
        first = layers[0]
        first.weight[: 2 * d] = torch.cat([torch.eye(d), -torch.eye(d)])
        first.bias[: 2 * d] = 0
        for hidden in layers[1:-1]:  # pass the 2d copies on unchanged (they are ≥ 0 after ReLU)
            hidden.weight[: 2 * d] = 0
            hidden.weight[: 2 * d, : 2 * d] = torch.eye(2 * d)
            hidden.bias[: 2 * d] = 0
            hidden.weight[2 * d :, : 2 * d] = 0  # the random units do not see the copies either
        last = layers[-1]
        last.weight.zero_()
        last.bias.zero_()
    return last.weight


def slot_channel(level: int, slot: int, features: list[int]) -> int:
    """0 (luma) for each level's first feature; chroma 1 and 2 alternate over the others, level by level from the
    finest, whose second feature (or, when the finest has the luma alone, the next level's) is chroma 1."""
    if slot == 0:
        return 0
    finer = sum(1 for f in features[level + 1 :] if f > 1)  # finer levels that hold a chroma slot
    return 1 + (finer + slot - 1) % 2


def lattice(img: np.ndarray, protocol: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The training pixels as an image [3, h, w] of opponent-basis logits, and their grid_sample coordinates
    [1, h, w, 2] (all pixels, or pixels [::2, ::2] under the paper protocol)."""
    h, w, _ = img.shape
    step = 2 if protocol == "paper" else 1
    logits = torch.logit(torch.from_numpy(np.ascontiguousarray(img[::step, ::step])).float(), eps=LOGIT_EPS)
    opp = torch.einsum("hwc,kc->khw", logits, BASIS)  # one image-sized copy at a time (a 24 MP photo: 288 MB)
    del logits
    ys = (torch.arange(0, h, step, dtype=torch.float32) + 0.5) / h * 2 - 1
    xs = (torch.arange(0, w, step, dtype=torch.float32) + 0.5) / w * 2 - 1
    coords = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1).unsqueeze(0)
    return opp.contiguous(), coords


def up(v: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """The level [ry, rx] read at the training pixels, as the model reads it: [h, w]."""
    return F.grid_sample(v[None, None], coords, mode="bilinear", padding_mode="border", align_corners=False)[0, 0]


def fit_level(residual: torch.Tensor, coords: torch.Tensor, rx: int, ry: int) -> torch.Tensor:
    """Cells [ry, rx] whose bilinear reading approximates residual [h, w]: the area average, then
    BACKPROJECTIONS steps of back-projection (its own reading's error, averaged back onto the cells)."""
    if tuple(residual.shape) == (ry, rx):  # cells on the pixels: each cell's reading is its pixel, exactly
        return residual.clone()
    down = lambda r: F.interpolate(r[None, None], size=(ry, rx), mode="area")[0, 0]  # noqa: E731
    v = down(residual)
    for _ in range(BACKPROJECTIONS):
        v += down(residual - up(v, coords))
    return v


@torch.no_grad()
def pyramid_init(model: nn.Module, img: np.ndarray, protocol: str) -> float | None:
    """Initialise a grid model (encoding + MLP body) from its image in place. Returns the seconds it took, or
    None (and leaves the model as it was) when the model is not a grid under a head that can be linear."""
    enc = getattr(model, "encoding", None)
    if not isinstance(enc, MultiresGrid) or not any(enc.dense):
        return None
    d = enc.out_dim
    last = linear_head(model.body, d)
    if last is None:
        log.info("pyramid init skipped: the head is not an MLP of depth ≥ 2 and width ≥ %d", 2 * d)
        return None
    import time

    t0 = time.perf_counter()
    residual, coords = lattice(img, protocol)
    features = enc.level_features
    directions = torch.zeros(last.shape[0], d)
    column = 0
    for level, ((rx, ry), dense, table) in enumerate(zip(enc.sizes, enc.dense, enc.tables)):
        for slot in range(features[level]):
            c = slot_channel(level, slot, features)
            directions[:3, column] = BASIS[c]
            column += 1
            if dense:
                v = fit_level(residual[c], coords, rx, ry)
                residual[c] -= up(v, coords)
                table[0, slot] = v
    last[:, :d] = directions
    last[:, d : 2 * d] = -directions
    rms = float(torch.sqrt(torch.mean(residual**2)))
    seconds = time.perf_counter() - t0
    log.info(
        "pyramid init: %d levels × %s features in %.2f s, logit residual RMS %.3f",
        len(enc.sizes),
        features,
        seconds,
        rms if math.isfinite(rms) else float("nan"),
    )
    return seconds
