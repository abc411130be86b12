"""`python -m modelrepo push FOLDER s3://…`: copy a local model repository (or one model folder) into a repository
on S3, each version published under its own number (modelrepo/s3publish.py); versions already there are kept.
Credentials and the endpoint from the AWS_* variables, as the service reads them. `--wait S` waits up to S seconds for
an S3 server that does not answer yet (a stack's first start: the server and this command start together). A bad
argument or a refusal from S3 is one line, `error: …`, and exit code 2."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from .location import LocationError
from .open import open_repository
from .repository import StorageUnavailable
from .s3publish import push_model
from .spec import NAME_RE

POLL_S = 0.2  # --wait: a try this long after S3 did not answer
ANSWER_S = 5  # --wait: the most one try waits for an answer (less when less of the wait is left)


def create_bucket(repo) -> None:
    """The bucket, unless it is there (a first start of a stack; S3 answers the same error when it is ours)."""
    from .s3 import RepositoryError

    try:
        repo.call("HEAD", "head_bucket", "the bucket")
    except RepositoryError as e:
        if "no bucket" not in str(e):
            raise
        repo.call("PUT", "create_bucket", "the bucket")
        print(f"created the bucket {repo.location.bucket}")


def ready(repo, create: bool, wait_s: float) -> None:
    """The bucket there (created first with `create`), S3 answering; tried again every POLL_S for `wait_s` seconds
    while S3 does not answer, each try bounded by what is left of them (S3Repository.polling). A refusal (no bucket,
    wrong credentials) is raised at once: waiting would not change it."""
    from .s3 import RepositoryError

    deadline = time.monotonic() + wait_s
    tries, answer_s = 0, 0.0
    try:
        while True:
            left = deadline - time.monotonic()
            if wait_s and (want := max(0.5, min(ANSWER_S, math.ceil(left * 2) / 2))) != answer_s:
                answer_s = want
                repo.polling(answer_s)
            tries += 1
            try:
                if create:
                    create_bucket(repo)
                repo.check()
                return
            except RepositoryError:
                raise
            except StorageUnavailable as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    waited = f" (waited {wait_s:g} s, {tries} {'try' if tries == 1 else 'tries'}: --wait)"
                    raise StorageUnavailable(f"{e}{waited if wait_s else ''}") from None
                time.sleep(min(POLL_S, left))
    finally:
        if answer_s:
            repo.polling(0)  # the pushes: the usual retries and timeouts


class Parser(argparse.ArgumentParser):
    """A usage error is one line, `error: …`, and exit code 2, like the refusals below (the convention of
    commandline.OneLineParser, which modelrepo does not import: it depends on no other package of the project)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"error: {self.prog}: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m modelrepo", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    push = sub.add_parser("push", help="copy model folders into a repository on S3")
    push.add_argument("source", type=Path, help="a model repository folder, or one model's folder")
    push.add_argument("target", help="s3://[host:port/]bucket/path")
    push.add_argument("--create-bucket", action="store_true", help="create the bucket first when it is missing")
    push.add_argument(
        "--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for S3 to answer (default 0)"
    )
    args = p.parse_args(argv)
    try:
        if not args.target.startswith("s3://"):
            raise LocationError(f"the target '{args.target[:80]}' must be an s3:// URL")
        if not args.source.is_dir():
            raise LocationError(f"'{args.source}' is not a folder")
        if not 0 <= args.wait <= 3600:
            raise LocationError(f"--wait {args.wait:g}: seconds from 0 to 3600")
        repo = open_repository(args.target)
        ready(repo, args.create_bucket, args.wait)
        one = (args.source / "metadata.json").is_file()
        folders = [args.source] if one else sorted(f for f in args.source.iterdir() if f.is_dir())
        for folder in (f for f in folders if NAME_RE.match(f.name)):
            copied = push_model(repo, folder)
            print(f"{folder.name}: {', '.join(map(str, copied)) or 'nothing new'} -> {repo.url}/{folder.name}")
    except (LocationError, StorageUnavailable, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
