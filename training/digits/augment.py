"""Training-time distortions of digit images, each applied to a random share of a batch.

    random affine      rotation U(±10°), isotropic scale U(1 ± 0.1), shift U(±2 px)
    elastic            Simard, Steinkraus & Platt 2003 (ICDAR, §2): a per-pixel displacement field
                       U(−1, 1), smoothed by a Gaussian of σ px and scaled by α px

When both are asked for, they are composed into one sampling grid, so a digit is resampled
(and blurred by bilinear interpolation) once. The other images pass through untouched: the
test digits are unresampled, and a model that only sees resampled digits does worse on them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

AUG_PROB = 0.5
AUG_ROTATE_DEG = 10.0
AUG_SCALE = 0.1
AUG_SHIFT_PX = 2.0
ELASTIC_ALPHA_PX = 34.0  # Simard et al.'s α for MNIST
ELASTIC_SIGMA_PX = 4.0  # Simard et al.'s σ for MNIST


def affine_theta(n: int, size: int, gen: torch.Generator, device) -> torch.Tensor:
    """[n, 2, 3] affine matrices in normalised coordinates (rotation, scale, shift)."""
    u = torch.rand(n, 4, generator=gen, device=device) * 2 - 1
    angle = u[:, 0] * math.radians(AUG_ROTATE_DEG)
    scale = 1 + u[:, 1] * AUG_SCALE
    shift = u[:, 2:] * (2 * AUG_SHIFT_PX / size)  # normalised coordinates span 2
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    return torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)


def gaussian_kernel(sigma: float, device) -> torch.Tensor:
    radius = max(1, int(math.ceil(3 * sigma)))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def elastic_field(
    n: int, size: int, gen: torch.Generator, device, alpha: float = ELASTIC_ALPHA_PX, sigma: float = ELASTIC_SIGMA_PX
) -> torch.Tensor:
    """[n, size, size, 2] displacements in normalised coordinates: α · (G_σ * U(−1, 1)) px."""
    noise = torch.rand(n * 2, 1, size, size, generator=gen, device=device) * 2 - 1
    k = gaussian_kernel(sigma, device)
    pad = len(k) // 2
    smooth = F.conv2d(F.pad(noise, (pad, pad, 0, 0)), k.view(1, 1, 1, -1))
    smooth = F.conv2d(F.pad(smooth, (0, 0, pad, pad)), k.view(1, 1, -1, 1))
    return (smooth.view(n, 2, size, size).permute(0, 2, 3, 1) * alpha * (2.0 / size)).contiguous()


def distort(
    x: torch.Tensor,
    gen: torch.Generator,
    affine: bool = True,
    elastic: bool = False,
    p: float = AUG_PROB,
    alpha: float = ELASTIC_ALPHA_PX,
    sigma: float = ELASTIC_SIGMA_PX,
) -> torch.Tensor:
    """With probability p per image, resample it through the asked-for distortions (elastic: α, σ in
    px); black fill."""
    n, size = x.shape[0], x.shape[-1]
    pick = torch.rand(n, generator=gen, device=x.device) < p
    m = int(pick.sum())
    if m == 0 or not (affine or elastic):
        return x
    picked = x[pick]
    theta = affine_theta(m, size, gen, x.device) if affine else torch.eye(2, 3, device=x.device).expand(m, 2, 3)
    grid = F.affine_grid(theta, list(picked.shape), align_corners=False)
    if elastic:
        grid = grid + elastic_field(m, size, gen, x.device, alpha, sigma)
    out = x.clone()
    out[pick] = F.grid_sample(picked, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out


def random_affine(x: torch.Tensor, gen: torch.Generator, p: float = AUG_PROB) -> torch.Tensor:
    """The affine distortion alone (what `--augment` gives)."""
    return distort(x, gen, affine=True, elastic=False, p=p)
