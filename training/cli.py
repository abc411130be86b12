"""`python -m training SUBCOMMAND`: the training command line.

Bad input prints one line, `error: …`, and exits with code 2; no partial output is left.
The subcommand modules import nothing from here (tests/training/test_layout.py checks that `training`
has no import cycle); each exposes `register(subparsers)` and sets `func` on its parser.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from commandline import OneLineParser, positive_float, positive_int  # noqa: F401 - re-exported
from telemetry.logs import check_format, configure

from .errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    from . import cli_image, reexport, sweep, worker
    from .digits import cli as cli_digits

    parser = OneLineParser(prog="python -m training", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    cli_image.register(sub)
    sweep.register(sub)
    reexport.register(sub)
    worker.register(sub)
    cli_digits.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # INR_LOG_FORMAT=json: JSON lines, with the trace and span ids (telemetry.logs), as the service
        fmt = check_format(os.environ.get("INR_LOG_FORMAT", "text"))
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    configure(logging.INFO if args.verbose else logging.WARNING, fmt)
    try:
        return int(args.func(args) or 0)
    except UsageError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted; nothing was written\n")
        return 130
