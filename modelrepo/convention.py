"""An image network made elsewhere: the convention of its coordinates and values, declared in config.pbtxt
`parameters` (docs/model-repository.md, "Image networks made elsewhere").

The service speaks one convention everywhere (x right, y down, the unit square, pixel centres at
((j+0.5)/W, (i+0.5)/H), rgb in [0,1]); a graph with another one maps [N, 2] coordinates to [N, 1|3|4] values once
its owner says how:

    coordinate_range   "LO,HI"           the graph's coordinates run from LO to HI on both axes (default "0,1")
    coordinate_order   xy | yx           the first input column is x (across) or y (down) (default xy)
    y_axis             down | up         y grows downwards or upwards (default down)
    pixel_grid         centers | corners the edges of the range are the image's edges (centers: pixel centres at
                                         (j+0.5)/W of the range), or its first and last pixels' centres (corners:
                                         linspace(LO, HI, W), as most SIREN code samples) (default centers)
    output_range       "LO,HI"           the values that are black and full intensity (default "0,1")
    image_width, image_height            the native pixel grid (IIIF's full size); without them the image is square

Any of these keys makes the model an image model; `task: "image"` alone does too (every default). Every map here is
affine per axis, so a coordinate of the service's convention becomes the graph's as `scale * u + offset` (then the
columns swapped for yx), and a value the graph gives becomes rgb as `(v - LO) / (HI - LO)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .serving import MAX_SIDE

KEYS = (
    "coordinate_range",
    "coordinate_order",
    "y_axis",
    "pixel_grid",
    "output_range",
    "image_width",
    "image_height",
)
TASK_KEY = "task"  # `task: "image"`: an image model with every default
CHANNELS = (1, 3, 4)  # grey, rgb, rgba (the alpha is not drawn)


class ConventionError(ValueError):
    """A declared convention that cannot hold; the message names the parameter."""


def _range(key: str, text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        lo, hi = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        lo = hi = math.nan
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConventionError(
            f"config.pbtxt parameters {key}: '{text[:40]}' must be 'LO,HI', two finite numbers, LO < HI"
        )
    return lo, hi


def _choice(key: str, text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise ConventionError(f"config.pbtxt parameters {key}: '{text[:40]}' must be {' or '.join(choices)}")
    return text


def _side(key: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_SIDE:
        raise ConventionError(f"config.pbtxt parameters {key}: '{text[:40]}' must be an integer from 1 to {MAX_SIDE}")
    return int(text)


@dataclass(frozen=True)
class Convention:
    """How a graph's coordinates and values relate to the service's (the module docstring)."""

    coordinate_range: tuple[float, float] = (0.0, 1.0)
    coordinate_order: str = "xy"
    y_axis: str = "down"
    pixel_grid: str = "centers"
    output_range: tuple[float, float] = (0.0, 1.0)
    width: int | None = None
    height: int | None = None

    @staticmethod
    def declared(parameters: dict[str, str]) -> bool:
        """Whether config.pbtxt's `parameters` (key → string_value) declare an image model."""
        return parameters.get(TASK_KEY) == "image" or any(k in parameters for k in KEYS)

    @classmethod
    def from_parameters(cls, parameters: dict[str, str]) -> "Convention":
        """The convention config.pbtxt declares; ConventionError naming the parameter that cannot hold."""
        task = parameters.get(TASK_KEY)
        if task is not None and task != "image":
            raise ConventionError(f"config.pbtxt parameters task: '{task[:40]}' must be image (or absent)")
        p = parameters
        width = _side("image_width", p["image_width"]) if "image_width" in p else None
        height = _side("image_height", p["image_height"]) if "image_height" in p else None
        if (width is None) != (height is None):
            raise ConventionError("config.pbtxt parameters image_width and image_height: give both or neither")
        grid = _choice("pixel_grid", p.get("pixel_grid", "centers"), ("centers", "corners"))
        if grid == "corners" and (width is None or min(width, height) < 2):
            raise ConventionError(
                "config.pbtxt parameters pixel_grid: corners needs image_width and image_height of at least 2 "
                "(the range's ends are the first and last pixels' centres)"
            )
        return cls(
            coordinate_range=_range("coordinate_range", p.get("coordinate_range", "0,1")),
            coordinate_order=_choice("coordinate_order", p.get("coordinate_order", "xy"), ("xy", "yx")),
            y_axis=_choice("y_axis", p.get("y_axis", "down"), ("down", "up")),
            pixel_grid=grid,
            output_range=_range("output_range", p.get("output_range", "0,1")),
            width=width,
            height=height,
        )

    def parameters(self) -> dict[str, str]:
        """config.pbtxt `parameters` that declare this convention (every key, defaults included)."""
        out = {
            TASK_KEY: "image",
            "coordinate_range": _text(self.coordinate_range),
            "coordinate_order": self.coordinate_order,
            "y_axis": self.y_axis,
            "pixel_grid": self.pixel_grid,
            "output_range": _text(self.output_range),
        }
        if self.width is not None:
            out.update(image_width=str(self.width), image_height=str(self.height))
        return out

    @property
    def native(self) -> tuple[int, int] | None:
        return (self.width, self.height) if self.width is not None else None

    def coordinate_map(self) -> tuple[tuple[float, float], tuple[float, float], bool]:
        """((scale_x, scale_y), (offset_x, offset_y), swap): the graph's (x, y) = scale * (u, v) + offset for the
        service's (u, v), then the columns swapped when `swap` (order yx)."""
        lo, hi = self.coordinate_range
        scales, offsets = [], []
        for side in (self.width, self.height):
            if self.pixel_grid == "corners":  # u = (j+0.5)/W  →  lo + j/(W-1)·(hi-lo)
                s = (hi - lo) * side / (side - 1)
                scales.append(s)
                offsets.append(lo - 0.5 * (hi - lo) / (side - 1))
            else:
                scales.append(hi - lo)
                offsets.append(lo)
        if self.y_axis == "up":  # v → 1 - v
            offsets[1] += scales[1]
            scales[1] = -scales[1]
        return (scales[0], scales[1]), (offsets[0], offsets[1]), self.coordinate_order == "yx"

    def value_map(self) -> tuple[float, float]:
        """(scale, offset): rgb = scale * value + offset."""
        lo, hi = self.output_range
        return 1.0 / (hi - lo), -lo / (hi - lo)


def _text(r: tuple[float, float]) -> str:
    return ",".join(format(v, "g") for v in r)
