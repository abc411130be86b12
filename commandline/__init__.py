"""The command-line conventions shared by `python -m training` and `python -m inr_client`:
a usage error is one line, `error: …`, exit code 2. Here because both CLIs use them and neither
may import the other."""

from __future__ import annotations

import argparse
import re
import sys

UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*\Z")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the problem, exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        sys.stderr.write(f"error: {self.prog}: {message}\n")
        sys.exit(2)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'") from None
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got '{text}'")
    return v


def parse_bytes(text: str | int) -> int:
    """`2GiB`, `512MiB`, `1.5G`, `1000000` → bytes; ValueError naming the forms."""
    if isinstance(text, int):
        return text
    m = SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in UNITS:
        raise ValueError("expected a size such as 2GiB, 512MiB, 1.5G or a number of bytes")
    return int(float(m.group(1)) * UNITS[unit])


def byte_size(text: str) -> int:
    """An option's size in bytes (`parse_bytes`), more than zero."""
    try:
        v = parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e}, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a size of more than 0 bytes, got '{text}'")
    return v
