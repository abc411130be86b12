"""Request and response bodies (pydantic), which are also the OpenAPI documentation."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..geometry import transform as tf
from ..geometry.sampling import Background

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def numbers(n: int, item: dict | None = None) -> WithJsonSchema:
    """Fixed-length tuples of numbers as `items` + `minItems`/`maxItems` rather than pydantic's `prefixItems`:
    the same constraint, and one that schemathesis reads (its prefixItems bug, issues 3842 and 4099)."""
    return WithJsonSchema({"type": "array", "items": item or {"type": "number"}, "minItems": n, "maxItems": n})


Pair = Annotated[tuple[FiniteFloat, FiniteFloat], numbers(2)]


def _json_number(value: Any) -> Any:
    """A coordinate is a JSON number: a boolean or a numeric string is refused rather than coerced (null
    and other strings already are); "NaN" and "Infinity" as text keep their 'finite number' message."""
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "Input should be a number, not a boolean")
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        if math.isfinite(number):
            raise PydanticCustomError("float_type", "Input should be a number, not a string")
    return value


Coordinate = Annotated[float, BeforeValidator(_json_number), Field(allow_inf_nan=False)]
Point = Annotated[tuple[Coordinate, Coordinate], numbers(2)]
Row3 = Annotated[tuple[FiniteFloat, FiniteFloat, FiniteFloat], numbers(3)]
BACKGROUND_DOC = (
    "what to show outside the unit square after the transform: 'extrapolate' (the network's own "
    "values, default), 'transparent' (png/webp only) or a colour such as 'white' or '#ff8800'"
)


RENDER_SIZE_DOC = (
    "pixels; a missing side follows the image: only width → height = round(width·H/W) of the "
    "render frame in model pixels (the native aspect for the whole image, W and H swapped for "
    "odd quarter turns), only height likewise, neither → 256 on the longer side"
)
VIEWPORT_DOC = (
    "[x0, y0, x1, y1]: the region shown, after the transform, in the normalised coordinates of the "
    "image turned by the rotation's nearest quarter turn (ties turn up; none for a matrix): for an odd "
    "quarter turn of a W×H model x spans H pixels and y spans W pixels, about the image centre, so "
    "[0,0,1,1] with rotate 90 shows the whole turned image; for even turns and square models these are "
    "the model's own normalised coordinates"
)


class ErrorBody(BaseModel):
    error: str = Field(description="what was wrong, naming the field or limit")


class Transform(BaseModel):
    """How the image moves, in unit-square coordinates (x right, y down): rotate counter-clockwise (on screen)
    about `center`, then scale about `center`, then translate. Rotation and scaling act in square pixels of the
    model's native W×H grid (`center` and `translate` stay in normalised model units), so a non-square model
    turns without shearing. The model is sampled at the inverse-mapped coordinates. Or `matrix`
    [[a, b, c], [d, e, f]], applied directly (raw) to the query coordinates."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"rotate": 90},
                {"rotate": 30, "scale": 1.5, "translate": [0.1, 0]},
                {"matrix": [[1, 0, 0.1], [0, 1, 0]]},
            ]
        },
    )

    rotate: FiniteFloat = Field(0.0, description="degrees, counter-clockwise on screen")
    scale: FiniteFloat | Pair = Field(1.0, description="s or [sx, sy], 1e-9 ≤ |s| ≤ 1e9 (negative flips)")
    translate: Pair = Field((0.0, 0.0), description="[tx, ty] in unit-square units")
    center: Pair = Field((0.5, 0.5), description="[cx, cy], centre of rotation and scaling")
    matrix: Annotated[tuple[Row3, Row3], numbers(2, numbers(3).json_schema)] | None = Field(
        None, description="2×3 matrix applied to the query coordinates"
    )

    @model_validator(mode="after")
    def _one_form(self) -> "Transform":
        if self.matrix is not None and self.model_fields_set - {"matrix"}:
            raise ValueError("give either 'matrix' or rotate/scale/translate/center, not both")
        if not all(tf.MIN_SCALE <= abs(s) <= tf.MAX_SCALE for s in self.scale_xy):
            raise ValueError(f"scale must be non-zero, between {tf.MIN_SCALE:g} and {tf.MAX_SCALE:g} in magnitude")
        return self

    @property
    def scale_xy(self) -> tuple[float, float]:
        return (self.scale, self.scale) if isinstance(self.scale, (int, float)) else tuple(self.scale)

    def sampling_matrix(self, size: tf.Size = None) -> np.ndarray:
        """2×3 matrix from output coordinates to the coordinates of a model of native `size` (W, H)."""
        return tf.sampling_matrix(self.rotate, self.scale_xy, self.translate, self.center, self.matrix, size)

    @property
    def frame_rotate(self) -> float:
        """The rotation the render frame turns with (service/geometry/transform.py `render_frame`); none for a
        matrix."""
        return 0.0 if self.matrix is not None else self.rotate


def sampling_matrix(transform: Transform | None, size: tf.Size = None) -> np.ndarray:
    return transform.sampling_matrix(size) if transform is not None else np.eye(3)[:2]


def _check_background(text: str) -> str:
    Background.parse(text)  # raises ValueError naming the problem
    return text


class QueryRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"coords": [[0.5, 0.5], [0.25, 0.75]], "transform": {"rotate": 90}}]},
    )

    coords: list[Point] = Field(min_length=1, description="[[x, y], …] in the unit square, x right, y down")
    transform: Transform | None = None
    background: str = Field("extrapolate", description="'extrapolate' or a colour; " + BACKGROUND_DOC)

    @field_validator("background")
    @classmethod
    def _background(cls, v: str) -> str:
        if v.strip().lower() == "transparent":
            raise ValueError("'transparent' needs an alpha channel: use it with /render, png or webp")
        return _check_background(v)


class QueryResponse(BaseModel):
    rgb: list[Annotated[tuple[float, float, float], numbers(3)]] = Field(
        description="[[r, g, b], …] in [0,1], one per coordinate"
    )


class RenderRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "width": 512,
                    "height": 512,
                    "viewport": [0.25, 0.25, 0.75, 0.75],
                    "transform": {"rotate": 45},
                    "supersample": 2,
                    "format": "png",
                    "background": "transparent",
                }
            ]
        },
    )

    width: int | None = Field(None, ge=1, le=65536, description=RENDER_SIZE_DOC)
    height: int | None = Field(None, ge=1, le=65536, description=RENDER_SIZE_DOC)
    viewport: Annotated[tuple[FiniteFloat, FiniteFloat, FiniteFloat, FiniteFloat], numbers(4)] = Field(
        (0.0, 0.0, 1.0, 1.0), description=VIEWPORT_DOC
    )
    transform: Transform | None = None
    supersample: int = Field(1, ge=1, le=16, description="k: k×k samples per pixel, averaged (anti-aliasing)")
    format: Literal["png", "jpeg", "webp"] = "png"
    quality: int = Field(90, ge=1, le=100, description="jpeg/webp quality; webp 100 = lossless")
    background: str = Field("extrapolate", description=BACKGROUND_DOC)

    @field_validator("viewport")
    @classmethod
    def _viewport(cls, v):
        if not (v[2] > v[0] and v[3] > v[1]):
            raise ValueError("viewport [x0, y0, x1, y1] needs x1 > x0 and y1 > y0")
        return v

    @field_validator("background")
    @classmethod
    def _background(cls, v: str) -> str:
        return _check_background(v)

    @model_validator(mode="after")
    def _alpha(self) -> "RenderRequest":
        if self.format == "jpeg" and self.background.strip().lower() == "transparent":
            raise ValueError("jpeg has no alpha channel: use format png or webp with background 'transparent'")
        return self


ImagesJson = Annotated[
    list[Any],
    WithJsonSchema(
        {
            "type": "array",
            "description": "each image 28×28 nested lists or 784 flat values in [0,1], white digit on black (MNIST)",
            "items": {
                "oneOf": [
                    {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 28, "maxItems": 28},
                        "minItems": 28,
                        "maxItems": 28,
                    },
                    {"type": "array", "items": {"type": "number"}, "minItems": 784, "maxItems": 784},
                ]
            },
        }
    ),
]


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    images: ImagesJson


class Prediction(BaseModel):
    label: int | None = Field(description="the most probable digit; null when the image is not a digit (see reason)")
    probabilities: list[float] = Field(description="10 probabilities, digits 0–9 (calibrated where the model is)")
    reason: str | None = Field(
        None, description="why the image is not a digit: a blank or solid page, or is_digit below the threshold"
    )
    is_digit: float | None = Field(
        None, description="P(the image is a digit), from models with a detector (metadata rejection)"
    )
    input: list[list[float]] | None = Field(None, description="the 28×28 model input (with ?include_input=true)")


class ClassifyResponse(BaseModel):
    predictions: list[Prediction]


class VersionInfo(BaseModel):
    version: int
    status: Literal["loading", "ready", "failed"]
    error: str | None = Field(None, description="why the version failed to load")
    onnx_sha256: str | None = None
    serving: bool = Field(False, description="the version that /v1 and unversioned /v2 calls use")
    resident: bool = Field(False, description="its sessions are in memory now (else it loads on its first use)")
    bytes: int | None = Field(None, description="memory its sessions take, measured at a load")
    load_peak_bytes: int | None = Field(
        None, description="the resident set's peak growth during its last load: the room a load needs in the budget"
    )


class TensorInfo(BaseModel):
    name: str
    datatype: str = Field(description="Triton datatype, e.g. FP32")
    shape: list[int] = Field(description="-1 for a variable dimension")


class ModelInfo(BaseModel):
    """One model: each field once. The render internals (the separable stage) and the training
    history stay in the model folder; `metadata` is the rest of the free-form training record."""

    name: str
    task: str | None = Field(description="image, digits or generic (a graph made elsewhere, served over V2)")
    version: int | None = Field(description="the version that /v1 and unversioned /v2 calls use")
    status: Literal["loading", "ready", "failed"]
    error: str | None = Field(description="why the model failed to load")
    provider: str | None = Field(description="onnxruntime execution provider, e.g. CPUExecutionProvider")
    description: str | None
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    metrics: dict = Field(default_factory=dict, description="metrics from training")
    metadata: dict = Field(
        default_factory=dict,
        description="provenance: how the model was made (architecture, encoding, source, training settings), free-form",
    )
    preview_url: str | None = Field(None, description="the training preview image, when the model ships one")
    versions: list[VersionInfo] = Field(default_factory=list, description="the loaded versions and their states")
    version_policy: str | None = Field(None, description="config.pbtxt's version_policy, e.g. 'latest 1'")
    max_batch_size: int | None = Field(None, description="rows (coordinates or images) per request and per run")
    width: int | None = Field(
        None,
        description="image models: the native width W in pixels (metadata.json "
        "source.size or source.native_size); null when not recorded (square)",
    )
    height: int | None = Field(
        None,
        description="image models: the native height H in pixels; x in [0,1] spans "
        "W pixels and y in [0,1] spans H pixels",
    )


class ModelSummary(BaseModel):
    name: str
    task: str | None = Field(description="image, digits or generic (a graph made elsewhere, served over V2)")
    status: Literal["loading", "ready", "failed"]
    error: str | None = Field(None, description="why the model failed to load")
    versions: list[int] = Field(description="the ready versions")
    url: str = Field(description="the model's detail, GET /v1/models/NAME")


class ModelList(BaseModel):
    models: list[ModelSummary]
    next: str | None = Field(None, description="the next page, when there is one (?after=LAST&limit=N)")
    login: str | None = Field(
        None, description="where to log in (the IIIF access service), when the service has API keys (docs/access.md)"
    )


class Live(BaseModel):
    status: Literal["live"] = "live"


class Ready(BaseModel):
    status: Literal["ready"] = "ready"
    models_ready: int = Field(description="models that answer, resident or listed to load on first use")
    models_failed: int
