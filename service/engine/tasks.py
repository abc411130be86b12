"""Per-task runtimes, in the style of KServe's `Model`: preprocess → predict → postprocess.

`predict` is `ModelRuntime.predict`, the one place every inference runs and is counted; the
dataplane (service/engine/dataplane.py) runs it through the batcher, renders call it per tile from
their worker threads. V2 infer needs no task-specific steps: its pre- and postprocessing
(tensors in, tensors out) is the same for every task (service/api/v2/infer.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from modelrepo import ModelSpec

from ..errors import BadInput, ModelLoadError
from ..geometry.sampling import Background, fill_points, model_coords
from .blocks import BlockSet
from .json_numbers import pixel_images
from .preprocess import SIDE, decode, images_from_json, mnist_like
from .runtime import ModelRuntime, RuntimeOptions


class ImageRuntime(ModelRuntime):
    """coords [N, 2] → rgb [N, 3]. A block model's version (metadata `blocks`) answers from its blocks
    (service/engine/blocks.py), which its requests hold; its own session is the overview, for coarse renders."""

    blocks: BlockSet | None = None

    def describe(self) -> bool:
        if super().describe():
            try:
                self._read_blocks()
            except ModelLoadError:
                pass  # failed, with the reason
        return self.ready

    def _load(self) -> None:
        super()._load()
        self._read_blocks()

    def _read_blocks(self) -> None:
        """The block set of the version's layout, made once per record (a failed layout fails the version)."""
        if self.blocks is not None and self.blocks.record is self.record:
            return
        try:
            blocks = BlockSet.from_metadata(self, self.record.metadata)
        except ModelLoadError as e:
            self.status, self.error = "failed", str(e)
            self.blocks = None
            raise
        self.blocks = blocks

    def needed_blocks(self, x: np.ndarray) -> list:
        return [] if self.blocks is None else self.blocks.needed(x)

    def predict(self, x: np.ndarray, requests: int = 1) -> dict[str, np.ndarray]:
        if self.blocks is None:
            return super().predict(x, requests)
        start = time.perf_counter()
        rgb = self.blocks.predict(np.ascontiguousarray(x, np.float32))
        if self.options.metrics is not None:
            self.options.metrics.execution(self.name, len(x), requests, time.perf_counter() - start, self.version)
        return {"rgb": rgb}

    def preprocess(self, coords, matrix: np.ndarray) -> np.ndarray:
        """The model coordinates [N, 2] of the query points under the 2×3 sampling matrix."""
        try:
            return model_coords(matrix, np.asarray(coords, dtype=np.float64))
        except ValueError as e:
            raise BadInput(str(e)) from None

    def graph_input(self, src: np.ndarray) -> np.ndarray:
        """What the graph is fed for the model coordinates `src`: themselves as float32, or a network made
        elsewhere's own coordinates (its declared convention, service/engine/foreign.py)."""
        return src.astype(np.float32) if self.foreign is None else self.foreign.coords(src)

    def postprocess(self, outputs: dict[str, np.ndarray], src: np.ndarray, background: Background) -> np.ndarray:
        """RGB in [0,1] per point, the background painted where `src` is outside the unit square."""
        foreign = self.foreign
        rgb = outputs["rgb"] if foreign is None else foreign.rgb(outputs[foreign.output])
        return fill_points(rgb, src, background)


BLANK_SPREAD = 1e-3  # an image whose pixels all lie within this of each other is a blank (or solid) page


class DigitsRuntime(ModelRuntime):
    """images [N, 1, 28, 28] → logits, probabilities [N, 10] (and is_digit [N, 1] with a "not a digit" rule)."""

    def preprocess(self, images: list, limit: int) -> np.ndarray:
        """MNIST-style pixels from JSON (28×28 nested or 784 flat lists in [0,1]), as they are: well-formed
        ones into numpy in one pass, anything else through the checks that name the bad image."""
        x = pixel_images(images, SIDE) if len(images) <= limit else None
        if x is None or x.min() < 0.0 or x.max() > 1.0:
            return images_from_json(images, limit)
        return x.astype(np.float32)

    def pixel_array(self, values: Any) -> np.ndarray | None:
        """JSON pixels known to be numbers (`numbers.only_numbers`) as [N, 1, 28, 28] float32 in one numpy pass, when
        they are N images of 28×28 or 784, all finite and in [0, 1]; else None (`preprocess` then names what is
        wrong, or the row limit answers first)."""
        try:
            x = np.array(values, np.float64)
        except (ValueError, OverflowError):  # lists of unequal length, an integer beyond float64
            return None
        if x.ndim not in (2, 3) or len(x) == 0 or x.shape[1:] not in ((SIDE, SIDE), (SIDE * SIDE,)):
            return None
        if not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0:
            return None
        return x.reshape(len(x), 1, SIDE, SIDE).astype(np.float32)

    def preprocess_files(self, files: list[tuple[bytes, str]], max_pixels: int) -> np.ndarray:
        """Uploaded PNG/JPEG files made MNIST-like (see service/engine/preprocess.py)."""
        return np.stack([mnist_like(decode(data, name, max_pixels), name) for data, name in files])[:, None]

    def rejection(self) -> tuple[str, float] | None:
        """(output, threshold) of the version's "not a digit" rule (metadata `rejection`, written by
        training.digits.reject), or None when it has none or the model lacks that output."""
        rule = self.metadata.get("rejection")
        if not isinstance(rule, dict) or rule.get("output") not in {t.name for t in self.spec.outputs}:
            return None
        try:
            return str(rule["output"]), float(rule["threshold"])
        except (KeyError, TypeError, ValueError):
            return None

    def reasons(self, outputs: dict[str, np.ndarray], x: np.ndarray) -> list[str | None]:
        """Why each image is not a digit, None for a digit: a page of one value (blank, solid), or the model's
        is_digit below its threshold. Colon-free: the classification extension's strings carry them."""
        flat = x.reshape(len(x), -1)
        lo, hi = flat.min(axis=1), flat.max(axis=1)
        rule = self.rejection()
        score = outputs[rule[0]].reshape(len(x), -1)[:, 0] if rule is not None else None
        out: list[str | None] = []
        for i in range(len(x)):
            if hi[i] - lo[i] < BLANK_SPREAD:
                out.append(f"blank page (every pixel is {float(lo[i]):.3g})")
            elif score is not None and score[i] < rule[1]:
                out.append(f"not a digit (is_digit {float(score[i]):.3f} is below the threshold {rule[1]:.3f})")
            else:
                out.append(None)
        return out

    def postprocess(self, outputs: dict[str, np.ndarray], x: np.ndarray, include_input: bool = False) -> list[dict]:
        """One prediction per image: the label (null, with the reason, for what is not a digit), the rounded
        probabilities, is_digit where the model has it (and the input, if asked), as numpy arrays for
        `jsonbody.json_response` (orjson writes them without a Python list)."""
        probs = np.round(outputs["probabilities"].astype(np.float64), 6)
        rule = self.rejection()
        digit = np.round(outputs[rule[0]].reshape(len(x), -1)[:, 0].astype(np.float64), 6) if rule else None
        preds = []
        for i, (label, p, why) in enumerate(zip(np.argmax(probs, axis=1).tolist(), probs, self.reasons(outputs, x))):
            pred = {"label": label if why is None else None, "probabilities": p}
            if why is not None:
                pred["reason"] = why
            if digit is not None:
                pred["is_digit"] = float(digit[i])
            preds.append(pred)
        if include_input:
            for pred, img in zip(preds, np.round(x[:, 0].astype(np.float64), 4)):
                pred["input"] = img
        return preds


RUNTIMES: dict[str, type[ModelRuntime]] = {"image": ImageRuntime, "digits": DigitsRuntime, "generic": ModelRuntime}


def runtime_for(path: Path, spec: ModelSpec, version: int, options: RuntimeOptions) -> ModelRuntime:
    """The runtime class of the spec's task for version `version` (not loaded yet)."""
    return RUNTIMES[spec.task](path, spec, version, options)
