"""The model repository contract (modelrepo): specs, config.pbtxt through Triton's schema, atomic writes,
versions and version policies."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from google.protobuf import text_format

from modelrepo import (
    ModelSpec,
    SpecError,
    VersionPolicy,
    config_json,
    config_text,
    parse_config,
    read_spec,
    read_version,
    version_numbers,
    write_version,
)
from modelrepo.triton import apply_config


def test_generated_config_round_trips_through_tritons_schema():
    spec = ModelSpec.for_task("dig", "digits", max_batch_size=64, max_queue_delay_us=500)
    cfg = parse_config(config_text(spec))
    assert cfg.max_batch_size == 64 and list(cfg.input[0].dims) == [1, 28, 28]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert apply_config(spec, cfg) == spec


def test_config_json_has_tritons_defaults_and_numbers_for_int64():
    cfg = config_json(ModelSpec.for_task("img", "image"))
    assert cfg["max_batch_size"] == 262_144 and cfg["input"][0]["dims"] == [2]
    assert cfg["backend"] == "onnxruntime" and cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}


@pytest.mark.parametrize("text", ['name: "x', "input [ { name: ", "max_batch_size: }", "max_batch: 4"])
def test_what_triton_refuses_does_not_parse(text):
    with pytest.raises(text_format.ParseError):
        parse_config(text)


@pytest.mark.parametrize(
    "policy,expected",
    [
        (VersionPolicy("latest", 2), [3, 7]),
        (VersionPolicy("all"), [1, 3, 7]),
        (VersionPolicy("specific", versions=(1, 9)), [1]),
    ],
)
def test_version_policies_select_as_triton_does(policy, expected):
    assert policy.select([7, 1, 3]) == expected


def test_policies_are_read_from_config_pbtxt(tmp_path):
    spec = ModelSpec.for_task("m", "digits")
    write_version(tmp_path / "m", spec, b"onnx", {"a": 1})
    for text, want in (
        ("all {}", VersionPolicy("all")),
        ("specific { versions: [2, 1] }", VersionPolicy("specific", versions=(2, 1))),
    ):
        cfg = parse_config(config_text(spec))
        cfg.version_policy.Clear()
        text_format.Merge(text, cfg.version_policy)
        (tmp_path / "m" / "config.pbtxt").write_text(text_format.MessageToString(cfg))
        assert read_spec(tmp_path / "m").version_policy == want


def test_writing_into_an_existing_model_adds_the_next_version(tmp_path):
    spec = ModelSpec.for_task("m", "image")
    first = write_version(
        tmp_path / "m",
        spec,
        b"one",
        {"metrics": {"psnr": 20}},
        extras=lambda d: (d / "preview.png").write_bytes(b"png"),
    )
    second = write_version(tmp_path / "m", spec, b"two", {"metrics": {"psnr": 25}})
    assert (first.record.version, second.record.version) == (1, 2)
    assert version_numbers(tmp_path / "m") == [1, 2]
    assert read_version(tmp_path / "m", 2).metadata["metrics"] == {"psnr": 25}
    assert read_version(tmp_path / "m", 1).onnx_sha256 != read_version(tmp_path / "m", 2).onnx_sha256
    assert (tmp_path / "m" / "1" / "preview.png").exists()
    assert not [p for p in tmp_path.rglob(".*")], "no temporary folder is left behind"


def test_metadata_that_is_not_strict_json_is_refused_and_nothing_is_written(tmp_path):
    """metadata.json is standard JSON: an infinite PSNR (issue 38) would be written as `Infinity`."""
    write_version(tmp_path / "m", ModelSpec.for_task("m", "image"), b"one", {"metrics": {"psnr": 100.0}})
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_version(tmp_path / "m", ModelSpec.for_task("m", "image"), b"two", {"metrics": {"psnr": math.inf}})
    assert version_numbers(tmp_path / "m") == [1]
    assert not [p for p in tmp_path.rglob(".*")], "no temporary folder is left behind"


def test_a_new_version_keeps_the_operators_version_policy(tmp_path):
    spec = ModelSpec.for_task("m", "digits")
    write_version(tmp_path / "m", spec, b"one", {})
    (tmp_path / "m" / "config.pbtxt").write_text(config_text(spec.with_(version_policy=VersionPolicy("all"))))
    write_version(tmp_path / "m", spec, b"two", {})
    assert read_spec(tmp_path / "m").version_policy == VersionPolicy("all")


def test_a_failed_write_leaves_nothing(tmp_path):
    def boom(_):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_version(tmp_path / "m", ModelSpec.for_task("m", "image"), b"x", {}, extras=boom)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda m: m.pop("inputs"), "'inputs' must be a non-empty list"),
        (lambda m: m.update(task="speech"), "unknown task 'speech'"),
        (lambda m: m["inputs"][0].update(shape=[-1, 3]), "a 'image' model takes one input"),
        (lambda m: m["outputs"][0].update(datatype="FP99"), "datatype 'FP99'"),
    ],
)
def test_bad_specs_name_their_field(tmp_path, change, message):
    write_version(tmp_path / "m", ModelSpec.for_task("m", "image"), b"x", {})
    meta = json.loads((tmp_path / "m" / "metadata.json").read_text())
    change(meta)
    (tmp_path / "m" / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(SpecError, match=message):
        read_spec(tmp_path / "m")


def test_config_pbtxt_that_disagrees_with_metadata_is_refused(tmp_path):
    write_version(tmp_path / "m", ModelSpec.for_task("m", "digits"), b"x", {})
    cfg = tmp_path / "m" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: 10", "dims: 11", 1))
    with pytest.raises(SpecError, match="config.pbtxt: output .* disagrees with metadata.json"):
        read_spec(tmp_path / "m")


def test_the_contract_imports_neither_torch_nor_the_service_nor_training():
    code = (
        "import sys, modelrepo, modelrepo.folder, modelrepo.triton; "
        "bad = [m for m in ('torch', 'service', 'training', 'onnxruntime') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_metadata_records_no_absolute_path():
    """Exported metadata names files relative to the model folder, or by their names only."""
    from modelrepo import portable, portable_command

    assert portable("/work/runs/ckpt/a.pt") == "a.pt" and portable("build/a.pt") == "build/a.pt"
    assert (
        portable_command(
            ["export-digits", "--data-dir", "/data/mnist-10k", "--checkpoint=/r/a.pt", "--out", "models/digits"]
        )
        == "export-digits --data-dir mnist-10k --checkpoint=a.pt --out models/digits"
    )


def test_the_image_source_is_read_typed_and_junk_is_absent():
    """The service reads the training and native sizes through modelrepo, never the raw dict."""
    from modelrepo import ImageSource

    assert ImageSource.from_metadata({"source": {"size": [128, 96], "native_size": [1000, 1000]}}) == ImageSource(
        (128, 96), (1000, 1000)
    )
    for junk in ({}, {"source": "x"}, {"source": {"size": [True, 2]}}, {"source": {"size": [0, 5]}}, []):
        assert ImageSource.from_metadata(junk) == ImageSource()


def test_the_native_geometry_and_the_onnx_check():
    """Native geometry: source.size is the native grid, native_size overrides it, none is square; the ONNX metadata
    image_width/image_height must agree with source.size."""
    import pytest

    from modelrepo import ContractError, ImageSource, check_onnx_geometry

    wide = ImageSource.from_metadata({"source": {"size": [2560, 1600]}})
    assert (wide.native, wide.aspect) == ((2560, 1600), 1.6)
    assert ImageSource((128, 128), (1000, 1000)).native == (1000, 1000)
    assert (ImageSource().native, ImageSource().aspect) == (None, 1.0)
    check_onnx_geometry(wide, {"image_width": "2560", "image_height": "1600"}, 1)
    check_onnx_geometry(wide, {"other": "x"}, 1)  # older exports carry none
    for props, message in (
        (
            {"image_width": "2560", "image_height": "1000"},
            "2560×1000 pixels, 1/metadata.json source.size says 2560×1600",
        ),
        ({"image_width": "2560"}, "needs integer image_width and image_height"),
        ({"image_width": "wide", "image_height": "1"}, "needs integer"),
    ):
        with pytest.raises(ContractError, match=message):
            check_onnx_geometry(wide, props, 1)
    with pytest.raises(ContractError, match="records no source.size"):
        check_onnx_geometry(ImageSource(), {"image_width": "4", "image_height": "4"}, 3)


def test_the_separable_stage_round_trips_and_matches_numpys_float64_digest():
    import hashlib

    import numpy as np

    from modelrepo import SeparableStage

    rng = np.random.default_rng(0)
    P, phase = rng.normal(size=(6, 2)), rng.normal(size=6)
    stage = SeparableStage(tuple(map(tuple, P.tolist())), tuple(phase.tolist()), "body.onnx", "ab" * 32)
    assert stage.stage_sha256 == hashlib.sha256(P.tobytes() + phase.tobytes()).hexdigest()
    entry = stage.to_metadata(parity={"pipeline_vs_torch": 1e-6})
    assert entry["features"] == 6 and entry["parity"] == {"pipeline_vs_torch": 1e-6}
    assert SeparableStage.from_metadata(json.loads(json.dumps(entry))) == stage


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda e: e.update(P=[[1.0, 2.0, 3.0]] * 6), "P must be finite"),
        (lambda e: e.update(phase=e["phase"][:-1]), "P must be finite"),
        (lambda e: e.update(P=[[True, 1.0]] * 6), "number arrays"),
        (lambda e: e.update(phase=["0.5"] * 6), "number arrays"),
        (lambda e: e.update(P=[[float("nan"), 1.0]] * 6), "P must be finite"),
        (lambda e: e.update(P=[], phase=[]), "P must be finite"),
        (lambda e: e["P"].__setitem__(0, [9.0, 9.0]), "stage_sha256"),
        (lambda e: e.update(body="../model.onnx"), "body must be a file name"),
        (lambda e: e.update(body_sha256=None), "body_sha256"),
    ],
)
def test_a_broken_separable_entry_is_refused_naming_the_field(change, message):
    from modelrepo import ContractError, SeparableStage

    stage = SeparableStage(
        tuple((float(i), 1.0) for i in range(6)), tuple(0.1 * i for i in range(6)), "body.onnx", "0" * 64
    )
    entry = json.loads(json.dumps(stage.to_metadata()))
    change(entry)
    with pytest.raises(ContractError, match=message):
        SeparableStage.from_metadata(entry)
    with pytest.raises(ContractError, match="expected an object"):
        SeparableStage.from_metadata([entry])
