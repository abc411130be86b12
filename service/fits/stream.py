"""POST /v1/fits's multipart body, read as it arrives: the image straight into a file in the uploads folder
(INR_FIT_UPLOADS), hashed on the way, so that an upload of gigabytes costs a few MiB of memory, not its size.

python-multipart (the parser Starlette's own form reading uses) cuts the body into parts; a part with a filename
is a file, any other a text field of at most FIELD_BYTES. Only the part named `file` is written to disk (as
`.part-RANDOM`, fitstore.uploads); another file part is read and dropped, and the route refuses it by name. A body
that stops (the client left, INR_BODY_TIMEOUT_S, INR_FIT_MAX_UPLOAD_BYTES) leaves nothing behind: the part file
is deleted before the error goes on.
"""

from __future__ import annotations

import errno
import hashlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from fitstore.uploads import PART

from ..errors import BadInput, StorageFull, TooLarge

FIELD_BYTES = 64 * 1024  # a text field's largest value
FLUSH_BYTES = 1 << 20  # the file's bytes are written (off the event loop) in batches of about this size


@dataclass
class StreamedFile:
    """The `file` part, on disk: `path` (a `.part-` file of the uploads folder), its size and sha256."""

    filename: str
    path: Path | None = None
    size: int = 0
    sha256: str = ""


@dataclass
class DroppedFile:
    """A file part under another name: read, not kept (the route names it in its error)."""

    filename: str


@dataclass
class _Parts:
    """What the parser's callbacks gather; `pending` is the file's bytes not yet written."""

    items: list = field(default_factory=list)
    headers: dict = field(default_factory=dict)
    header: bytes = b""
    value: bytes = b""
    name: str = ""
    current: object = None  # bytearray (a text field), StreamedFile or DroppedFile
    pending: bytearray = field(default_factory=bytearray)
    ended: bool = False


def boundary_of(content_type: str) -> bytes:
    kind, params = parse_options_header(content_type)
    if kind != b"multipart/form-data" or not params.get(b"boundary"):
        raise BadInput("the body is not multipart/form-data with a boundary; send the image as the form field 'file'")
    return params[b"boundary"]


class Reader:
    """One body, read once: `await Reader(folder, max_fields).read(request)` → the items, in order, as
    (name, text | StreamedFile | DroppedFile). Call `discard()` when the file is not handed on."""

    def __init__(self, folder: Path, max_fields: int):
        self.folder, self.max_fields = Path(folder), max_fields
        self.parts = _Parts()
        self.file: StreamedFile | None = None
        self._out = None
        self._hash = hashlib.sha256()

    # -- the parser's callbacks (synchronous, inside parser.write) -----------------------------------------------
    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self.parts.header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self.parts.value += data[start:end]

    def _header_end(self) -> None:
        self.parts.headers[self.parts.header.lower()] = self.parts.value
        self.parts.header = self.parts.value = b""

    def _headers_finished(self) -> None:
        p = self.parts
        if len(p.items) >= self.max_fields:
            raise BadInput(f"the form has more than {self.max_fields} fields")
        _, options = parse_options_header(p.headers.get(b"content-disposition", b""))
        p.name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        if filename is None:
            p.current = bytearray()
        else:
            filename = filename.decode("utf-8", "replace")
            if p.name == "file" and self.file is None:
                self.file = p.current = StreamedFile(filename)
            elif p.name == "file":
                raise BadInput("the form has more than one 'file'; send one image")
            else:
                p.current = DroppedFile(filename)
        p.headers = {}

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        p = self.parts
        if isinstance(p.current, bytearray):
            p.current += data[start:end]
            if len(p.current) > FIELD_BYTES:
                raise TooLarge(f"the form field '{p.name[:40]}' is longer than {FIELD_BYTES} bytes")
        elif isinstance(p.current, StreamedFile):
            p.pending += data[start:end]

    def _part_end(self) -> None:
        p = self.parts
        if isinstance(p.current, bytearray):
            p.items.append((p.name, p.current.decode("utf-8", "replace")))
        elif p.current is not None:
            p.items.append((p.name, p.current))
        p.current = None

    def _end(self) -> None:
        self.parts.ended = True

    # -- the body --------------------------------------------------------------------------------------------------
    def _open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.file.path = self.folder / f"{PART}{secrets.token_hex(8)}"
        self._out = open(self.file.path, "xb")  # noqa: SIM115 - closed in read's finally

    def _write(self, data: bytes) -> None:
        if self._out is None:
            self._open()
        self._hash.update(data)
        try:
            self._out.write(data)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFull(
                    f"the uploads folder {self.folder} (INR_FIT_UPLOADS) is full: the upload was not kept"
                ) from None
            raise

    async def _flush(self, at_least: int) -> None:
        pending = self.parts.pending
        if self.file is not None and len(pending) >= at_least:
            data = bytes(pending)
            pending.clear()
            await anyio.to_thread.run_sync(self._write, data)
            self.file.size += len(data)

    async def read(self, request: Request) -> list:
        parser = MultipartParser(
            boundary_of(request.headers.get("content-type", "")),
            {
                "on_header_field": self._header_field,
                "on_header_value": self._header_value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
                "on_end": self._end,
            },
        )
        done = False
        try:
            async for chunk in request.stream():
                if chunk:
                    parser.write(chunk)
                    await self._flush(FLUSH_BYTES)
            parser.finalize()
            await self._flush(1)
            if not self.parts.ended:
                raise BadInput("the multipart body ended before its closing boundary: the upload is incomplete")
            if self.file is not None and self._out is None:
                await anyio.to_thread.run_sync(self._write, b"")  # an empty file: the route says so
            if self.file is not None:
                self.file.sha256 = self._hash.hexdigest()
            done = True
            return self.parts.items
        except MultipartParseError as e:
            raise BadInput(f"the multipart body is malformed: {e}") from None
        finally:
            if self._out is not None:
                await anyio.to_thread.run_sync(self._out.close)
            if not done:
                self.discard()

    def discard(self) -> None:
        """Delete the file part, if one was written."""
        if self.file is not None and self.file.path is not None:
            self.file.path.unlink(missing_ok=True)
