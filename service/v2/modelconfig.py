"""A model's Triton configuration as JSON, read from its `config.pbtxt`.

`config.pbtxt` is protobuf text format. `parse_pbtxt` reads the subset that model
configurations use: `field: scalar`, `field { ... }`, `field: [ a, b ]`, `field [ {..}, {..} ]`,
strings, numbers, enums and booleans, `#` comments. Repeated fields (`input`, `dims`, …) become
lists. `triton_config` then adds the defaults Triton reports, so `perf_analyzer` and
`tritonclient.get_model_config` see what a Triton server would send. A model without a
readable `config.pbtxt` gets the config built from its metadata.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import BadInput

STRING = r'"(?:[^"\\]|\\.)*"'
COMMENT = re.compile(f"({STRING})|#[^\\n]*")
TOKEN = re.compile(f'{STRING}|[{{}}\\[\\]:,;]|[^\\s{{}}\\[\\]:,;"#]+|\\S')
REPEATED = {"input", "output", "dims", "instance_group", "preferred_batch_size", "gpus", "shape",
            "profile", "model_warmup", "allow_ragged_batch"}
TYPE_OF = {"FP32": "TYPE_FP32", "FP64": "TYPE_FP64", "FP16": "TYPE_FP16", "INT64": "TYPE_INT64",
           "INT32": "TYPE_INT32", "INT8": "TYPE_INT8", "UINT8": "TYPE_UINT8", "BOOL": "TYPE_BOOL",
           "BYTES": "TYPE_STRING"}


class PbtxtError(ValueError):
    pass


def _tokens(text: str) -> list[str]:
    tokens = TOKEN.findall(COMMENT.sub(lambda m: m.group(1) or "", text))
    bad = [t for t in tokens if t == '"' or t == "#"]
    if bad:
        raise PbtxtError("config.pbtxt has an unterminated string")
    return tokens


def _scalar(tok: str):
    if tok.startswith('"'):
        return bytes(tok[1:-1], "utf-8").decode("unicode_escape")
    if tok in ("true", "false"):
        return tok == "true"
    for kind in (int, float):
        try:
            return kind(tok)
        except ValueError:
            pass
    return tok  # an enum such as TYPE_FP32


class _Parser:
    def __init__(self, tokens: list[str]):
        self.t, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> str:
        if self.i >= len(self.t):
            raise PbtxtError("config.pbtxt ends in the middle of a field")
        self.i += 1
        return self.t[self.i - 1]

    def message(self, end: str | None) -> dict:
        out: dict = {}
        while self.peek() != end:
            name = self.take()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise PbtxtError(f"expected a field name in config.pbtxt, found {name!r}")
            if self.peek() == ":":
                self.take()
            value = self.value()
            if name in REPEATED or isinstance(value, list) or name in out:
                prev = out.get(name, [])
                out[name] = (prev if isinstance(prev, list) else [prev]) + (value if isinstance(value, list) else [value])
            else:
                out[name] = value
            if self.peek() in (",", ";"):
                self.take()
        if end:
            self.take()
        return out

    def value(self):
        tok = self.take()
        if tok == "{":
            return self.message("}")
        if tok == "[":
            items = []
            while self.peek() != "]":
                items.append(self.value())
                if self.peek() == ",":
                    self.take()
            self.take()
            return items
        if tok in "}]:,":
            raise PbtxtError(f"unexpected {tok!r} in config.pbtxt")
        return _scalar(tok)


def parse_pbtxt(text: str) -> dict:
    return _Parser(_tokens(text)).message(None)


def _from_metadata(meta: dict) -> dict:
    """The config that training/repository.py would write, for a model folder without config.pbtxt."""
    batched = meta.get("task") == "digits"

    def tensor(t: dict) -> dict:
        shape = list(t.get("shape", []))
        return {"name": t.get("name"), "data_type": TYPE_OF.get(t.get("datatype"), "TYPE_INVALID"),
                "dims": shape[1:] if batched else shape}
    return {"name": meta.get("name"), "platform": "onnxruntime_onnx", "max_batch_size": 256 if batched else 0,
            "input": [tensor(t) for t in meta.get("inputs", [])],
            "output": [tensor(t) for t in meta.get("outputs", [])]}


def triton_config(path: Path, meta: dict, name: str) -> dict:
    """The JSON a Triton server answers for GET /v2/models/NAME/config."""
    try:
        cfg = parse_pbtxt((path / "config.pbtxt").read_text())
    except FileNotFoundError:
        cfg = _from_metadata(meta)
    except (OSError, UnicodeDecodeError, PbtxtError) as e:
        raise BadInput(f"model '{name}': config.pbtxt cannot be read: {e}") from None
    cfg["name"] = name
    cfg.setdefault("platform", "onnxruntime_onnx")
    cfg.setdefault("backend", "onnxruntime")
    cfg.setdefault("max_batch_size", 0)
    cfg.setdefault("version_policy", {"latest": {"num_versions": 1}})
    cfg.setdefault("model_transaction_policy", {"decoupled": False})
    cfg.setdefault("instance_group", [{"name": f"{name}_0", "kind": "KIND_CPU", "count": 1}])
    for kind in ("input", "output"):
        for t in cfg.setdefault(kind, []):
            t.setdefault("dims", [])
            if kind == "input":
                t.setdefault("format", "FORMAT_NONE")
                t.setdefault("is_shape_tensor", False)
                t.setdefault("optional", False)
    return cfg
