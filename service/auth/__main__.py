"""`python -m service.auth keys ...`: make, list and revoke API keys (service/auth/keys.py, docs/access.md).

    python -m service.auth keys create --name "museum app" --scope read --scope fit [--models a,b] \
        [--quota rps=5 --quota fits_per_day=20 --quota concurrent_fits=2 --quota bytes_stored=2GiB]
    python -m service.auth keys list
    python -m service.auth keys revoke ID

The file is `--keys FILE`, else `INR_ACCESS_KEYS`. `create` writes the key once, on standard output, with its
record; the file keeps only its SHA-256. A running server sees the change at its next request. Each action is an
audit line on standard error (the key's id, never its secret). Bad input: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from .keys import KeyError_, KeyStore
from .quotas import KINDS, parse

log = logging.getLogger("inr.audit")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m service.auth", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="action", required=True)
    create = keys.add_parser("create", help="make a key (shown once)")
    create.add_argument("--name", required=True, help="whose key it is, for people")
    create.add_argument("--scope", action="append", required=True, help="read, fit, admin or a model's scope")
    create.add_argument("--models", help="only these models, comma-separated")
    create.add_argument(
        "--quota", action="append", default=[], metavar="NAME=VALUE", help=f"repeatable; NAME: {', '.join(KINDS)}"
    )
    keys.add_parser("list", help="the keys, without their secrets")
    revoke = keys.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id")
    for q in keys.choices.values():
        q.add_argument("--keys", type=Path, help="the keys' file (default: INR_ACCESS_KEYS)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s audit %(message)s", stream=sys.stderr)
    path = args.keys or (Path(os.environ["INR_ACCESS_KEYS"]) if os.environ.get("INR_ACCESS_KEYS") else None)
    if path is None:
        sys.stderr.write("error: no keys file: give --keys FILE or set INR_ACCESS_KEYS\n")
        return 2
    store = KeyStore(path)
    try:
        store.check()
        if args.action == "create":
            models = None if args.models is None else [m.strip() for m in args.models.split(",") if m.strip()]
            key, record = store.create(args.name, args.scope, models, parse(args.quota))
            log.info("key created id=%s scopes=%s models=%s by=cli", record.id, ",".join(record.scopes), models)
            sys.stdout.write(json.dumps({"key": key, **record.public()}) + "\n")
        elif args.action == "list":
            sys.stdout.write(json.dumps([r.public() for r in store.records()], indent=1) + "\n")
        else:
            record = store.revoke(args.id)
            log.info("key revoked id=%s by=cli", record.id)
            sys.stdout.write(json.dumps(record.public()) + "\n")
    except (KeyError_, OSError, ValueError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
