"""Model folders on disk: read and validate them, write new ones and new versions atomically.

    models/NAME/config.pbtxt        Triton model config (max_batch_size, tensors, batching, version_policy)
    models/NAME/metadata.json       task, tensors in V2 terms, coordinate convention, description
    models/NAME/N/model.onnx        version N of the network
    models/NAME/N/metadata.json     version N: onnx_sha256 and its training metadata
    models/NAME/N/...               optional extras (preview.png)

A writer builds everything in a hidden sibling (`.NAME.tmp-*` or `NAME/.N.tmp-*`) and renames it
into place, so a reader sees a version folder complete or not at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from google.protobuf import text_format

from .access import KEYS, Access, AccessError, Guard
from .spec import TASKS, ModelSpec, SpecError, Tensor, VersionRecord
from .triton import apply_config, config_of, config_text, parse_config

MODEL_FILE = "model.onnx"


def portable(path: str | Path) -> str:
    """A path as a model's metadata records it: relative paths as given, an absolute one by its name only,
    so that no metadata names a folder of the machine the model was built on."""
    return Path(path).name if Path(path).is_absolute() else str(path)


def portable_command(args: list[str]) -> str:
    """A command line whose absolute paths are reduced to their names (`portable`)."""

    def one(arg: str) -> str:
        option, eq, value = arg.partition("=")
        if eq and option.startswith("-") and value.startswith("/"):
            return f"{option}={portable(value)}"
        return portable(arg) if arg.startswith("/") else arg

    return " ".join(shlex.quote(one(a)) for a in args)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"missing {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpecError(f"{what} is unreadable: {e}") from None


def read_spec(folder: Path) -> ModelSpec:
    """The spec of a model folder: metadata.json, then config.pbtxt's Triton fields (when present).
    Raises SpecError naming the file and field at fault."""
    folder = Path(folder)
    if not (folder / "metadata.json").exists():  # a model made elsewhere: config.pbtxt and the graph
        from .autocomplete import read_foreign_spec

        return read_foreign_spec(folder)
    meta = _json(folder / "metadata.json", "metadata.json")
    if not isinstance(meta, dict):
        raise SpecError("metadata.json is not a JSON object")
    task = meta.get("task")
    for key in ("inputs", "outputs"):
        if not isinstance(meta.get(key), list) or not meta[key]:
            raise SpecError(f"metadata.json: '{key}' must be a non-empty list of tensors, got {meta.get(key)!r}")
    inputs = tuple(Tensor.from_json(t, "metadata.json inputs") for t in meta["inputs"])
    outputs = tuple(Tensor.from_json(t, "metadata.json outputs") for t in meta["outputs"])
    free = {k: v for k, v in meta.items() if k not in ("name", "task", "inputs", "outputs", "coordinates")}
    coords = meta.get("coordinates")
    if not isinstance(task, str) or task not in TASKS:
        raise SpecError(f"metadata.json: unknown task {task!r}; valid: {', '.join(TASKS)}")
    spec = ModelSpec.for_task(folder.name, task, inputs=inputs, outputs=outputs, metadata=free)
    spec = spec.with_(coordinates=coords if isinstance(coords, str) else spec.coordinates)
    pbtxt = folder / "config.pbtxt"
    if pbtxt.exists():
        try:
            cfg = parse_config(pbtxt.read_text())
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(f"config.pbtxt is unreadable: {e}") from None
        except text_format.ParseError as e:
            raise SpecError(f"config.pbtxt does not parse as Triton's ModelConfig: {e}") from None
        spec = apply_config(spec, cfg)
    spec.validate()
    return spec


def read_access(folder: Path) -> Access:
    """A model folder's access policy alone (modelrepo/access.py): config.pbtxt parsed only when its text names an
    access parameter, so that a listing of thousands of models reads one small file each. SpecError when it does
    not parse."""
    try:
        text = (Path(folder) / "config.pbtxt").read_text()
    except FileNotFoundError:
        return Access()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"config.pbtxt is unreadable: {e}") from None
    if "access" not in text.lower():  # `ACCESS` too: parsed, and refused (Access.from_parameters)
        return Access()
    try:
        params = parse_config(text).parameters
        return Access.from_parameters({k: v.string_value for k, v in params.items()})
    except text_format.ParseError as e:
        raise SpecError(f"config.pbtxt does not parse as Triton's ModelConfig: {e}") from None
    except AccessError as e:
        raise SpecError(str(e)) from None


def version_numbers(folder: Path) -> list[int]:
    """The numeric version folders present, ascending (hidden and other folders are skipped)."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return []
    return sorted(
        int(p.name)
        for p in entries
        if p.is_dir() and p.name.isdigit() and int(p.name) > 0 and str(int(p.name)) == p.name
    )


def read_version(folder: Path, version: int, need_file: bool = True) -> VersionRecord:
    """`N/metadata.json` of one version, validated; the ONNX file must exist (its hash is checked by
    `check_version`), unless `need_file` is False (a mirror of S3, which fetches it at the load)."""
    vdir = Path(folder) / str(version)
    if not (vdir / "metadata.json").exists() and not (Path(folder) / "metadata.json").exists():
        # a model made elsewhere: what is there is the record (its sha256 the file's own, once it is on local disk)
        if not (vdir / MODEL_FILE).is_file():
            if need_file:
                raise SpecError(f"missing {version}/{MODEL_FILE}")
            return VersionRecord(version, "", {}, recorded=False)
        return VersionRecord(version, sha256_file(vdir / MODEL_FILE), {}, recorded=False)
    record = VersionRecord.from_json(_json(vdir / "metadata.json", f"{version}/metadata.json"), version)
    if need_file and not (vdir / MODEL_FILE).is_file():
        raise SpecError(f"missing {version}/{MODEL_FILE}")
    return record


def check_version(folder: Path, record: VersionRecord) -> Path:
    """The version's ONNX path once its sha256 equals the recorded one; SpecError otherwise."""
    path = Path(folder) / str(record.version) / MODEL_FILE
    if not record.recorded:
        return path  # nothing recorded to compare with: read_version took the file's own digest
    digest = sha256_file(path)
    if digest != record.onnx_sha256:
        raise SpecError(
            f"sha256 of {record.version}/{MODEL_FILE} ({digest[:12]}…) does not match "
            f"{record.version}/metadata.json onnx_sha256 ({record.onnx_sha256[:12]}…): tampered or stale"
        )
    return path


@dataclass(frozen=True)
class Written:
    spec: ModelSpec
    record: VersionRecord
    path: Path  # the version folder


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mkdtemp(parent: Path, prefix: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    tmp.chmod(0o755 & ~_umask())  # mkdtemp makes 0700; a model folder is readable like any other
    return tmp


def _write_spec_files(folder: Path, spec: ModelSpec) -> None:
    _write_json(folder / "metadata.json", spec.to_json())
    (folder / "config.pbtxt").write_text(config_text(spec))


def _json_text(obj) -> str:
    """metadata.json as people read it: indented, with the provenance's own characters (×, é) kept. Strict JSON:
    a float that is not finite is refused (ValueError, nothing written) instead of written as `Infinity` or `NaN`,
    which no JSON parser but Python's reads (a PSNR is finite: training.metrics.psnr_from_mse)."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _write_json(path: Path, obj) -> None:
    path.write_text(_json_text(obj), encoding="utf-8")


def _replace_file(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o644 & ~_umask())
    os.replace(tmp, path)


def write_version(
    folder: Path,
    spec: ModelSpec,
    onnx_bytes: bytes,
    metadata: dict,
    extras: Callable[[Path], None] | None = None,
    guard: Guard | None = None,
) -> Written:
    """Write `onnx_bytes` as the next version of the model at `folder`, atomically.

    A new folder gets version 1 with its config.pbtxt and metadata.json (the whole folder appears at once). An
    existing model gets version max(N)+1 and keeps its config.pbtxt and metadata.json as they are (its access policy,
    version_policy, batching, warm-ups and any other parameter an operator set); only when the new graph's tensors
    differ are their entries replaced. A model whose files cannot be read is refused (SpecError), never overwritten:
    a config.pbtxt that does not parse counts as restricted. `guard` (a fit's, modelrepo.access.Guard): the policy
    the writer was allowed to publish over, checked here (PolicyChanged), and the one it may set. `extras(version_dir)`
    may add files (a preview) to the version folder before it appears. Returns what was written.
    """
    folder = Path(folder)
    spec = spec.with_(name=folder.name)
    spec.validate()
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists() and not folder.is_dir():
        raise SpecError(f"'{folder}' exists and is not a directory")
    if folder.is_dir() and _holds_a_model(folder):
        return _next_version(folder, spec, onnx_bytes, metadata, extras, guard)
    if guard is not None:
        spec = spec.with_(access=guard.check(folder.name, None))
    tmp = _mkdtemp(folder.parent, f".{folder.name}.tmp-")
    try:
        record = _fill_version(tmp / "1", 1, onnx_bytes, metadata, extras)
        _write_spec_files(tmp, spec)
        if folder.is_dir():  # an empty folder (made by hand): replaced by the whole model at once
            folder.rmdir()
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Written(spec, record, folder / "1")


def _holds_a_model(folder: Path) -> bool:
    return any(not p.name.startswith(".") for p in folder.iterdir())


def _fill_version(vdir: Path, version: int, onnx_bytes: bytes, metadata: dict, extras) -> VersionRecord:
    vdir.mkdir(exist_ok=True)
    vdir.chmod(0o755 & ~_umask())
    (vdir / MODEL_FILE).write_bytes(onnx_bytes)
    if extras is not None:
        extras(vdir)
    record = VersionRecord(version, sha256_bytes(onnx_bytes), dict(metadata))
    _write_json(vdir / "metadata.json", record.to_json())
    return record


def next_spec_files(
    name: str, old: ModelSpec, old_config: str | None, spec: ModelSpec, guard: Guard | None
) -> tuple[ModelSpec, str | None, str | None]:
    """What a new version of an existing model does to its own files, for both backends (a folder here, S3 in
    modelrepo/s3publish.py): its config.pbtxt (`old_config`, its text) and metadata.json are kept as they are (the
    access policy, version_policy, batching, warm-ups and every parameter its owner set); the tensors are replaced
    when the new graph's differ, the policy when the guard allows a new one (PolicyChanged when the model's policy is
    not the one its writer was judged against). Returns (the spec as it will stand, the new config.pbtxt text or None
    to keep it, the new metadata.json text or None to keep it)."""
    access = guard.check(name, old.access.parameters()) if guard is not None else None
    same = all(getattr(old, k) == getattr(spec, k) for k in ("task", "inputs", "outputs", "coordinates"))
    if same and access is None:
        return old, None, None
    cfg = parse_config(old_config) if old_config is not None else config_of(old)
    meta = None
    if not same:
        new = config_of(spec)
        for kind in ("input", "output"):
            cfg.ClearField(kind)
            getattr(cfg, kind).extend(getattr(new, kind))
        meta = _json_text(spec.with_(metadata=old.metadata).to_json())
    if access is not None:
        for key in KEYS:
            cfg.parameters.pop(key, None)
        for key, value in access.parameters().items():
            cfg.parameters[key].string_value = value
    text = text_format.MessageToString(cfg)
    merged = apply_config(spec.with_(name=name, metadata=old.metadata), parse_config(text))
    return merged, text, meta


def unreadable(name: str, e: SpecError) -> SpecError:
    """A model whose files cannot be read is never written over (its config.pbtxt counts as restricted)."""
    return SpecError(f"model '{name}' exists but cannot be read ({e}); fix or remove it first")


def _kept_spec_files(folder: Path, spec: ModelSpec, guard: Guard | None) -> ModelSpec:
    try:
        old = read_spec(folder)
    except SpecError as e:
        raise unreadable(folder.name, e) from None
    pbtxt = folder / "config.pbtxt"
    spec, config, meta = next_spec_files(folder.name, old, pbtxt.read_text() if pbtxt.exists() else None, spec, guard)
    if meta is not None:
        _replace_file(folder / "metadata.json", meta)
    if config is not None:
        _replace_file(pbtxt, config)
    return spec


def _next_version(folder: Path, spec: ModelSpec, onnx_bytes: bytes, metadata: dict, extras, guard) -> Written:
    spec = _kept_spec_files(folder, spec, guard)
    while True:
        version = (version_numbers(folder) or [0])[-1] + 1
        tmp = _mkdtemp(folder, f".{version}.tmp-")
        try:
            record = _fill_version(tmp, version, onnx_bytes, metadata, extras)
            tmp.rename(folder / str(version))  # fails if another writer took this number: try the next
            return Written(spec, record, folder / str(version))
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (folder / str(version)).exists():
                raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
