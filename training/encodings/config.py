"""The one config dataclass every encoding is built from (saved in checkpoints and metadata)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


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
    # grid (encodings/grid.py): L levels of F features, resolutions geometric from grid_base to grid_finest
    # cells along the image's longer side (0: its native pixels), the shorter side in proportion; a level
    # with more than 2^grid_log2_table cells is hashed into a table of that size (0: the largest table
    # that keeps the model within grid_bytes_per_pixel float16 bytes per native pixel).
    grid_levels: int = 8
    grid_features: int = 2
    grid_finest_features: int = 0      # features of the finest level (0: grid_features); fewer puts it at the native pixels
    grid_log2_table: int = 0
    grid_base: int = 16
    grid_finest: int = 0
    grid_bytes_per_pixel: float = 1.45   # tables; with the head and the graph a 4 MP file is about 1.46 B/px
    grid_table_bits: int = 16  # bits per table entry in the file: 16 (float16) or 8 (encodings/grid_quant.py)
    image_size: list[int] = field(default_factory=lambda: [0, 0])   # [W, H] of the fitted pixel grid

    def to_dict(self) -> dict:
        return asdict(self)
