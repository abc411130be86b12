"""The model spec: what a model in the repository is, as typed, validated objects.

A spec is read from (and written to) two files of a model folder:

* `config.pbtxt` (Triton's model configuration) holds the Triton fields: `max_batch_size`,
  `input` / `output`, `dynamic_batching.max_queue_delay_microseconds`, `version_policy`;
* `metadata.json` holds what Triton has no field for: the task, the input and output tensors
  in V2 terms (full shapes, batch dimension -1), the coordinate convention and free-form
  model metadata (a description).

Each version folder `N/` has its own `N/metadata.json` (`VersionRecord`): the sha256 of
`N/model.onnx` and the free-form training metadata of that version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from .access import Access
from .convention import CHANNELS, Convention
from .warmup import TASK_WARMUPS

NAME_MAX = 64  # characters of a model name
NAME_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.-]{{0,{NAME_MAX - 1}}}\Z")
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
V2_TO_TRITON = {
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "FP16": "TYPE_FP16",
    "INT64": "TYPE_INT64",
    "INT32": "TYPE_INT32",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "BOOL": "TYPE_BOOL",
    "BYTES": "TYPE_STRING",
}
TRITON_TO_V2 = {v: k for k, v in V2_TO_TRITON.items()}
ONNX_TO_V2 = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int64)": "INT64",
    "tensor(int32)": "INT32",
    "tensor(int8)": "INT8",
    "tensor(uint8)": "UINT8",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}
# W×H is the version's native pixel grid, `source.size` (or `source.native_size`), modelrepo.ImageSource; a model that
# records none is square. The text is unchanged since the first models, so every model written before stays valid.
IMAGE_COORDINATES = "x right, y down, unit square [0,1]^2, pixel centres at ((j+0.5)/W, (i+0.5)/H)"
# Any ONNX graph with config.pbtxt alone (no metadata.json), served over V2 as Triton serves it (autocomplete.py)
GENERIC = "generic"


class SpecError(ValueError):
    """A model folder that breaks the contract; the message names the file and the field."""


@dataclass(frozen=True)
class Tensor:
    """One input or output: V2 datatype and full shape, the batch dimension first (-1 = any)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, d: Any, where: str) -> "Tensor":
        if not isinstance(d, dict):
            raise SpecError(f"{where}: a tensor must be an object with name, datatype and shape, got {d!r}")
        name, dtype, shape = d.get("name"), d.get("datatype"), d.get("shape")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}: tensor name must be a non-empty string, got {name!r}")
        if dtype not in V2_TO_TRITON:
            raise SpecError(f"{where}: tensor '{name}' datatype {dtype!r} is not one of {', '.join(V2_TO_TRITON)}")
        if (
            not isinstance(shape, list)
            or not shape
            or not all(isinstance(s, int) and not isinstance(s, bool) and (s > 0 or s == -1) for s in shape)
        ):
            raise SpecError(f"{where}: tensor '{name}' shape must be a list of positive integers or -1, got {shape!r}")
        return cls(name, dtype, tuple(shape))


@dataclass(frozen=True)
class VersionPolicy:
    """Triton's version_policy: the `latest` N versions, `all`, or `specific` ones."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: Iterable[int]) -> list[int]:
        """The versions of `available` that this policy serves, ascending."""
        have = sorted(set(available))
        if self.kind == "all":
            return have
        if self.kind == "specific":
            return [v for v in have if v in self.versions]
        return have[-self.num_versions :] if self.num_versions > 0 else []

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest {self.num_versions}"
        return "all" if self.kind == "all" else f"specific {list(self.versions)}"


@dataclass(frozen=True)
class Task:
    """The tensors a task fixes and its default limits (docs/model-repository.md, "Tasks")."""

    input: Tensor
    outputs: tuple[Tensor, ...]
    max_batch_size: int  # rows per run: coordinates for image models, images for digits
    max_queue_delay_us: int  # batching delay written into new configs
    coordinates: str | None = None


TASKS = {
    "image": Task(
        Tensor("coords", "FP32", (-1, 2)),
        (Tensor("rgb", "FP32", (-1, 3)),),
        max_batch_size=262_144,
        max_queue_delay_us=500,
        coordinates=IMAGE_COORDINATES,
    ),
    "digits": Task(
        Tensor("images", "FP32", (-1, 1, 28, 28)),
        (Tensor("logits", "FP32", (-1, 10)), Tensor("probabilities", "FP32", (-1, 10))),
        max_batch_size=256,
        max_queue_delay_us=2000,
    ),
}


@dataclass(frozen=True)
class ModelSpec:
    """A model's contract: everything the service checks at load and serves from."""

    name: str
    task: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    max_batch_size: int
    max_queue_delay_us: int | None = None
    coordinates: str | None = None
    version_policy: VersionPolicy = VersionPolicy()
    warmups: tuple = ()  # modelrepo.warmup.Warmup entries (config.pbtxt model_warmup)
    response_cache: bool = False  # config.pbtxt response_cache { enable: true }
    access: Access = Access()  # config.pbtxt parameters access, access_scopes, access_substitute
    convention: Convention | None = None  # an image network made elsewhere: config.pbtxt parameters (convention.py)
    metadata: dict = field(default_factory=dict, compare=False)  # free-form: description, ...

    @classmethod
    def for_task(
        cls,
        name: str,
        task: str,
        *,
        max_batch_size: int | None = None,
        max_queue_delay_us: int | None = None,
        metadata: dict | None = None,
        inputs: Iterable[Tensor] | None = None,
        outputs: Iterable[Tensor] | None = None,
    ) -> "ModelSpec":
        """The spec of a new model of `task`, with the task's tensors and default limits."""
        if task not in TASKS:
            raise SpecError(f"unknown task '{task}'; valid: {', '.join(TASKS)}")
        t = TASKS[task]
        spec = cls(
            name=name,
            task=task,
            inputs=tuple(inputs or (t.input,)),
            outputs=tuple(outputs or t.outputs),
            max_batch_size=t.max_batch_size if max_batch_size is None else max_batch_size,
            max_queue_delay_us=t.max_queue_delay_us if max_queue_delay_us is None else max_queue_delay_us,
            coordinates=t.coordinates,
            warmups=TASK_WARMUPS.get(task, ()),
            metadata=dict(metadata or {}),
        )
        spec.validate()
        return spec

    @property
    def input(self) -> Tensor:
        return self.inputs[0]

    def output(self, name: str) -> Tensor | None:
        return next((o for o in self.outputs if o.name == name), None)

    def with_(self, **changes) -> "ModelSpec":
        return replace(self, **changes)

    def validate(self) -> None:
        """Raise SpecError unless the spec is one the service can serve."""
        if not NAME_RE.match(self.name):
            raise SpecError(f"model name '{self.name}' must be letters, digits, '_', '-' or '.' (at most 64)")
        if self.task == GENERIC or self.convention is not None:
            self._validate_foreign()
        else:
            self._validate_task()
        if not isinstance(self.max_batch_size, int) or self.max_batch_size < 1:
            raise SpecError(
                f"config.pbtxt: max_batch_size must be at least 1 for a batched '{self.task}' model, "
                f"got {self.max_batch_size}"
            )
        p = self.version_policy
        if (
            p.kind not in ("latest", "all", "specific")
            or (p.kind == "latest" and p.num_versions < 1)
            or (p.kind == "specific" and not p.versions)
        ):
            raise SpecError(f"config.pbtxt: version_policy {p.describe()} serves no version")

    def _validate_task(self) -> None:
        if self.task not in TASKS:
            raise SpecError(f"metadata.json: unknown task '{self.task}'; valid: {', '.join(TASKS)}")
        want = TASKS[self.task]
        if len(self.inputs) != 1 or not _fits(self.inputs[0], want.input):
            raise SpecError(
                f"metadata.json: a '{self.task}' model takes one input {want.input.to_json()}, "
                f"the spec says {[t.to_json() for t in self.inputs]}"
            )
        names = {o.name: o for o in self.outputs}
        for o in want.outputs:
            if o.name not in names or not _fits(names[o.name], o):
                raise SpecError(
                    f"metadata.json: a '{self.task}' model gives the outputs "
                    f"{[t.to_json() for t in want.outputs]}, the spec says "
                    f"{[t.to_json() for t in self.outputs]}"
                )

    def _validate_foreign(self) -> None:
        """A graph made elsewhere (modelrepo/autocomplete.py): one input, every dimension but the batch fixed; an image
        network's input [N, 2] and first output [N, 1|3|4], float."""
        if self.task not in (GENERIC, "image"):
            raise SpecError(f"config.pbtxt: unknown task '{self.task}'")
        if len(self.inputs) != 1:
            raise SpecError(
                f"config.pbtxt input: the graph takes {len(self.inputs)} inputs "
                f"({', '.join(t.name for t in self.inputs) or 'none'}); this server serves graphs of one input"
                + (" (an image model's is its [N, 2] coordinates)" if self.convention else "")
            )
        if not self.outputs:
            raise SpecError("config.pbtxt output: the graph has no outputs")
        if self.inputs[0].datatype == "BYTES":
            raise SpecError(f"config.pbtxt input '{self.inputs[0].name}': TYPE_STRING inputs are not served")
        for kind, tensors in (("input", self.inputs), ("output", self.outputs)):
            for t in tensors:
                if len(t.shape) < 1 or t.shape[0] != -1 or any(d < 1 for d in t.shape[1:]):
                    raise SpecError(
                        f"config.pbtxt {kind} '{t.name}': shape {list(t.shape)} must have a dynamic batch dimension "
                        "first and every other dimension fixed (batched requests are joined along the first)"
                    )
        if self.convention is None:
            return
        x, out = self.inputs[0], self.outputs[0]
        if x.datatype not in ("FP32", "FP16", "FP64") or x.shape != (-1, 2):
            raise SpecError(
                f"config.pbtxt input '{x.name}': an image model's input is float coordinates [N, 2], the graph's is "
                f"{x.datatype} {list(x.shape)}"
            )
        if out.datatype not in ("FP32", "FP16", "FP64") or len(out.shape) != 2 or out.shape[1] not in CHANNELS:
            raise SpecError(
                f"config.pbtxt output '{out.name}': an image model's first output is float values [N, 1], [N, 3] or "
                f"[N, 4], the graph's is {out.datatype} {list(out.shape)}"
            )

    def to_json(self) -> dict:
        """metadata.json's contents (the Triton fields go to config.pbtxt)."""
        out = {
            "name": self.name,
            "task": self.task,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }
        if self.coordinates:
            out["coordinates"] = self.coordinates
        return {**out, **{k: v for k, v in self.metadata.items() if k not in out}}


def _fits(found: Tensor, want: Tensor) -> bool:
    return (
        found.name == want.name
        and found.datatype == want.datatype
        and len(found.shape) == len(want.shape)
        and all(w == -1 or f == w for f, w in zip(found.shape, want.shape))
    )


@dataclass(frozen=True)
class VersionRecord:
    """`N/metadata.json`: one version's sha256 and its free-form training metadata."""

    version: int
    onnx_sha256: str
    metadata: dict = field(default_factory=dict, compare=False)
    recorded: bool = True  # False: no N/metadata.json (a model made elsewhere), the sha256 is the file's own

    def to_json(self) -> dict:
        return {
            "version": self.version,
            **{k: v for k, v in self.metadata.items() if k != "version"},
            "onnx_sha256": self.onnx_sha256,
        }

    @classmethod
    def from_json(cls, d: Any, version: int) -> "VersionRecord":
        where = f"{version}/metadata.json"
        if not isinstance(d, dict):
            raise SpecError(f"{where} is not a JSON object")
        if d.get("version", version) != version:
            raise SpecError(f"{where}: version {d.get('version')!r} does not match its folder {version}")
        sha = d.get("onnx_sha256")
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise SpecError(f"{where}: onnx_sha256 must be 64 lowercase hex digits, got {sha!r}")
        return cls(version, sha, {k: v for k, v in d.items() if k not in ("version", "onnx_sha256")})
