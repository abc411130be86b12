"""Rate–distortion fine-tuning of a grid's tables: `--grid-rd-lambda` (docs/training.md, "Quality").

The rate control of grid_rate.py rounds tables that were trained for the error alone. Here, from the fast fit,
the tables and the MLP are trained further on error + λ·rate (Ballé et al.'s relaxation, as Cool-chic and C3 train
their latents), so that the tables themselves become cheap to code where the picture does not need them:

- each table channel is a latent on a lattice of step `d` (the channel's 8-bit step × `step_multiple(λ)`, written
  with a dyadic scale so that `grid_quant.exact_8bit` finds its codes again), centred on its mean;
- for the first NOISE_SHARE of the steps the latent is read with uniform noise of one step, then rounded with a
  straight-through gradient, so the last steps train the MLP on what will be stored;
- the rate is the latent's bits under a discretised Laplace whose scale depends on the four neighbours' spread
  (two weights per channel, trained alongside): the spread context of the file's context code (modelrepo/ctxcode.py),
  which codes the result;
- the loss is the mean squared error of a batch of training pixels plus λ × the tables' bits per image pixel, so λ
  is in squared error per bit per pixel (on the validation photo Bridge, 300 steps: 1e-4 gave 43.5 dB, 1e-3
  38.3 dB).

Only dense levels (the grid preset's); the rounding keeps to 255 steps a channel (a coarser lattice where a
latent spread wider).
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch

from ..errors import UsageError
from .grid import MultiresGrid
from .grid_refit import native_level

log = logging.getLogger(__name__)
NOISE_SHARE = 0.7  # the share of the steps read with noise; the rest rounded (straight-through)
BATCH = 65_536
RATE_SAMPLE = 1 << 17  # cells of a larger level rated per step (its rate scaled up): a step's cost stays bounded
LR = 2e-3  # the MLP's; the latents move LATENT_LR steps of their lattice per Adam step at most
LATENT_LR = 0.1
CONTEXT_LR = 1e-2
# The lattice's step against the channel's 8-bit step: 400·√λ within 1 … 16. Chosen on two whole validation photos
# (Bridge 1450×816, Picos 1088×816; 300 steps, λ 1e-4 and 1e-3) by the loss the fine-tune minimises, squared error
# + λ·bits per pixel of the file: 400 was the lowest or within 4 % of it in all four, 200 10–27 % above it, 800
# 4 % above it twice. (First chosen on a 640² crop, 200, where the file's fixed graph weighed more.)
MULTIPLE = (400.0, 1.0, 16.0)
LEVELS = 255


def dyadic(x: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """x rounded to `bits` significant bits (x > 0): a scale whose products with 8-bit codes are exact in float32."""
    m, e = torch.frexp(x)
    return torch.ldexp(torch.round(m * 2**bits), e - bits)


def lattice_values(q: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """q·scale + low in float32, as the file's Cast → Mul → Add computes it."""
    return (q.float() * scale).add_(low)


def write_lattice(table: torch.Tensor, latent: torch.Tensor, step: torch.Tensor, centre: torch.Tensor) -> dict:
    """Round a latent (step units around `centre`, per channel of a [1, F, ry, rx] table) and write the table as
    codes 0…Q ≤ 255 on a dyadic scale with a low on the scale's grid, so that every value is exact in float32 and
    `grid_quant.exact_8bit` recovers (codes, scale, low). A channel spread over more than 255 steps goes onto a
    coarser lattice (a whole multiple of its step)."""
    q = torch.round(latent)
    lo = q.amin(dim=(0, 2, 3), keepdim=True)
    spread = q.amax(dim=(0, 2, 3), keepdim=True) - lo
    k = torch.ceil(spread / LEVELS).clamp(min=1)  # 1 unless a channel spread wider than 255 steps
    q = torch.round((q - lo) / k)
    scale = dyadic(step * k)
    unit = torch.ldexp(torch.ones_like(scale), torch.frexp(scale)[1] - 8)
    low = torch.round((centre + lo * step) / unit) * unit
    table.copy_(lattice_values(q, scale, low))
    return {"steps": [int(s) for s in q.amax(dim=(0, 2, 3)).reshape(-1)], "widened": int((k > 1).sum())}


def laplace_bits(v: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """Total bits of values v (step units, around 0) under Laplace(0, b) integrated over each value's step."""
    b = torch.exp(log_b)

    def cdf(x):
        z = x / b
        return torch.where(z < 0, 0.5 * torch.exp(z.clamp(max=0)), 1 - 0.5 * torch.exp(-z.clamp(min=0)))

    return -torch.log2((cdf(v + 0.5) - cdf(v - 0.5)).clamp(min=1e-9)).sum()


def cell_bits(values: torch.Tensor, ref: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, ctx) -> torch.Tensor:
    """Bits of `values` [F, n], the latents at cells (rows, cols) of a [1, F, ry, rx] level, in the context of their
    four adjacent neighbours in `ref` (edges replicated): log b = a + (1 + k)·log(½ + their mean |value|)."""
    ry, rx = ref.shape[-2:]
    near = [
        ref[0][:, (rows + dr).clamp(0, ry - 1), (cols + dc).clamp(0, rx - 1)]
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))
    ]
    s = sum(n.abs() for n in near) / 4
    return laplace_bits(values, ctx[0].view(-1, 1) + (1 + ctx[1]).view(-1, 1) * torch.log(0.5 + s))


def step_multiple(lam: float) -> float:
    k, lo, hi = MULTIPLE
    return min(hi, max(lo, k * math.sqrt(lam)))


def quantised(latent: torch.Tensor, hard: bool) -> torch.Tensor:
    """The latent as the training reads it: with uniform noise of one step, or rounded (straight-through)."""
    return latent + (torch.round(latent) - latent).detach() if hard else latent + (torch.rand_like(latent) - 0.5)


def rd_finish(
    model: torch.nn.Module, coords: np.ndarray, targets: np.ndarray, w: int, h: int, lam: float, steps: int, seed: int
) -> dict:
    """Fine-tune `model` (a grid under an MLP, on CPU) in place on error + λ·rate and leave its tables on their
    lattices; what it did, for the model's history."""
    enc = model.encoding
    if not isinstance(enc, MultiresGrid) or enc.hashed:
        raise UsageError("--grid-rd-lambda needs a grid of dense levels (the grid preset's)")
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    tables = list(enc.tables)
    steps_of, centres, latents = [], [], []
    for t in tables:
        t = t.detach()
        lo, hi = t.amin(dim=(0, 2, 3), keepdim=True), t.amax(dim=(0, 2, 3), keepdim=True)
        d = torch.where(hi > lo, (hi - lo) / LEVELS * step_multiple(lam), torch.ones_like(hi))
        c = t.mean(dim=(0, 2, 3), keepdim=True)
        steps_of.append(d)
        centres.append(c)
        latents.append(torch.nn.Parameter((t - c) / d))
    context = [torch.nn.Parameter(torch.zeros(2, t.shape[1], 1, 1)) for t in tables]  # log b = a + (1 + k)·log(½ + s)
    body = [p for p in model.body.parameters()]
    opt = torch.optim.Adam(
        [
            {"params": latents, "lr": LATENT_LR},
            {"params": body, "lr": LR},
            {"params": context, "lr": CONTEXT_LR},
        ],
        fused=True,
    )
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    x, y = torch.from_numpy(np.ascontiguousarray(coords)), torch.from_numpy(np.ascontiguousarray(targets))
    gen = torch.Generator().manual_seed(seed)
    pixels = w * h
    mse = bits = torch.zeros(())
    native = native_level(model, w, h)
    model.train()
    for step in range(steps):
        hard = step >= NOISE_SHARE * steps
        idx = torch.randint(len(x), (min(BATCH, len(x)),), generator=gen)
        xb, read, bits = x.index_select(0, idx), [], 0.0
        for i, (lat, d, c, ctx) in enumerate(zip(latents, steps_of, centres, context)):
            ry, rx = lat.shape[-2:]
            if i == native:  # the batch's own cells: each pixel reads its one cell, rated where it is read
                rows = (xb[:, 1] * h).floor().long().clamp(0, h - 1)
                cols = (xb[:, 0] * w).floor().long().clamp(0, w - 1)
                v = quantised(lat[0][:, rows, cols], hard)
                ref = torch.round(lat.detach())
                bits = bits + cell_bits(v, ref, rows, cols, ctx) * (ry * rx / len(rows))
                last = (v * d.view(-1, 1) + c.view(-1, 1)).t()
                continue
            v = quantised(lat, hard)
            read.append(v * d + c)
            if ry * rx > RATE_SAMPLE:  # a large level rated on a sample of its cells
                cells = torch.randint(ry * rx, (RATE_SAMPLE,), generator=gen)
                rows, cols, share = cells // rx, cells % rx, ry * rx / RATE_SAMPLE
            else:
                grid = torch.arange(ry * rx)
                rows, cols, share = grid // rx, grid % rx, 1.0
            bits = bits + cell_bits(v[0][:, rows, cols], v.detach(), rows, cols, ctx) * share
        feats = enc(xb, tables=read)  # every level but a native one
        if native is not None:
            feats = torch.cat([feats, last], dim=1)
        out = torch.sigmoid(model.body(feats))
        mse = torch.mean((out - y.index_select(0, idx)) ** 2)
        loss = mse + lam * bits / pixels
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        written = [write_lattice(t.data, lat, d, c) for t, lat, d, c in zip(tables, latents, steps_of, centres)]
    seconds = round(time.perf_counter() - t0, 3)
    log.info(
        "rd fine-tune: λ %g, %d steps, %.1f s; estimated %.3f bits per pixel", lam, steps, seconds, bits.item() / pixels
    )
    return {
        "lambda": lam,
        "steps": steps,
        "seconds": seconds,
        "train_psnr": round(-10 * math.log10(max(mse.item(), 1e-10)), 3),
        "estimated_bits_per_pixel": round(bits.item() / pixels, 4),
        "level_steps": [r["steps"] for r in written],
        "widened_channels": sum(r["widened"] for r in written),
    }
