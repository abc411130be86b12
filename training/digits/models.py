"""Digit classifiers: SineKAN and its three baselines, from small parts to the whole.

    bspline_basis        cubic B-spline basis on a uniform grid (Cox–de Boor)
    BSplineKANLayer      efficient-kan: SiLU base branch + B-spline branch
    FourierKANLayer      Σ_k a·cos(kx) + b·sin(kx), k = 1..G
    body builders        a [784, hidden…, 10] stack per model name (registry MODELS)
    conv-sinekan         two small convolutions (a stem of 784 features), then a SineKAN
    DigitClassifier      images [N,1,28,28] in [0,1] → normalise to [−1,1] → body → logits
    WithProbabilities    (logits, softmax) for export

`DigitModelConfig` is passed whole and saved in checkpoints as `model_args`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UsageError, unknown
from ..image_models import count_parameters  # noqa: F401 - re-exported for digits callers
from ..sinekan import SineKAN

IN_DIM = 28 * 28
NUM_CLASSES = 10
DEFAULT_GRID = {"sinekan": 8, "bspline-kan": 5, "fourier-kan": 5, "mlp": 0, "conv-sinekan": 2}
SPLINE_ORDER = 3  # cubic
GRID_RANGE = (-1.0, 1.0)  # efficient-kan's default grid range
SPLINE_NOISE = 0.1  # efficient-kan scale_noise


# ---------------------------------------------------------------- B-spline KAN


def uniform_knots(
    grid_size: int, order: int = SPLINE_ORDER, lo: float = GRID_RANGE[0], hi: float = GRID_RANGE[1]
) -> torch.Tensor:
    """G intervals over [lo, hi], extended by `order` knots on each side: G + 2·order + 1 knots."""
    h = (hi - lo) / grid_size
    return lo + h * torch.arange(-order, grid_size + order + 1, dtype=torch.float32)


def bspline_basis(x: torch.Tensor, knots: torch.Tensor, order: int = SPLINE_ORDER) -> torch.Tensor:
    """B-spline bases of degree `order` at x: [..., in] → [..., in, len(knots) − order − 1].

    Cox–de Boor: B_{i,0}(x) = 1[t_i ≤ x < t_{i+1}],
    B_{i,p}(x) = (x − t_i)/(t_{i+p} − t_i)·B_{i,p−1}(x)
               + (t_{i+p+1} − x)/(t_{i+p+1} − t_{i+1})·B_{i+1,p−1}(x).
    Inside [t_order, t_{−order−1}] the bases sum to 1 (partition of unity).
    """
    t = knots
    x = x.unsqueeze(-1)
    b = ((x >= t[:-1]) & (x < t[1:])).to(x.dtype)
    for p in range(1, order + 1):
        left = (x - t[: -(p + 1)]) / (t[p:-1] - t[: -(p + 1)]) * b[..., :-1]
        right = (t[p + 1 :] - x) / (t[p + 1 :] - t[1:-p]) * b[..., 1:]
        b = left + right
    return b


class BSplineKANLayer(nn.Module):
    """efficient-kan layer: y_i = Σ_j w_ij·silu(x_j) + Σ_j s_ij Σ_k c_ijk·B_k(x_j).

    Base weights w, spline coefficients c [out, in, G+3] and per-edge spline scalers s.
    """

    def __init__(self, in_dim: int, out_dim: int, grid_size: int = 5):
        super().__init__()
        self.in_dim, self.out_dim, self.grid_size = in_dim, out_dim, grid_size
        self.register_buffer("knots", uniform_knots(grid_size))
        self.base_weight = nn.Parameter(torch.empty(out_dim, in_dim))
        self.spline_weight = nn.Parameter(torch.empty(out_dim, in_dim, grid_size + SPLINE_ORDER))
        self.spline_scaler = nn.Parameter(torch.empty(out_dim, in_dim))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.init_base()
        self.init_spline()

    @torch.no_grad()
    def init_base(self) -> None:
        """w, s ~ U(−1/√in, 1/√in): kaiming_uniform with a = √5, as efficient-kan (scale 1)."""
        nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.spline_scaler, a=math.sqrt(5))

    @torch.no_grad()
    def init_spline(self) -> None:
        """c ~ U(−ε/2G, ε/2G), ε = 0.1: efficient-kan least-squares-fits c to noise of this
        size on the grid points; drawing c directly gives splines of the same scale."""
        self.spline_weight.uniform_(-SPLINE_NOISE / (2 * self.grid_size), SPLINE_NOISE / (2 * self.grid_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(F.silu(x), self.base_weight)
        basis = bspline_basis(x, self.knots)  # [N, in, G+3]
        coef = self.spline_weight * self.spline_scaler[..., None]  # [out, in, G+3]
        spline = basis.reshape(x.shape[0], -1) @ coef.reshape(self.out_dim, -1).t()
        return base + spline

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, out_dim={self.out_dim}, grid_size={self.grid_size}"


# ---------------------------------------------------------------- Fourier KAN


class FourierKANLayer(nn.Module):
    """y_i = Σ_j Σ_{k=1..G} a_ijk·cos(k·x_j) + b_ijk·sin(k·x_j) + bias_i."""

    def __init__(self, in_dim: int, out_dim: int, grid_size: int = 8):
        super().__init__()
        self.in_dim, self.out_dim, self.grid_size = in_dim, out_dim, grid_size
        self.register_buffer("k", torch.arange(1, grid_size + 1, dtype=torch.float32))
        self.coeffs = nn.Parameter(torch.empty(2, out_dim, in_dim, grid_size))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.init_coeffs()

    @torch.no_grad()
    def init_coeffs(self) -> None:
        """a_ijk, b_ijk ~ N(0, 1) / (√in · k²): FourierKAN's "smooth" init, which damps
        frequency k by 1/k² so the initial functions are smooth; bias 0.

        The reference's other init, N(0, 1)/√(in·G), gives every frequency the same weight;
        under the paper protocol (AdamW, lr 1e-3) it did not learn MNIST here (≈ 11 % after
        150 steps at G = 5, hidden 64) while the smooth init reached ≈ 86 %.
        """
        k = torch.arange(1, self.grid_size + 1, dtype=torch.float32)
        self.coeffs.normal_(0.0, 1.0).div_(math.sqrt(self.in_dim) * k**2)
        self.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kx = x[..., None] * self.k  # [N, in, G]
        feats = torch.cat([torch.cos(kx), torch.sin(kx)], dim=-1)  # [N, in, 2G]
        w = torch.cat([self.coeffs[0], self.coeffs[1]], dim=-1)  # [out, in, 2G]
        return feats.reshape(x.shape[0], -1) @ w.reshape(self.out_dim, -1).t() + self.bias

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, out_dim={self.out_dim}, grid_size={self.grid_size}"


# ---------------------------------------------------------------- bodies and registry


def mlp_body(dims: list[int], grid_size: int) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def sinekan_body(dims: list[int], grid_size: int) -> nn.Sequential:
    return SineKAN(dims, grid_size=grid_size)


STEM_CHANNELS = (8, 16)  # two 5×5 convolutions, each ReLU and 2×2 max-pool: 16 × 7 × 7 = 784 features
STEM_KERNEL = 5


class AsImages(nn.Module):
    """[N, 784] → [N, 1, 28, 28], the batch left free (nn.Unflatten's export fixes it to the traced one)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 1, 28, 28)


def conv_stem() -> nn.Sequential:
    """[N, 784] pixels in [−1, 1] → [N, 784] features: the image's local strokes, found wherever they are."""
    a, b = STEM_CHANNELS
    pad = STEM_KERNEL // 2
    return nn.Sequential(
        AsImages(),
        nn.Conv2d(1, a, STEM_KERNEL, padding=pad),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(a, b, STEM_KERNEL, padding=pad),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )


def conv_sinekan_body(dims: list[int], grid_size: int) -> nn.Sequential:
    """The convolutional stem, then a SineKAN on its 784 features (dims[0] is the stem's output)."""
    return nn.Sequential(conv_stem(), SineKAN(dims, grid_size=grid_size))


def bspline_kan_body(dims: list[int], grid_size: int) -> nn.Sequential:
    return nn.Sequential(*[BSplineKANLayer(a, b, grid_size) for a, b in zip(dims[:-1], dims[1:])])


def fourier_kan_body(dims: list[int], grid_size: int) -> nn.Sequential:
    return nn.Sequential(*[FourierKANLayer(a, b, grid_size) for a, b in zip(dims[:-1], dims[1:])])


MODELS = {
    "sinekan": sinekan_body,
    "mlp": mlp_body,
    "bspline-kan": bspline_kan_body,
    "fourier-kan": fourier_kan_body,
    "conv-sinekan": conv_sinekan_body,
}


@dataclass
class DigitModelConfig:
    model: str = "sinekan"
    hidden: list[int] = field(default_factory=lambda: [64])  # widths of the hidden layers
    grid_size: int = 0  # 0 = the model's default
    in_dim: int = IN_DIM
    num_classes: int = NUM_CLASSES

    def __post_init__(self):
        if self.model not in MODELS:
            raise unknown("model", self.model, MODELS)
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise UsageError(f"--hidden needs one or more positive widths, got {self.hidden}")
        self.hidden = [int(h) for h in self.hidden]
        if self.grid_size < 0:
            raise UsageError(f"--grid must be positive, got {self.grid_size}")
        if self.grid_size == 0:
            self.grid_size = DEFAULT_GRID[self.model]

    @property
    def dims(self) -> list[int]:
        return [self.in_dim, *self.hidden, self.num_classes]

    def to_dict(self) -> dict:
        return asdict(self)


class DigitClassifier(nn.Module):
    """images [N,1,28,28] in [0,1] → x = 2·images − 1 in [−1,1] → flatten → body → logits [N,10]."""

    def __init__(self, cfg: DigitModelConfig):
        super().__init__()
        self.cfg = cfg
        self.body = MODELS[cfg.model](cfg.dims, cfg.grid_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.reshape(images.shape[0], -1) * 2.0 - 1.0
        return self.body(x)


class WithProbabilities(nn.Module):
    """The exported graph: (logits, softmax(logits)), the logits divided by the calibration temperature
    (training.digits.calibrate) when it is not 1; with a detector (training.digits.reject) also is_digit,
    P(the image is a digit) [N, 1]."""

    def __init__(self, net: nn.Module, temperature: float = 1.0, detector: nn.Module | None = None):
        super().__init__()
        self.net, self.temperature, self.detector = net, float(temperature), detector

    def forward(self, images: torch.Tensor):
        logits = self.net(images)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        if self.detector is None:
            return logits, torch.softmax(logits, dim=-1)
        return logits, torch.softmax(logits, dim=-1), torch.sigmoid(self.detector(images))
