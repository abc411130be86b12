"""Write a bundled photo's provenance into the model fitted from it (`make models`, data/photos/README.md).

    python -m training.photo_provenance models/dandelion data/photos/dandelion.json

The provenance file names the photo, its author, licence, the Debian package it came from and the downscale;
`fit-image` records only the file's path. This adds the provenance to the newest version's metadata as
`source.photo`, and a description (the photo, the licence, the downscale, the fit and its PSNR over all pixels,
read from that version's metrics) to the version and to the model's metadata.json, each file replaced
atomically. It refuses a model that was not fitted from the named file, or a file whose sha256 is not the
recorded one (the photo changed: redo the provenance), so the metadata never describes another image.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from modelrepo import check_version, read_spec, read_version, sha256_file, version_numbers

from .errors import UsageError


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    tmp.chmod(path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def describe(photo: dict, meta: dict) -> str:
    """One sentence: what the model is of, whose photo under which licence, how it was scaled and fitted, how well."""
    w0, h0 = photo["original_size"]
    w, h = meta["source"]["size"]
    psnr = meta.get("metrics", {}).get("full_psnr")
    steps = meta.get("training", {}).get("steps")
    fit = f"fitted at that native size for {steps} steps" if steps else "fitted at that native size"
    quality = f": {psnr:.2f} dB PSNR over all pixels" if isinstance(psnr, (int, float)) else ""
    return (
        f'{photo["subject"]}: "{photo["title"]}" by {photo["author"]} ({photo["year"]}, {photo["licence"]}, '
        f"Debian package {photo['package'].split()[0]}), Lanczos-downscaled from {w0}×{h0} to {w}×{h} and "
        f"{fit}{quality}"
    )


def annotate(model: Path, provenance: Path) -> str:
    """Add the provenance to the newest version of `model`; returns the description written."""
    photo = json.loads(provenance.read_text())
    versions = version_numbers(model)
    if not versions:
        raise UsageError(f"{model} has no version folder")
    record = read_version(model, versions[-1])
    check_version(model, record)
    meta = dict(record.metadata)
    source = dict(meta.get("source") or {})
    if source.get("image") != photo["file"]:
        raise UsageError(
            f"{model} version {record.version} was fitted from {source.get('image')!r}, "
            f"not from {photo['file']!r} that {provenance} describes"
        )
    digest = sha256_file(Path(photo["file"]))
    if digest != photo["sha256"]:
        raise UsageError(
            f"{photo['file']} has sha256 {digest[:12]}…, {provenance} records {photo['sha256'][:12]}…: "
            "the photo changed, so its provenance must be checked again"
        )
    source["photo"] = {k: v for k, v in photo.items() if k != "file"}
    meta["source"] = source
    meta["description"] = describe(photo, meta)
    vpath = model / str(record.version) / "metadata.json"
    _write_json(vpath, {**json.loads(vpath.read_text()), "source": source, "description": meta["description"]})
    spath = model / "metadata.json"
    _write_json(spath, {**json.loads(spath.read_text()), "description": meta["description"]})
    read_spec(model)
    check_version(model, read_version(model, record.version))
    return meta["description"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.photo_provenance", description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="the model folder, e.g. models/dandelion")
    p.add_argument("provenance", type=Path, help="the photo's provenance, e.g. data/photos/dandelion.json")
    args = p.parse_args(argv)
    try:
        description = annotate(args.model, args.provenance)
    except (UsageError, OSError, KeyError, ValueError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    sys.stdout.write(f"{args.model}: {description}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
