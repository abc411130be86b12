"""The four IIIF Image API 3.0 path parameters after the identifier: region/size/rotation/quality.format.

Parsing is syntax only (400 for anything malformed); `Region.resolve` and `Size.resolve` then apply
them to an image of known pixel size (400 for a region outside the image, a zero size, upscaling
without `^`, or an area over `maxArea`). Spec: https://iiif.io/api/image/3.0/#4-image-requests
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ...errors import BadInput, NotImplementedFeature

# Floating point values: only decimal digits and "." (§4.7); pixel values: digits only.
FLOAT = r"\d+(?:\.\d+)?|\.\d+"
INT = r"\d+"
QUALITIES = ("default", "color", "gray", "bitonal")
FORMATS = {"jpg": "jpeg", "png": "png", "webp": "webp"}  # IIIF extension → the render route's format
# Valid IIIF formats (§4.5) that this service does not implement: 501, "a valid IIIF request that is
# not implemented" (§7.3). Anything else is malformed: 400.
KNOWN_FORMATS = ("tif", "gif", "jp2", "pdf")


def _num(text: str) -> float:
    return float(text)


@dataclass(frozen=True)
class Box:
    """A region in the full image's pixels (floats: percentages need not fall on pixels)."""

    x: float
    y: float
    w: float
    h: float

    @property
    def pixels(self) -> tuple[int, int]:
        """The region's size in whole pixels (at least 1), as the size parameter sees it."""
        return max(1, round(self.w)), max(1, round(self.h))


@dataclass(frozen=True)
class Region:
    kind: str  # full | square | px | pct
    values: tuple[float, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Region":
        if text in ("full", "square"):
            return cls(text)
        m = re.fullmatch(rf"pct:({FLOAT}),({FLOAT}),({FLOAT}),({FLOAT})", text)
        if m:
            return cls("pct", tuple(_num(v) for v in m.groups()))
        m = re.fullmatch(rf"({INT}),({INT}),({INT}),({INT})", text)
        if m:
            return cls("px", tuple(_num(v) for v in m.groups()))
        raise BadInput(f"region '{text[:80]}' is not full, square, x,y,w,h or pct:x,y,w,h")

    def resolve(self, width: int, height: int) -> Box:
        """The region cropped at the image's edges (§4.1); 400 for zero size or entirely outside."""
        if self.kind == "full":
            return Box(0.0, 0.0, float(width), float(height))
        if self.kind == "square":
            s = min(width, height)
            return Box((width - s) / 2, (height - s) / 2, float(s), float(s))
        x, y, w, h = self.values
        if self.kind == "pct":
            x, w = x * width / 100, w * width / 100
            y, h = y * height / 100, h * height / 100
        if w <= 0 or h <= 0:
            raise BadInput(f"region {self.text()} has zero width or height")
        if x >= width or y >= height:
            raise BadInput(f"region {self.text()} is entirely outside the {width}×{height} image")
        return Box(x, y, min(w, width - x), min(h, height - y))

    def text(self) -> str:
        if self.kind in ("full", "square"):
            return self.kind
        body = ",".join(f"{v:g}" for v in self.values)
        return f"pct:{body}" if self.kind == "pct" else body


@dataclass(frozen=True)
class Size:
    kind: str  # max | w | h | pct | wh | confined
    upscale: bool = False
    w: int | None = None
    h: int | None = None
    pct: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Size":
        up = text.startswith("^")
        body = text[1:] if up else text
        if body == "max":
            return cls("max", up)
        m = re.fullmatch(rf"pct:({FLOAT})", body)
        if m:
            return cls("pct", up, pct=_num(m.group(1)))
        m = re.fullmatch(rf"(!?)({INT})?,({INT})?", body)
        if m and (m.group(2) or m.group(3)):
            bang, w, h = m.group(1), m.group(2), m.group(3)
            w, h = (int(w) if w else None), (int(h) if h else None)
            if bang and (w is None or h is None):
                raise BadInput(f"size '{text[:80]}': !w,h needs both w and h")
            kind = "confined" if bang else "wh" if w is not None and h is not None else "w" if w is not None else "h"
            return cls(kind, up, w=w, h=h)
        raise BadInput(f"size '{text[:80]}' is not max, w,, ,h, w,h, !w,h or pct:n (each optionally with ^)")

    def resolve(self, box: Box, max_area: int, max_side: int | tuple[int, int]) -> tuple[int, int]:
        """Output pixels (width, height) of the scaled region (§4.2), within maxArea and `max_side`, one
        limit for both sides or (maxWidth, maxHeight)."""
        rw, rh = box.pixels
        max_w, max_h = max_side if isinstance(max_side, tuple) else (max_side, max_side)
        if self.kind == "max":
            scale = math.sqrt(max_area / (rw * rh))
            scale = min(scale, max_w / rw, max_h / rh)
            if not self.upscale:
                scale = min(scale, 1.0)
            # floor keeps w×h inside maxArea
            w, h = (rw, rh) if scale == 1.0 else (max(1, math.floor(rw * scale)), max(1, math.floor(rh * scale)))
        elif self.kind == "pct":
            if self.pct <= 0:
                raise BadInput(f"size pct:{self.pct:g} is zero")
            w, h = round(rw * self.pct / 100), round(rh * self.pct / 100)
        elif self.kind == "w":
            w, h = self.w, round(rh * self.w / rw)
        elif self.kind == "h":
            w, h = round(rw * self.h / rh), self.h
        elif self.kind == "wh":
            w, h = self.w, self.h
        else:  # confined: as large as fits in w×h, keeping the aspect ratio
            if self.w == 0 or self.h == 0:
                raise BadInput(f"size !{self.w},{self.h} confines the image to zero pixels")
            # A box larger than the region asks for upscaling: without ^ that is a 400, as the
            # validator (size_noup: !2000,3000 on 1000²) expects, like every other size form.
            scale = min(self.w / rw, self.h / rh)
            w, h = max(1, min(self.w, round(rw * scale))), max(1, min(self.h, round(rh * scale)))
        if w < 1 or h < 1:
            raise BadInput(f"size '{self.text()}' gives {w}×{h} pixels; each side must be at least 1")
        if not self.upscale and (w > rw or h > rh):
            raise BadInput(
                f"size '{self.text()}' gives {w}×{h}, larger than the {rw}×{rh} region: "
                f"upscaling needs the ^ prefix (^{self.text()})"
            )
        if w * h > max_area:
            raise BadInput(
                f"size '{self.text()}' gives {w}×{h} = {w * h} pixels, more than maxArea {max_area} "
                "(INR_MAX_RENDER_PIXELS)"
            )
        if w > max_w or h > max_h:
            raise BadInput(f"size '{self.text()}' gives {w}×{h}; maxWidth and maxHeight are {max_w} and {max_h}")
        return w, h

    def text(self) -> str:
        up = "^" if self.upscale else ""
        if self.kind == "max":
            return f"{up}max"
        if self.kind == "pct":
            return f"{up}pct:{self.pct:g}"
        w = "" if self.w is None else str(self.w)
        h = "" if self.h is None else str(self.h)
        return f"{up}{'!' if self.kind == 'confined' else ''}{w},{h}"


@dataclass(frozen=True)
class Rotation:
    degrees: float
    mirror: bool = False

    @classmethod
    def parse(cls, text: str) -> "Rotation":
        m = re.fullmatch(rf"(!?)({FLOAT})", text)
        if not m:
            raise BadInput(f"rotation '{text[:80]}' is not a number of degrees, optionally after ! (mirroring)")
        degrees = _num(m.group(2))
        if degrees > 360:
            raise BadInput(f"rotation {degrees:g} is out of range: degrees go from 0 to 360")
        return cls(degrees % 360, bool(m.group(1)))

    @property
    def right_angle(self) -> bool:
        return self.degrees % 90 == 0

    def text(self) -> str:
        """Canonical: an integer where possible (§4.8)."""
        d = self.degrees
        return ("!" if self.mirror else "") + (str(int(d)) if d == int(d) else repr(d))


def parse_quality_format(text: str) -> tuple[str, str]:
    """`quality.format` → (quality, IIIF format extension)."""
    quality, dot, fmt = text.rpartition(".")
    if not dot:
        raise BadInput(f"'{text[:80]}' needs a format: quality.format, e.g. default.jpg")
    if quality not in QUALITIES:
        raise BadInput(f"quality '{quality[:80]}' is not one of {', '.join(QUALITIES)}")
    if fmt in KNOWN_FORMATS:
        raise NotImplementedFeature(
            f"format '{fmt}' is a IIIF format this service does not implement; formats: {', '.join(FORMATS)}"
        )
    if fmt not in FORMATS:
        raise BadInput(f"format '{fmt[:80]}' is not one of {', '.join(FORMATS)}")
    return quality, fmt


@dataclass(frozen=True)
class ImageRequest:
    region: Region
    size: Size
    rotation: Rotation
    quality: str
    format: str

    @classmethod
    def parse(cls, region: str, size: str, rotation: str, quality_format: str) -> "ImageRequest":
        quality, fmt = parse_quality_format(quality_format)
        return cls(Region.parse(region), Size.parse(size), Rotation.parse(rotation), quality, fmt)
