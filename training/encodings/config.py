"""The one config dataclass every encoding is built from (saved in checkpoints and metadata)."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class EncodingConfig:
    name: str = "gaussian"
    in_dim: int = 2
    scale: float = 10.0        # gaussian: σ of B ~ N(0, σ²)
    features: int = 256        # gaussian / sine: number of frequencies m
    levels: int = 8            # positional: number of log-linear frequencies
    max_freq: float = 256.0    # positional: largest frequency (cycles per unit)
    bandwidth: float = 64.0    # sine: radius of the frequency disc (cycles per unit)
    damping: bool = False      # sine: damp amplitudes toward Nyquist
    nyquist: float = 0.0       # sine: Nyquist frequency of the training grid (size/2)
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)
