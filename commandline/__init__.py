"""The command-line conventions shared by `python -m training` and `python -m inr_client`:
a usage error is one line, `error: …`, exit code 2. Here because both CLIs use them and neither
may import the other."""

from __future__ import annotations

import argparse
import sys


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
