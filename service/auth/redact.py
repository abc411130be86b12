"""Credentials out of the log: a token sent in a URL's query string is refused (service/auth/caller.py), but
uvicorn's access log would still print the URL. This filter, on every handler of `python -m service`, replaces
the value of each credential-like query parameter in a log line's arguments with `REDACTED`."""

from __future__ import annotations

import logging
import re

from .caller import QUERY_TOKENS

PARAM = re.compile(r"(?i)([?&](?:" + "|".join(map(re.escape, QUERY_TOKENS)) + r")=)[^&#\s\"]*")


def redact(text: str) -> str:
    return PARAM.sub(r"\1REDACTED", text)


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "=" in a for a in record.args):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "=" in record.msg:
            record.msg = redact(record.msg)
        return True
