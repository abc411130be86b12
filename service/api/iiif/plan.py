"""A IIIF image request as a typed render: region → viewport, size → width/height, rotation and
mirroring → a transform matrix, non-90° corners → a transparent (png/webp) or white (jpg) background.

The model's unit square is the full IIIF image: pixel (px, py) of a W×H image is the unit point
(px/W, py/H). Region THEN size THEN rotation (mirroring first), as §4.6 orders them, are one affine
map from output pixels to model coordinates, so the model is sampled directly at the rotated,
mirrored, scaled coordinates: nothing is resampled from pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import BadInput
from ...geometry.sampling import Background
from ...geometry.transform import rotation
from ...render.imaging import RenderSpec
from ...render.tiling import Tile, grid_axes
from .params import FORMATS, Box, ImageRequest

JPEG_QUALITY = 90


@dataclass(frozen=True)
class TileRender:
    """What the render service samples for a IIIF image (typed; never the public RenderRequest)."""

    width: int
    height: int
    viewport: tuple[float, float, float, float]
    transform: np.ndarray | None  # 2×3 output → model coordinates; None for the identity
    format: str  # png | jpeg | webp
    background: str  # extrapolate | transparent | white
    quality: int = JPEG_QUALITY

    def spec(self) -> RenderSpec:
        matrix = np.eye(3)[:2] if self.transform is None else self.transform
        return RenderSpec(
            width=self.width,
            height=self.height,
            matrix=matrix,
            viewport=self.viewport,
            background=Background.parse(self.background),
        )


@dataclass(frozen=True)
class Plan:
    render: TileRender
    box: Box  # the region in image pixels
    size: tuple[int, int]  # the scaled region, before rotation
    out: tuple[int, int]  # the returned image, after rotation
    matrix: np.ndarray  # 3×3: output unit coordinates (the viewport's frame) → model coordinates
    mask_region: bool  # non-90° rotation of a part of the image: blank the corners outside it
    quality: str
    format: str
    size_kind: str = ""

    def canonical(self, width: int, height: int) -> str:
        """region/size/rotation/quality.format in the canonical form of §4.8."""
        b = self.box
        full = (round(b.x), round(b.y), round(b.w), round(b.h)) == (0, 0, width, height)
        region = "full" if full else f"{round(b.x)},{round(b.y)},{round(b.w)},{round(b.h)}"
        if self.size_kind == "max":
            return f"{region}/{'^' if self.upscaled else ''}max"
        return f"{region}/{'^' if self.upscaled else ''}{self.size[0]},{self.size[1]}"

    @property
    def upscaled(self) -> bool:
        rw, rh = self.box.pixels
        return self.size[0] > rw or self.size[1] > rh


def _rot_cw(degrees: float) -> np.ndarray:
    """Clockwise on screen with y down (IIIF's sense): the transform's counter-clockwise rotation, negated."""
    return rotation(-degrees)


def _affine(a: float, b: float, tx: float, c: float, d: float, ty: float) -> np.ndarray:
    return np.array([[a, b, tx], [c, d, ty], [0.0, 0.0, 1.0]])


def plan(req: ImageRequest, width: int, height: int, max_area: int, max_side: int | tuple[int, int]) -> Plan:
    box = req.region.resolve(width, height)
    sw, sh = req.size.resolve(box, max_area, max_side)
    rot = req.rotation
    upright = rot.degrees == 0 and not rot.mirror  # every deep-zoom tile: the transform is the identity
    c, s = (1.0, 0.0) if upright else (abs(_rot_cw(rot.degrees)[0, 0]), abs(_rot_cw(rot.degrees)[1, 0]))
    ow, oh = max(1, round(sw * c + sh * s)), max(1, round(sw * s + sh * c))
    if ow * oh > max_area:
        raise BadInput(
            f"the rotated image is {ow}×{oh} = {ow * oh} pixels, more than maxArea {max_area} (INR_MAX_RENDER_PIXELS)"
        )
    if upright:  # what the frames below come to, without their 3×3 products and inverses (a tenth of a tile's
        # Python time): the render /render would make of this region
        return _plan(req, box, (sw, sh), (ow, oh), np.eye(3), None, _region_viewport(box, width, height), width, height)
    # Frames: image pixels P; unit o = P / (W, H) (the viewport's frame); scaled region pixels Q.
    to_unit = _affine(1 / width, 0, 0, 0, 1 / height, 0)
    to_pixels = np.linalg.inv(to_unit)
    region_to_scaled = _affine(sw / box.w, 0, -box.x * sw / box.w, 0, sh / box.h, -box.y * sh / box.h)
    centre = _affine(1, 0, sw / 2, 0, 1, sh / 2)
    # Output Q → source Q: undo the rotation (clockwise), then the mirror, about the scaled region's centre.
    inverse = _rot_cw(-rot.degrees)
    if rot.mirror:
        inverse = _affine(-1, 0, 0, 0, 1, 0) @ inverse
    q_back = centre @ inverse @ np.linalg.inv(centre)
    # model = unit ∘ pixels ∘ scaled⁻¹ ∘ q_back ∘ scaled ∘ pixels⁻¹ (o)
    scaled = region_to_scaled @ to_pixels
    matrix = to_unit @ np.linalg.inv(region_to_scaled) @ q_back @ scaled
    # The viewport: the output's bounding box, centred on the scaled region's centre, in the o frame.
    corners = np.array([[sw / 2 - ow / 2, sh / 2 - oh / 2, 1.0], [sw / 2 + ow / 2, sh / 2 + oh / 2, 1.0]])
    (x0, y0, _), (x1, y1, _) = (np.linalg.inv(scaled) @ corners.T).T
    identity = np.allclose(matrix, np.eye(3), rtol=0.0, atol=1e-12)
    transform = None if identity else matrix[:2].copy()
    if identity:  # exactly the viewport a /render caller would write for this region
        matrix = np.eye(3)
        x0, y0, x1, y1 = _region_viewport(box, width, height)
    return _plan(req, box, (sw, sh), (ow, oh), matrix, transform, (x0, y0, x1, y1), width, height)


def _region_viewport(box, width: int, height: int) -> tuple[float, float, float, float]:
    return box.x / width, box.y / height, (box.x + box.w) / width, (box.y + box.h) / height


def _plan(req, box, size, out, matrix, transform, viewport, width: int, height: int) -> Plan:
    (ow, oh), rot = out, req.rotation
    x0, y0, x1, y1 = viewport
    right = rot.right_angle
    fmt = FORMATS[req.format]
    background = "extrapolate" if right else ("transparent" if fmt in ("png", "webp") else "white")
    render = TileRender(ow, oh, (float(x0), float(y0), float(x1), float(y1)), transform, fmt, background)
    full = (box.x, box.y, box.w, box.h) == (0.0, 0.0, float(width), float(height))
    return Plan(
        render,
        box,
        size,
        (ow, oh),
        matrix,
        mask_region=not right and not full,
        quality=req.quality,
        format=req.format,
        size_kind=req.size.kind,
    )


def region_mask(p: Plan, width: int, height: int) -> np.ndarray:
    """[oh, ow] float alpha: 1 where the output pixel's centre falls inside the region (non-90° rotations)."""
    ow, oh = p.out
    gx, gy = np.meshgrid(*grid_axes(Tile(0, oh, 0, ow), ow, oh, 1, p.render.viewport))
    m = p.matrix
    mx = (m[0, 0] * gx + m[0, 1] * gy + m[0, 2]) * width
    my = (m[1, 0] * gx + m[1, 1] * gy + m[1, 2]) * height
    b = p.box
    return ((mx >= b.x) & (mx <= b.x + b.w) & (my >= b.y) & (my <= b.y + b.h)).astype(np.float64)
