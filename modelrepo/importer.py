"""`python -m modelrepo import FILE.onnx --name NAME`: an ONNX graph made elsewhere made a model folder of the
repository, `NAME/config.pbtxt` and `NAME/1/model.onnx`, after checking it: onnx.checker, its signature against the
declared convention (modelrepo/autocomplete.py, modelrepo/convention.py), and a test render on onnxruntime. The
config it writes is the completed one (what `GET /v2/models/NAME/config` shows), so Triton reads the same.

Needs the `onnx` and `onnxruntime` packages (the serving and training installs have both)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from google.protobuf import text_format

from .autocomplete import read_foreign_spec
from .convention import CHANNELS, KEYS, TASK_KEY
from .spec import NAME_RE, SpecError
from .triton import config_of, model_config_class

TEST_SIDE = 16  # the test render: TEST_SIDE² pixels of the declared grid
MAX_FILE = 2 << 30  # protobuf's own limit on one message


class ImportRefused(ValueError):
    """The file cannot be imported as asked; the message is the one line the command prints."""


def _checked(path: Path) -> bytes:
    import onnx

    try:
        data = path.read_bytes()
    except OSError as e:
        raise ImportRefused(f"{path}: {e.strerror or e}") from None
    if len(data) >= MAX_FILE:
        raise ImportRefused(f"{path}: {len(data)} bytes; an ONNX file with its weights inside is under 2 GiB")
    try:
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # onnx raises several types (DecodeError, ValidationError, InferenceError)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ImportRefused(f"{path.name}: onnx.checker: {first[:300]}") from None
    if any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer):
        raise ImportRefused(
            f"{path.name}: its weights are in external data files; save it with them inside "
            "(onnx.save_model(model, path, save_as_external_data=False))"
        )
    return data


def _config_text(name: str, parameters: dict[str, str], max_batch_size: int | None) -> str:
    cfg = model_config_class()(name=name, platform="onnxruntime_onnx", max_batch_size=max_batch_size or 0)
    for key, value in parameters.items():
        cfg.parameters[key].string_value = value
    return text_format.MessageToString(cfg)


def test_render(folder: Path, spec) -> str:
    """A TEST_SIDE² render of the declared grid on onnxruntime: ImportRefused when the values are not finite."""
    import numpy as np
    import onnxruntime as ort

    (sx, sy), (ox, oy), swap = spec.convention.coordinate_map()
    c = (np.arange(TEST_SIDE) + 0.5) / TEST_SIDE
    u, v = np.meshgrid(c, c)
    g = np.stack([u.ravel() * sx + ox, v.ravel() * sy + oy], 1)
    g = g[:, ::-1] if swap else g
    dtype = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64}[spec.input.datatype]
    try:
        session = ort.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
        out = session.run([spec.outputs[0].name], {spec.input.name: g.astype(dtype)})[0]
    except Exception as e:  # onnxruntime raises several types
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ImportRefused(f"cannot be an image model: the test render failed: {first[:300]}") from None
    if out.shape != (TEST_SIDE * TEST_SIDE, spec.outputs[0].shape[1]) or not np.isfinite(out).all():
        raise ImportRefused(
            f"cannot be an image model: output '{spec.outputs[0].name}' of the test render is "
            f"{'not finite' if out.shape[0] == TEST_SIDE**2 else f'of shape {list(out.shape)}'}"
        )
    lo, hi = spec.convention.output_range
    values = f"{float(out.min()):.4g} to {float(out.max()):.4g}"
    return f"test render {TEST_SIDE}x{TEST_SIDE}: values {values} (declared {lo:g} to {hi:g})"


def import_onnx(
    file: Path, repository: Path, name: str, parameters: dict[str, str], max_batch_size: int | None = None
) -> tuple[Path, str, list[str]]:
    """Write `repository/name` from `file`; return (the folder, its config.pbtxt text, what was found). A
    parameter of the convention (or `task: image`) makes it an image model. ImportRefused names what is wrong;
    nothing is left behind then."""
    if not NAME_RE.match(name):
        raise ImportRefused(f"--name '{name[:80]}' must be letters, digits, '_', '-' or '.' (at most 64)")
    unknown = sorted(set(parameters) - {*KEYS, TASK_KEY})
    if unknown:
        raise ImportRefused(f"unknown convention parameter '{unknown[0]}'")
    if max_batch_size is not None and max_batch_size < 1:
        raise ImportRefused(f"--max-batch-size {max_batch_size}: at least 1")
    target = Path(repository) / name
    if target.exists():
        raise ImportRefused(f"{target} exists: choose another --name, or remove it first")
    data = _checked(Path(file))
    Path(repository).mkdir(parents=True, exist_ok=True)
    hidden = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=repository))  # never read by a server
    tmp = hidden / name
    try:
        (tmp / "1").mkdir(parents=True)
        (tmp / "1" / "model.onnx").write_bytes(data)
        (tmp / "config.pbtxt").write_text(_config_text(name, parameters, max_batch_size))
        try:
            spec = read_foreign_spec(tmp).with_(name=name)
        except SpecError as e:
            lead = "cannot be an image model" if parameters else "cannot be served"
            raise ImportRefused(f"{lead}: {e}") from None
        found = [f"inputs {[t.to_json() for t in spec.inputs]}", f"outputs {[t.to_json() for t in spec.outputs]}"]
        if spec.convention is not None:
            kinds = dict(zip(CHANNELS, ("grey", "rgb", "rgba, the alpha not drawn")))
            found.append(f"image model: {kinds[spec.outputs[0].shape[1]]}, {spec.convention.parameters()}")
            found.append(test_render(tmp, spec))
        text = text_format.MessageToString(config_of(spec))
        (tmp / "config.pbtxt").write_text(text)
        mask = os.umask(0)
        os.umask(mask)
        for path in (tmp, tmp / "1"):
            path.chmod(0o755 & ~mask)
        tmp.rename(target)
    finally:
        shutil.rmtree(hidden, ignore_errors=True)
    return target, text, found
