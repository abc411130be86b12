"""Credentials out of the log: a token sent in a URL's query string is refused (service/auth/caller.py), but
uvicorn's access log would still print the URL. This filter, on every handler of `python -m service`, replaces
the value of each credential-like query parameter in a log line's arguments with `REDACTED`, whatever the
percent-encoding of its name (`access%5Ftoken` is refused as `access_token` is, and redacted as it is)."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

from .caller import QUERY_TOKENS

PARAM = re.compile(r"([?&;])([^=&#\s\"?;]+)=([^&#\s\";]*)")


def _name(raw: str) -> str:
    for _ in range(3):  # a name encoded twice or thrice reads the same once decoded
        raw = unquote_plus(raw)
    return raw.strip().lower()


def redact(text: str) -> str:
    if "=" not in text:
        return text
    return PARAM.sub(lambda m: f"{m[1]}{m[2]}=REDACTED" if _name(m[2]) in QUERY_TOKENS else m[0], text)


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "=" in a for a in record.args):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "=" in record.msg:
            record.msg = redact(record.msg)
        return True
