"""Triton's `model_warmup` (config.pbtxt), as typed values: what to run on a version before it serves.

    model_warmup {
      name: "random_coords"  batch_size: 8192  count: 2
      inputs { key: "coords" value: { data_type: TYPE_FP32  dims: 2  random_data: true } }
    }

Each input is `zero_data`, `random_data` or `input_data_file` (a file of raw little-endian tensor bytes in the
model's `warmup/` folder, as in Triton). `batch_size` 0 means 1 and `count` 0 means one run, as in Triton.
Whether an input exists, and whether its file does, is checked when a version loads (service/engine/warmup.py),
so that a bad warmup fails that version with the reason, as Triton fails the model instance.
Reading and writing the config.pbtxt entries: modelrepo/triton.py.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("zero_data", "random_data", "input_data_file")


@dataclass(frozen=True)
class WarmupInput:
    name: str
    datatype: str  # V2 name, e.g. FP32
    dims: tuple[int, ...]  # without the batch dimension
    kind: str  # one of KINDS
    file: str = ""  # input_data_file: a name inside the model's warmup/ folder


@dataclass(frozen=True)
class Warmup:
    name: str
    batch_size: int
    count: int
    inputs: tuple[WarmupInput, ...]

    @property
    def runs(self) -> int:
        return max(1, self.count)

    @property
    def rows(self) -> int:
        return max(1, self.batch_size)


# What `python -m training` exports write for each task (ModelSpec.for_task): a full render tile of random
# coordinates for an image model (the batch a render sends, service/settings.py render_tile_samples), and a
# dynamic batch of blank images for digits; twice, so that the second run meets warm allocator arenas.
TASK_WARMUPS = {
    "image": (Warmup("random_coords", 8192, 2, (WarmupInput("coords", "FP32", (2,), "random_data"),)),),
    "digits": (Warmup("zero_images", 32, 2, (WarmupInput("images", "FP32", (1, 28, 28), "zero_data"),)),),
}
