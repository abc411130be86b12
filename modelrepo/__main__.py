"""`python -m modelrepo import FILE.onnx --name NAME [--image …]`: an ONNX graph made elsewhere made a model folder
(modelrepo/importer.py), the graph checked and what was inferred printed.

`python -m modelrepo push FOLDER s3://…`: copy a local model repository (or one model folder) into a repository
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


CONVENTION = {  # option → config.pbtxt parameter (modelrepo/convention.py)
    "coordinate_range": "coordinate_range",
    "coordinate_order": "coordinate_order",
    "y_axis": "y_axis",
    "pixel_grid": "pixel_grid",
    "output_range": "output_range",
    "width": "image_width",
    "height": "image_height",
}


def add_import(sub) -> None:
    imp = sub.add_parser("import", help="make a model folder of an ONNX file made elsewhere")
    imp.add_argument("file", type=Path, help="the ONNX file")
    imp.add_argument("--name", required=True, help="the model's name (its folder)")
    imp.add_argument("--repository", type=Path, default=Path("models"), help="the model repository (default models)")
    imp.add_argument("--max-batch-size", type=int, help="rows per request (default: Triton's 4, an image's 262144)")
    imp.add_argument("--image", action="store_true", help="an image network: [N, 2] coordinates to [N, 1|3|4] values")
    imp.add_argument("--coordinate-range", metavar="LO,HI", help="its coordinates' range (default 0,1)")
    imp.add_argument("--coordinate-order", choices=("xy", "yx"), help="x first, or y first (default xy)")
    imp.add_argument("--y-axis", choices=("down", "up"), help="the way y grows (default down)")
    imp.add_argument("--pixel-grid", choices=("centers", "corners"), help="the range's ends (default centers)")
    imp.add_argument("--output-range", metavar="LO,HI", help="its values' range, black to full (default 0,1)")
    imp.add_argument("--width", type=int, help="native width in pixels (IIIF's full size)")
    imp.add_argument("--height", type=int, help="native height in pixels")


def run_import(args) -> int:
    from .importer import ImportRefused, import_onnx

    params = {key: str(getattr(args, opt)) for opt, key in CONVENTION.items() if getattr(args, opt) is not None}
    if args.image:
        params["task"] = "image"
    try:
        folder, text, found = import_onnx(args.file, args.repository, args.name, params, args.max_batch_size)
    except ImportRefused as e:
        print(f"error: {args.file.name}: {e}", file=sys.stderr)
        return 2
    print(f"{folder}: {'image model' if params else 'generic model (V2 only)'}")
    for line in found:
        print(f"  {line}")
    print(f"  {folder / 'config.pbtxt'}: {' '.join(text.split())}")
    return 0


def run_decode(args) -> int:
    from .uncoded import DecodeRefused, write_uncoded

    try:
        dest, changed = write_uncoded(args.model, args.out)
    except (DecodeRefused, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{dest}: {', '.join(changed) + ' decoded' if changed else 'no context-coded file: copied as it is'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m modelrepo", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    add_import(sub)
    push = sub.add_parser("push", help="copy model folders into a repository on S3")
    push.add_argument("source", type=Path, help="a model repository folder, or one model's folder")
    push.add_argument("target", help="s3://[host:port/]bucket/path")
    push.add_argument("--create-bucket", action="store_true", help="create the bucket first when it is missing")
    push.add_argument(
        "--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for S3 to answer (default 0)"
    )
    dec = sub.add_parser("decode", help="copy a model folder with its context-coded tables decoded, for Triton")
    dec.add_argument("model", type=Path, help="a model folder (config.pbtxt, N/model.onnx)")
    dec.add_argument("--out", type=Path, required=True, help="the repository to copy it into, under its name")
    args = p.parse_args(argv)
    if args.command == "import":
        return run_import(args)
    if args.command == "decode":
        return run_decode(args)
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
