"""The floor server of `python -m bench.floor`: the same HTTP server as the service (uvicorn, the
service's header-timeout protocol, keep-alive 90 s), answering every POST with a constant body of
the same size and type as the service's answer to it, after reading the request body. What no
Python server on uvicorn can go below; `bench.floor` reports the service's CPU per request above it.

    BENCH_FLOOR_ANSWERS=answers.json python -m uvicorn bench.floor_app:app --http \
        service.server.guards:HeaderTimeoutProtocol
"""

from __future__ import annotations

import base64
import json
import os

ANSWERS: dict[str, tuple[bytes, list]] = {}
if os.environ.get("BENCH_FLOOR_ANSWERS"):
    with open(os.environ["BENCH_FLOOR_ANSWERS"]) as f:
        for path, (ctype, extra, body) in json.load(f).items():
            headers = [(b"content-type", ctype.encode())] + [(k.encode(), v.encode()) for k, v in extra.items()]
            ANSWERS[path] = (base64.b64decode(body), headers)


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:  # read the whole body, as the service must
        message = await receive()
        more = message.get("more_body", False)
    body, headers = ANSWERS.get(scope["path"], (b'{"status":"live"}', [(b"content-type", b"application/json")]))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": headers + [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
