"""Typed serving fields that an image model's version metadata carries beside its free-form
provenance, read here so that the service never walks the raw dict for them."""

from __future__ import annotations

import hashlib
import math
import re
import struct
from dataclasses import dataclass

MAX_SIDE = 65_536  # the largest width or height the service renders


def _size(value) -> tuple[int, int] | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIDE for v in value)
    ):
        return value[0], value[1]
    return None


@dataclass(frozen=True)
class ImageSource:
    """metadata `source`: the model's pixel grid `size` [W, H] and, for an image defined at a size of its own
    (the IIIF test image), that `native_size`, which overrides it. Either is None when absent or malformed.

    The geometry (docs/model-repository.md): coordinates stay (x, y) in [0,1]², x across the width, y down
    the height, so pixel (i, j) of the W×H image has its centre at ((j+0.5)/W, (i+0.5)/H) and a model
    unit step in x is W pixels, in y H pixels. A model that records no size is square."""

    size: tuple[int, int] | None = None
    native_size: tuple[int, int] | None = None

    @classmethod
    def from_metadata(cls, metadata: dict) -> "ImageSource":
        source = metadata.get("source") if isinstance(metadata, dict) else None
        if not isinstance(source, dict):
            return cls()
        return cls(_size(source.get("size")), _size(source.get("native_size")))

    @property
    def native(self) -> tuple[int, int] | None:
        """The model's native pixel grid (W, H): `native_size`, else `size`; None when neither is recorded."""
        return self.native_size or self.size

    @property
    def aspect(self) -> float:
        """W / H of the native grid; 1.0 (square) when the model records no size."""
        native = self.native
        return native[0] / native[1] if native else 1.0


ONNX_WIDTH, ONNX_HEIGHT = "image_width", "image_height"  # ONNX metadata_props written by the training export


def check_onnx_geometry(source: ImageSource, props: dict[str, str], version: int) -> None:
    """ContractError unless the ONNX graph's `image_width`/`image_height` metadata (when it has them) agree
    with the version's recorded `source.size`. A graph without them (older exports) is not checked."""
    if ONNX_WIDTH not in props and ONNX_HEIGHT not in props:
        return
    where = f"the ONNX metadata of version {version}"
    try:
        onnx_size = (int(props[ONNX_WIDTH]), int(props[ONNX_HEIGHT]))
    except (KeyError, ValueError):
        raise ContractError(
            f"{where} needs integer {ONNX_WIDTH} and {ONNX_HEIGHT}, got "
            f"{props.get(ONNX_WIDTH)!r} × {props.get(ONNX_HEIGHT)!r}"
        ) from None
    if source.size is None:
        raise ContractError(
            f"{where} says {onnx_size[0]}×{onnx_size[1]} pixels, but {version}/metadata.json records no source.size"
        )
    if onnx_size != source.size:
        raise ContractError(
            f"{where} says {onnx_size[0]}×{onnx_size[1]} pixels, {version}/metadata.json "
            f"source.size says {source.size[0]}×{source.size[1]}: the geometry disagrees"
        )


# -- the separable stage ---------------------------------------------------------------------------
SEPARABLE_BODY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.onnx\Z")  # a file name beside model.onnx


class ContractError(ValueError):
    """A serving field of metadata.json that breaks the contract; the message names it."""


def _stage_digest(P, phase) -> str:
    """sha256 of the first stage as little-endian float64 bytes, P row by row, then phase."""
    flat = [v for row in P for v in row] + list(phase)
    return hashlib.sha256(struct.pack(f"<{len(flat)}d", *flat)).hexdigest()


def _numbers(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


@dataclass(frozen=True)
class SeparableStage:
    """metadata `separable`: the image model's first stage, feature k = sin(P[k]·x + phase[k]) for a
    coordinate x, and the body graph (features → rgb) stored beside model.onnx. training/separable.py
    writes it with `to_metadata`, the service reads it with `from_metadata` (docs/model-repository.md)."""

    P: tuple[tuple[float, float], ...]
    phase: tuple[float, ...]
    body: str = "body.onnx"
    body_sha256: str = ""
    input: str = "features"

    @property
    def features(self) -> int:
        return len(self.P)

    @property
    def stage_sha256(self) -> str:
        return _stage_digest(self.P, self.phase)

    def to_metadata(self, **extra) -> dict:
        return {
            "body": self.body,
            "body_sha256": self.body_sha256,
            "input": self.input,
            "features": self.features,
            "P": [list(row) for row in self.P],
            "phase": list(self.phase),
            **extra,
            "stage_sha256": self.stage_sha256,
        }

    @classmethod
    def first_stage(cls, entry: dict) -> tuple[tuple[tuple[float, float], ...], tuple[float, ...]]:
        """P and phase of an entry, checked: number arrays, finite, [F, 2] and [F], matching stage_sha256."""
        P, phase = entry.get("P"), entry.get("phase")
        if not (isinstance(P, list) and all(_numbers(row) for row in P) and _numbers(phase)):
            raise ContractError("metadata.json separable: P and phase must be number arrays")
        shape_p = [len(P), *({len(row) for row in P} or {2})]
        if (
            not P
            or len(shape_p) != 2
            or shape_p[1] != 2
            or len(phase) != len(P)
            or not all(math.isfinite(v) for row in P for v in row)
            or not all(math.isfinite(v) for v in phase)
        ):
            raise ContractError(
                f"metadata.json separable: P must be finite [F, 2] and phase [F], got {shape_p} and {[len(phase)]}"
            )
        digest = _stage_digest(P, phase)
        if digest != entry.get("stage_sha256"):
            raise ContractError(
                f"metadata.json separable: sha256 of P and phase ({digest[:12]}…) does not match "
                f"stage_sha256 ({str(entry.get('stage_sha256'))[:12]}…)"
            )
        return tuple(tuple(map(float, row)) for row in P), tuple(map(float, phase))

    @classmethod
    def from_metadata(cls, entry) -> "SeparableStage":
        if not isinstance(entry, dict):
            raise ContractError("metadata.json separable: expected an object")
        P, phase = cls.first_stage(entry)
        body, digest, name = entry.get("body"), entry.get("body_sha256"), entry.get("input", "features")
        if not isinstance(body, str) or not SEPARABLE_BODY.match(body):
            raise ContractError(f"metadata.json separable: body must be a file name such as body.onnx, got {body!r}")
        if not isinstance(digest, str) or not isinstance(name, str):
            raise ContractError("metadata.json separable: body_sha256 and input must be strings")
        return cls(P, phase, body, digest, name)
