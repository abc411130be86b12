"""The errors of bigimage: each message is one line that names the file and what is wrong with it."""

from __future__ import annotations


class BigImageError(Exception):
    """An image that cannot be read: missing, unreadable, corrupt, truncated, of a format or sample type not
    supported, or a region outside it. The message is one line, fit to show to whoever sent the file."""


class TooManyPixels(BigImageError):
    """The header declares more pixels than the caller's limit; raised before anything is decoded."""

    def __init__(self, message: str, pixels: int, limit: int):
        super().__init__(message)
        self.pixels = pixels
        self.limit = limit


def one_line(detail: str) -> str:
    """libvips' error text (a first line saying which call failed, then the messages of the loaders, sometimes
    repeated) as one line: the loaders' messages, each once, joined by '; '."""
    lines = [line.strip() for line in detail.splitlines()]
    useful = [line for line in lines[1:] if line] or [line for line in lines[:1] if line]
    seen: list[str] = []
    for line in useful:
        if line not in seen:
            seen.append(line)
    return "; ".join(seen) or "libvips gave no reason"
