"""ONNX export with a parity check against torch.

Export refuses to return a model whose onnxruntime output differs from torch by
more than the tolerance: a model that does not reproduce training is never written.
"""

from __future__ import annotations

import io
import logging
import warnings

import numpy as np
import torch
from torch import nn

from modelrepo import ctxcode, onnxfile

log = logging.getLogger(__name__)
OPSET = 17


class ExportParityError(RuntimeError):
    pass


def register_bitwise() -> None:
    """torch's TorchScript exporter has no symbolic for aten::bitwise_xor / bitwise_and (e.g. a spatial hash);
    ONNX has BitwiseXor and BitwiseAnd since opset 18, and onnxruntime runs them on int64."""
    from torch.onnx import register_custom_op_symbolic

    register_custom_op_symbolic("aten::bitwise_xor", lambda g, a, b: g.op("BitwiseXor", a, b), 18)
    register_custom_op_symbolic("aten::bitwise_and", lambda g, a, b: g.op("BitwiseAnd", a, b), 18)


def export_onnx(
    module: nn.Module, example: torch.Tensor, input_name: str, output_names: list[str], opset: int = OPSET
) -> bytes:
    """Trace `module` on `example` (batch dim 0 dynamic) and return the ONNX bytes.

    A module whose `export_plan(input_name)` gives a plan (an image model whose encoding has its own layout,
    training/encodings/base.py `ExportPlan`) is written by that plan: the head traced here, the plan's nodes in
    front of it."""
    module = module.eval().cpu()
    plan = module.export_plan(input_name) if hasattr(module, "export_plan") else None
    if plan is not None:
        head = trace(plan.head, torch.rand(8, plan.features), plan.head_input, output_names, opset)
        return plan.compose(head, input_name)
    return trace(module, example, input_name, output_names, opset)


def trace(module: nn.Module, example: torch.Tensor, input_name: str, output_names: list[str], opset: int) -> bytes:
    """torch.onnx.export (TorchScript tracing) of `module` on `example`, batch dim 0 dynamic."""
    if opset >= 18:
        register_bitwise()
    buf = io.BytesIO()
    dyn = {input_name: {0: "N"}, **{n: {0: "N"} for n in output_names}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example.cpu(),),
            buf,
            input_names=[input_name],
            output_names=output_names,
            dynamic_axes=dyn,
            opset_version=opset,
            dynamo=False,
        )
    return buf.getvalue()


def set_metadata_props(onnx_bytes: bytes, props: dict[str, str]) -> bytes:
    """The graph with `props` in its metadata_props (replacing keys of the same name)."""
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    kept = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model.SerializeToString()


def ort_session(onnx_bytes: bytes, optimize: bool = True, arena: bool = True):
    """An onnxruntime CPU session; `optimize=False`: the graph as written, no constant folding or fusion;
    `arena=False`: each tensor allocated and freed on its own, not from onnxruntime's arena (which grows in powers
    of two and keeps what it took)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if not arena:
        opts.enable_cpu_mem_arena = False
    if ctxcode.DOMAIN.encode() in onnx_bytes:  # context-coded tables: this service's DecodeTable, done here
        onnx_bytes = onnxfile.decoded(onnx_bytes)
    return ort.InferenceSession(onnx_bytes, sess_options=opts, providers=["CPUExecutionProvider"])


def check_parity(
    module: nn.Module,
    onnx_bytes: bytes,
    inputs: np.ndarray,
    input_name: str,
    output_names: list[str],
    atol: float = 1e-5,
) -> dict:
    """Run torch and onnxruntime on the same inputs; raise if any output differs by more than atol. The session runs
    the graph as written: its optimisations would fold a grid model's coded tables and packed corners into constants
    first, 1.5 GB for a 4 MP model (a fit's peak RSS, docs/benchmarks.md "giant"), to run 4,096 points. The run
    still decodes the coded tables (tens of bytes a value in int64 temporaries, a one-model fit's peak), so it runs
    without onnxruntime's arena, whose doubling kept ~220 MiB more at 12 MP (docs/benchmarks.md, "one-model rule")."""
    module = module.eval().cpu()
    with torch.no_grad():
        ref = module(torch.from_numpy(inputs))
    refs = ref if isinstance(ref, tuple) else (ref,)
    got = ort_session(onnx_bytes, optimize=False, arena=False).run(output_names, {input_name: inputs})
    report = {}
    for name, r, g in zip(output_names, refs, got):
        diff = float(np.max(np.abs(r.numpy() - g))) if g.size else 0.0
        report[name] = diff
        if not diff <= atol:
            raise ExportParityError(f"onnxruntime output '{name}' differs from torch by {diff:.3g} > {atol:g}")
    log.info("export parity: %s", report)
    return report
