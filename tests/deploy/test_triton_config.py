"""models/ is also a Triton model repository: every config.pbtxt parses strictly against
Triton's ModelConfig proto and agrees with the ONNX file next to it."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format

from modelrepo import ModelSpec, config_text

from .triton import DATA_TYPE_TO_ONNX, parse_config

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIRS = sorted(p for p in (ROOT / "models").glob("*") if (p / "config.pbtxt").exists())


def test_the_repository_has_models_to_check():
    assert MODEL_DIRS, "models/ holds no model folder with a config.pbtxt (the images bundle models/)"


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=lambda p: p.name)
def test_config_pbtxt_parses_and_matches_its_onnx_file(model_dir: Path):
    config = parse_config((model_dir / "config.pbtxt").read_text())
    assert config.name == model_dir.name
    assert config.platform == "onnxruntime_onnx"
    versions = [d for d in model_dir.iterdir() if d.is_dir() and d.name.isdigit()]
    assert versions, "Triton needs at least one numeric version folder"
    graph = onnx.load(str(max(versions, key=lambda d: int(d.name)) / "model.onnx")).graph
    batch = [-1] if config.max_batch_size > 0 else []
    for declared, actual in ((config.input, graph.input), (config.output, graph.output)):
        onnx_io = {v.name: v for v in actual}
        assert sorted(t.name for t in declared) == sorted(onnx_io)
        for tensor in declared:
            value = onnx_io[tensor.name].type.tensor_type
            dtype = tensor.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number[tensor.data_type]
            assert DATA_TYPE_TO_ONNX[dtype.name] == value.elem_type, tensor.name
            onnx_dims = [d.dim_value if d.HasField("dim_value") else -1 for d in value.shape.dim]
            assert batch + list(tensor.dims) == onnx_dims, tensor.name


def test_generated_configs_for_both_tasks_parse():
    image = config_text(ModelSpec.for_task("img", "image"))
    digits = config_text(ModelSpec.for_task("dig", "digits", max_batch_size=256, max_queue_delay_us=500))
    assert list(parse_config(image).input[0].dims) == [2]
    parsed = parse_config(digits)
    assert parsed.max_batch_size == 256
    assert list(parsed.input[0].dims) == [1, 28, 28]
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 500


@pytest.mark.parametrize(
    "bad",
    [
        'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch: 4\n',  # no such field
        'name: "m"\ninput [ { name: "x" data_type: TYPE_FLOAT32 dims: [ 2 ] } ]\n',  # no such enum value
        'name: "m"\ninput [ { name: "x" dims: [ 2 ] }\n',  # unbalanced bracket
    ],
)
def test_the_parser_rejects_what_triton_would_reject(bad: str):
    with pytest.raises(text_format.ParseError):
        parse_config(bad)


def test_the_shipped_descriptor_is_tritonclients():
    from modelrepo.regen_descriptor import serialized_descriptor
    from modelrepo.triton import DESCRIPTOR_FILE

    assert DESCRIPTOR_FILE.read_bytes() == serialized_descriptor(), "run python -m modelrepo.regen_descriptor"
