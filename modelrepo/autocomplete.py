"""A model folder without metadata.json: any ONNX graph, its config.pbtxt completed from the graph the way Triton's
onnxruntime backend auto-completes one (docs/model-repository.md, "Models made elsewhere").

What config.pbtxt leaves out is read from the graph of the highest version folder: the inputs and outputs (names,
datatypes, dimensions), and `max_batch_size` when every tensor's first dimension is dynamic (Triton's default of 4
rows for a generic model, 262,144 coordinates for an image model), with `dynamic_batching {}`. What it declares is
checked against the graph. `parameters` that declare an image convention (modelrepo/convention.py) make it an image
model; else it is `generic`, served over V2 alone. The graph is read with protobuf (modelrepo/onnxproto.py), so
nothing here needs onnx or onnxruntime.
"""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from .convention import Convention
from .onnxproto import model_class
from .spec import GENERIC, TRITON_TO_V2, V2_TO_TRITON, ModelSpec, SpecError, Tensor
from .triton import apply_config, model_config_class, parse_config

MODEL_FILE = "model.onnx"
DEFAULT_BATCH = {GENERIC: 4, "image": 262_144}  # Triton's default-max-batch-size; the image task's rows
ONNX_V2 = {1: "FP32", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 8: "BYTES", 9: "BOOL", 10: "FP16", 11: "FP64"}
EXTERNAL = 1  # TensorProto.DataLocation


def graph_file(folder: Path) -> Path | None:
    """The highest version's model.onnx on local disk (the one Triton completes a config from), or None."""
    versions = sorted(
        (int(p.name) for p in Path(folder).iterdir() if p.is_dir() and p.name.isdigit() and p.name == str(int(p.name))),
        reverse=True,
    )
    return next((f for v in versions if (f := Path(folder) / str(v) / MODEL_FILE).is_file()), None)


def read_graph(path: Path):
    """The file's ModelProto (protobuf); SpecError when it is not one."""
    try:
        return model_class().FromString(Path(path).read_bytes())
    except (OSError, DecodeError, RuntimeWarning) as e:
        raise SpecError(f"{path.parent.name}/{path.name} is not an ONNX file: {e}") from None


def signature(model, where: str) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """The graph's inputs (initializers excluded) and outputs as V2 tensors, unknown dimensions -1."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for kind, values in (
        ("input", [v for v in model.graph.input if v.name not in inits]),
        ("output", model.graph.output),
    ):
        tensors = []
        for v in values:
            tt = v.type.tensor_type
            dtype = ONNX_V2.get(tt.elem_type)
            if dtype is None:
                raise SpecError(
                    f"{where}: {kind} '{v.name}' has ONNX element type {tt.elem_type}, which V2 does not serve"
                )
            dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim)
            tensors.append(Tensor(v.name, dtype, dims))
        out.append(tuple(tensors))
    if not out[0]:
        raise SpecError(f"{where} has no inputs: config.pbtxt input cannot be completed and nothing can be sent to it")
    if not out[1]:
        raise SpecError(f"{where} has no outputs")
    return out[0], out[1]


def _tensors(graph):
    """Every tensor of a graph that may keep its data elsewhere: initializers, sparse ones, and the tensor attributes of
    its nodes (Constant), in its subgraphs too (If, Loop, Scan bodies)."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _tensors(sub)


def check_external_data(path: Path, folder: Path) -> None:
    """SpecError when a tensor of the graph keeps its data in a file outside the model's folder (or names none).
    Only a file that holds the word `location` is parsed: a graph without external data never is."""
    data = Path(path).read_bytes()
    if b"location" not in data:
        return
    try:
        model = model_class().FromString(data)
    except DecodeError:
        return  # not ONNX: the session says so
    root = Path(folder).resolve()
    for tensor in _tensors(model.graph):
        if tensor.data_location != EXTERNAL:
            continue
        where = {e.key: e.value for e in tensor.external_data}.get("location", "")
        target = (Path(path).parent / where).resolve()
        if not where or os.path.isabs(where) or not target.is_relative_to(root):
            raise SpecError(
                f"{Path(path).parent.name}/{Path(path).name}: tensor '{tensor.name[:60]}' keeps its data in "
                f"'{where[:80]}', outside the model folder (external_data location)"
            )


def _config(folder: Path):
    pbtxt = Path(folder) / "config.pbtxt"
    try:
        return parse_config(pbtxt.read_text()), True
    except FileNotFoundError:
        return model_config_class()(), False
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"config.pbtxt is unreadable: {e}") from None
    except text_format.ParseError as e:
        raise SpecError(f"config.pbtxt does not parse as Triton's ModelConfig: {e}") from None


def _declared(entries, batched: bool, kind: str) -> list[tuple[str, str | None, tuple[int, ...] | None, list]]:
    """config.pbtxt's `input` or `output` entries: (name, V2 datatype or None, full shape or None, its dims)."""
    out = []
    for e in entries:
        enum = e.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number.get(e.data_type)
        dtype = TRITON_TO_V2.get(enum.name) if enum is not None and e.data_type else None
        if e.data_type and dtype is None:
            raise SpecError(
                f"config.pbtxt {kind} '{e.name}': data_type {enum.name if enum else e.data_type} is not served"
            )
        dims = tuple(e.dims)
        out.append((e.name, dtype, ((-1, *dims) if batched else dims) if e.dims else None, list(dims)))
    return out


def _merge(declared, graph: tuple[Tensor, ...] | None, kind: str, where: str) -> tuple[Tensor, ...]:
    """The declared entries completed from the graph, and checked against it."""
    if graph is None:
        if any(d is None or s is None for _, d, s, _ in declared):
            raise SpecError(
                f"config.pbtxt {kind}: an entry without data_type or dims, and no model.onnx to complete it"
            )
        return tuple(Tensor(n, d, s) for n, d, s, _ in declared)
    if not declared:
        return graph
    by_name = {t.name: t for t in graph}
    out = []
    for name, dtype, shape, dims in declared:
        t = by_name.get(name)
        if t is None:
            raise SpecError(
                f"config.pbtxt {kind} '{name}': {where} has no {kind} of that name (it has {', '.join(by_name)})"
            )
        if dtype is not None and dtype != t.datatype:
            raise SpecError(f"config.pbtxt {kind} '{name}': data_type {V2_TO_TRITON[dtype]}, {where} says {t.datatype}")
        if shape is not None and (
            len(shape) != len(t.shape) or any(a != b and -1 not in (a, b) for a, b in zip(shape, t.shape))
        ):
            raise SpecError(
                f"config.pbtxt {kind} '{name}': dims {dims}, {where} says {list(t.shape[1:])} after the batch"
            )
        out.append(Tensor(name, t.datatype, tuple(a if a != -1 else b for a, b in zip(shape or t.shape, t.shape))))
    if kind == "input" and len(out) != len(graph):
        missing = [t.name for t in graph if t.name not in {d[0] for d in declared}]
        raise SpecError(
            f"config.pbtxt input: {where} also takes {', '.join(missing)}, which config.pbtxt does not declare"
        )
    return tuple(out)


def _declares_all(cfg) -> bool:
    """Whether the config declares every input and output in full (no graph is needed to complete it)."""
    return bool(cfg.input and cfg.output and all(e.dims and e.data_type for e in (*cfg.input, *cfg.output)))


def needs_graph(folder: Path) -> bool:
    """Whether the spec of the folder is read from a graph: no metadata.json, and a config.pbtxt that is missing or
    declares its tensors only in part (a repository on S3 fetches the highest version's model.onnx first)."""
    if (Path(folder) / "metadata.json").exists():
        return False
    try:
        return not _declares_all(_config(folder)[0])
    except SpecError:
        return False  # read_spec says what is wrong


def read_foreign_spec(folder: Path) -> ModelSpec:
    """The spec of a model folder without metadata.json: config.pbtxt (when present) completed from the graph."""
    folder = Path(folder)
    cfg, present = _config(folder)
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    task = "image" if Convention.declared(params) else GENERIC
    path = graph_file(folder)
    if path is None and not (present and _declares_all(cfg)):
        raise SpecError("no metadata.json, and no version's model.onnx to complete config.pbtxt from")
    where = f"the graph of version {path.parent.name}" if path is not None else "the graph"
    graph = signature(read_graph(path), where) if path is not None else None
    batched = cfg.max_batch_size > 0
    inputs = _merge(_declared(cfg.input, batched, "input"), graph and graph[0], "input", where)
    outputs = _merge(_declared(cfg.output, batched, "output"), graph and graph[1], "output", where)
    if not batched:  # Triton's max_batch_size 0: the dims are whole shapes; served batched when the first is dynamic
        fixed = [t for t in (*inputs, *outputs) if not t.shape or t.shape[0] != -1]
        if fixed:
            t = fixed[0]
            raise SpecError(
                f"config.pbtxt max_batch_size: {where}'s tensor '{t.name}' has the fixed first dimension "
                f"{list(t.shape[:1])}; this server serves models whose first dimension is a dynamic batch"
            )
        cfg.max_batch_size = DEFAULT_BATCH[task]
        cfg.dynamic_batching.SetInParent()
    for kind, tensors in (("input", inputs), ("output", outputs)):
        cfg.ClearField(kind)
        for t in tensors:
            getattr(cfg, kind).add(name=t.name, data_type=V2_TO_TRITON[t.datatype], dims=list(t.shape[1:]))
    spec = ModelSpec(folder.name, task, inputs, outputs, cfg.max_batch_size)
    spec = apply_config(spec, cfg)
    spec.validate()
    if spec.convention is not None and spec.convention.native is not None:  # the native grid, as our models record it
        spec = spec.with_(metadata={"source": {"size": list(spec.convention.native)}})
    return spec
