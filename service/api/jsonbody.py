"""JSON bodies at numpy speed: orjson in, numeric arrays straight to numpy, orjson out.

FastAPI would parse a body with `json.loads`, validate it with pydantic (a Python tuple per
coordinate) and encode the answer with `json.dumps` after `.tolist()`. Here:

* `read_json` parses with orjson; where orjson refuses what `json.loads` takes (NaN, Infinity,
  1e400, huge integers), `json.loads` parses it so that the model's validation can name the bad
  value exactly as before. Invalid JSON, a missing body and a non-JSON content type raise the
  same `RequestValidationError`s as FastAPI's own body parsing.
* `float_rows` (service/engine/json_numbers.py) turns a list of equal-length lists of JSON numbers into a
  float64 array with one pass of `np.fromiter`, or returns None for anything else; the caller then
  validates the body with the pydantic model, whose messages stay the reference.
* `json_response` writes numpy arrays with orjson's native numpy support.
"""

from __future__ import annotations

import email.message
import gc
import json
from contextlib import contextmanager
from typing import Any, Iterator, TypeVar

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

M = TypeVar("M", bound=BaseModel)


def is_json(content_type: str | None) -> bool:
    """FastAPI's rule: application/json or application/*+json."""
    if not content_type:
        return False
    if content_type == "application/json":  # what nearly every client sends: no header parsing
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    sub = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (sub == "json" or sub.endswith("+json"))


MAX_DEPTH = 1024  # orjson's limit, far deeper than any valid body


class JSONError(ValueError):
    """A body that is not JSON (or nests deeper than MAX_DEPTH); `pos` is the byte where it went wrong."""

    def __init__(self, msg: str, pos: int, text: str | None = None):
        super().__init__(text or msg)  # str(): the parser's whole message, as before
        self.msg, self.pos = msg, pos


def loads(body: bytes | str) -> Any:
    """orjson; where orjson refuses what `json.loads` takes (NaN, Infinity, 1e400, huge integers), the
    standard library, so that validation can name the value. Nesting beyond MAX_DEPTH is refused, never
    handed to a recursive parser."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        if e.msg.startswith("depth limit") or e.msg.startswith("recursion"):
            raise JSONError(f"nested deeper than {MAX_DEPTH} levels", e.pos) from None
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise JSONError(e.msg, e.pos, str(e)) from None
    except UnicodeDecodeError as e:
        raise JSONError(str(e), e.start) from None
    except RecursionError:
        raise JSONError(f"nested deeper than {MAX_DEPTH} levels", 0) from None


async def read_body(request: Request) -> bytes:
    """The body of a JSON route, unparsed: FastAPI's errors for a missing body or another content type."""
    body = await request.body()
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    if not is_json(request.headers.get("content-type")):
        raise RequestValidationError(
            [
                {
                    "type": "model_attributes_type",
                    "loc": ("body",),
                    "input": body,
                    "msg": "Input should be a valid dictionary or object to extract fields from",
                }
            ]
        )
    return body


def parse_body(body: bytes) -> Any:
    """`loads`, with FastAPI's error for a body that is not JSON."""
    try:
        return loads(body)
    except JSONError as e:
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", e.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": e.msg},
                }
            ]
        ) from None


async def read_json(request: Request) -> Any:
    return parse_body(await read_body(request))


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for a body's rows on their way into numpy.

    20,000 coordinates parse into 20,000 Python lists, and every 700 new containers start a collection
    that walks the young ones; lists still alive move on to the older generations, and about one request
    in five then paid for a full collection of the whole heap (70–85 ms of CPU on the 2-core VM against a
    55–80 ms model run). The lists hold no cycles and are freed by their reference counts when the rows are
    in numpy, so a caller drops them inside this block: the allocation count then falls back by as much as
    it rose, and the collector resumes as if they had never existed. Synchronous code only (no `await`
    inside), so no other request runs while it is off."""
    if not gc.isenabled():  # someone else paused it: theirs to resume
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def validate(model: type[M], doc: Any) -> M:
    """The pydantic model of `doc`, its errors located in the body as FastAPI reports them."""
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])} for err in e.errors()]) from None


def json_response(content: dict, status_code: int = 200) -> Response:
    return Response(
        orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status_code, media_type="application/json"
    )


REF = "#/components/schemas/{model}"
BODY_MODELS: list[type[BaseModel]] = []  # models whose schemas go into components.schemas


def openapi_body(model: type[BaseModel]) -> dict:
    """`openapi_extra` for a route that reads `model` itself: its JSON body, by reference."""
    BODY_MODELS.append(model)
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}},
        }
    }


def add_body_schemas(schema: dict) -> dict:
    """Put the schemas of `openapi_body` models (and the models they use) into an OpenAPI document."""
    _, defs = models_json_schema([(m, "validation") for m in BODY_MODELS], ref_template=REF)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in defs.get("$defs", {}).items():
        components.setdefault(name, definition)
    return schema
