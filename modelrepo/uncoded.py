"""`python -m modelrepo decode MODEL --out REPOSITORY`: a copy of a model folder, into another repository under the same
name (config.pbtxt names its folder), whose model files any onnxruntime loads.

A grid model fitted with `--grid-table-code ans` holds its tables in the context code (modelrepo/ctxcode.py) behind
a `DecodeTable` node of this project's domain, which this service decodes at load and Triton's onnxruntime backend
cannot. The copy holds those tables decoded (8-bit, as the model renders them: the same answers), each version's
`metadata.json` given the new file's sha256; every other file is copied as it is. Rice-coded tables, which the graph
decodes itself, are left coded.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from . import ctxcode, onnxfile
from .folder import sha256_bytes, version_numbers


class DecodeRefused(ValueError):
    """A source that is not a model folder, or a destination that exists."""


def write_uncoded(source: Path, repository: Path) -> tuple[Path, list[str]]:
    """Copy the model folder `source` to `repository`/its name (which must not exist) with context-coded tables
    decoded: (the new folder, the files that changed). Written beside it and renamed into place: no half-written
    folder."""
    if not (source / "config.pbtxt").is_file():
        raise DecodeRefused(f"'{source}' is not a model folder (no config.pbtxt)")
    dest = repository / source.resolve().name
    if dest.exists():
        raise DecodeRefused(f"'{dest}' exists: give another repository")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(source, work / "m", symlinks=False)
        changed = []
        for version in version_numbers(work / "m"):
            folder = work / "m" / str(version)
            for path in folder.glob("*.onnx"):
                data = path.read_bytes()
                if ctxcode.DOMAIN.encode() not in data:
                    continue
                try:
                    plain = onnxfile.decoded(data)
                except onnxfile.CodeError as e:
                    raise DecodeRefused(f"{source.name}/{version}/{path.name}: {e}") from None
                path.write_bytes(plain)
                meta = folder / "metadata.json"
                if path.name == "model.onnx" and meta.is_file():
                    record = json.loads(meta.read_text())
                    record["onnx_sha256"] = sha256_bytes(plain)
                    meta.write_text(json.dumps(record, indent=2) + "\n")
                changed.append(f"{version}/{path.name}")
        (work / "m").rename(dest)
        return dest, changed
    finally:
        shutil.rmtree(work, ignore_errors=True)
