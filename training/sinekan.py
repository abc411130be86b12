"""SineKAN layer (Reinhardt et al. 2024, arXiv:2407.04149).

    y_i = Σ_{j,k} A_ijk · sin(ω_k x_j + φ_jk) + b_i

with a fixed phase grid φ, learnable frequencies ω shared across the layer, and
learnable amplitudes A. Initialisation follows the paper and its reference code.

What the paper leaves open for low-dimensional inputs is an option of the stack: the first
layer's grid size and a scale of its frequency grid, ω_k = scale·k (the paper's is 1), and a scale
of the later layers' grids, ω_k = scale·k/(G+1). On 2D coordinates in [0, 1] the paper's ω_k ≤ G
rad cannot reach an image's frequencies; the first scale plays the part of SIREN's ω₀, the later
one sets how much each layer bends its (unit-variance) input. The maths of the layer stays the same.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Phase-scaling fit R(g) = A·g^(−K) + C (paper eq. 7).
R_A = 0.9724108095811765
R_K = 0.9884401790754128
R_C = 0.999449553483052
FIRST_LAYER_AMPLITUDE_STD = 0.4
INITS = ("paper", "scaled")


def phase_ratio(g: int) -> float:
    """R(g) = A·g^(−K) + C: how the phase sum scales from grid size g to g+1."""
    return R_A * g ** (-R_K) + R_C


def phase_scale(grid_size: int) -> float:
    """Π_{n=1}^{G−1} R(n): the factor a layer of grid size G applies to its phases."""
    return math.prod(phase_ratio(n) for n in range(1, grid_size))


class SineKANLayer(nn.Module):
    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        grid_size: int = 8,
        is_first: bool = False,
        frequency_scale: float = 1.0,
        init: str = "paper",
    ):
        super().__init__()
        if init not in INITS:
            raise ValueError(f"unknown SineKAN init '{init}'; valid: {', '.join(INITS)}")
        self.init = init
        self.in_dim, self.out_dim, self.grid_size, self.is_first = in_dim, out_dim, grid_size, is_first
        self.frequency_scale = frequency_scale
        self.amplitudes = nn.Parameter(torch.empty(out_dim, in_dim, grid_size))
        self.frequencies = nn.Parameter(torch.empty(grid_size))
        self.bias = nn.Parameter(torch.empty(out_dim))
        self.register_buffer("phase", self.init_phase(in_dim, grid_size))
        self.reset_parameters()

    @staticmethod
    def init_phase(in_dim: int, grid_size: int) -> torch.Tensor:
        """φ_jk = (k/(G+1) + π·j/(in_dim−1)) · Π_{n=1}^{G−1} R(n), k = 1..G; shape (in, G).

        The grid phase k/(G+1) keeps Σ_k sin(x + φ_k) independent of x (eq. 5–6); the
        input phase linspace(0, π, in_dim) staggers the inputs.
        """
        k = torch.arange(1, grid_size + 1, dtype=torch.float64)
        grid_phase = k / (grid_size + 1)  # [G]
        input_phase = torch.linspace(0, math.pi, in_dim, dtype=torch.float64)  # [in]
        phase = (input_phase[:, None] + grid_phase[None, :]) * phase_scale(grid_size)  # [in, G]
        return phase.float()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.init_frequencies()
        self.init_amplitudes()
        self.init_bias()

    @torch.no_grad()
    def init_frequencies(self) -> None:
        """ω_k = k on the first layer, k/(G+1) on later layers; times `frequency_scale`."""
        k = torch.arange(1, self.grid_size + 1, dtype=torch.float32)
        self.frequencies.copy_((k if self.is_first else k / (self.grid_size + 1)) * self.frequency_scale)

    @torch.no_grad()
    def init_amplitudes(self) -> None:
        """A_ijk = a_ij / (out_dim · k), one draw a_ij per (out, in):
        a ~ N(0, 0.4²) on the first layer, a ~ U(−1, 1) on later layers.

        `scaled` keeps the draw and the 1/k decay but replaces 1/out_dim by c/√in_dim, with c
        chosen so that each output has about unit variance at initialisation (exactly, if the
        sines of one edge were uncorrelated),
        Var y = in · Var a · ½ · Σ_k (c/(√in · k))² = 1; the paper's 1/out_dim makes every layer
        shrink its input's variation (by ~0.05 at width 128), which a deep coordinate network
        does not recover from in a few hundred steps."""
        draw = torch.empty(self.out_dim, self.in_dim, 1)
        if self.is_first:
            draw.normal_(0.0, FIRST_LAYER_AMPLITUDE_STD)
            var_a = FIRST_LAYER_AMPLITUDE_STD**2
        else:
            draw.uniform_(-1.0, 1.0)
            var_a = 1.0 / 3.0
        k = torch.arange(1, self.grid_size + 1, dtype=torch.float32)
        if self.init == "scaled":
            c = 1.0 / math.sqrt(var_a * 0.5 * float((1.0 / k**2).sum()))
            self.amplitudes.copy_(draw * c / (math.sqrt(self.in_dim) * k))
        else:
            self.amplitudes.copy_(draw / (self.out_dim * k))

    @torch.no_grad()
    def init_bias(self) -> None:
        """b_i = 1/out_dim."""
        self.bias.fill_(1.0 / self.out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x = x.reshape(-1, self.in_dim)  # [N, in]
        # Sines grid-major, [N, G, in]: the broadcast multiply-add then runs along the long,
        # contiguous input axis (1.3–1.5× faster in onnxruntime than [N, in, G]; docs/benchmarks.md, sinekan_speed).
        s = torch.sin(x[:, None, :] * self.frequencies[:, None] + self.phase.t())  # [N, G, in]
        # One GEMM over the flattened sines: [N, G·in] @ [G·in, out]; the permuted amplitudes
        # are a constant in the exported graph.
        a = self.amplitudes.permute(0, 2, 1).reshape(self.out_dim, -1)  # [out, G·in]
        y = s.reshape(s.shape[0], -1) @ a.t() + self.bias
        return y.reshape(*lead, self.out_dim)

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, out_dim={self.out_dim}, grid_size={self.grid_size}, is_first={self.is_first}, "
            f"frequency_scale={self.frequency_scale:g}"
        )


class SineKAN(nn.Sequential):
    """A stack of SineKAN layers [d0, d1, …, dL]; only the first is `is_first`.

    `first_grid` (default: `grid_size`) and `first_scale` set the first layer's grid size and
    frequency scale; `later_scale` scales the other layers' grids (the paper's: 1). `init` is the
    amplitude initialisation.
    """

    def __init__(
        self,
        dims: list[int],
        grid_size: int = 8,
        first_grid: int | None = None,
        first_scale: float = 1.0,
        init: str = "paper",
        later_scale: float = 1.0,
    ):
        super().__init__(
            *[
                SineKANLayer(
                    a,
                    b,
                    grid_size=(first_grid or grid_size) if i == 0 else grid_size,
                    is_first=(i == 0),
                    frequency_scale=first_scale if i == 0 else later_scale,
                    init=init,
                )
                for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))
            ]
        )
        self.out_dim = dims[-1]
