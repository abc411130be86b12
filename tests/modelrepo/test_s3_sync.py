"""A model repository uploaded to a real S3 server (tests/s3server.py) by another tool, as `aws s3 sync` or boto3
upload one: no `.published` markers. Each version is served once it has settled (modelrepo/s3settle.py: no writer's
claim, complete, quiet for INR_S3_SETTLE_S by S3's clock); a version cut off halfway never is."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from modelrepo import read_version
from modelrepo.s3 import S3Repository

ROOT = Path(__file__).resolve().parents[2]


def upload(client, location, folder: Path, files: list[Path] | None = None) -> None:
    """`folder`'s files (a model's, or some of them) under the repository's prefix (`location`,
    modelrepo.parse_s3), one PUT each, in key order."""
    for path in files if files is not None else sorted(p for p in folder.rglob("*") if p.is_file()):
        client.upload_file(str(path), location.bucket, location.key(folder.name, *path.relative_to(folder).parts))


def settled(repo, name: str, seconds: float = 20.0) -> tuple[int, ...]:
    """The versions of `name` served once those uploaded have had time to settle (settle_s is short here)."""
    deadline = time.monotonic() + seconds
    while True:
        repo.scan()
        model = repo.index.get(name)
        if (model and not model.held) or time.monotonic() > deadline:
            return model.published if model else ()
        time.sleep(0.3)


def test_a_synced_repository_is_served_once_settled_and_a_cut_off_version_never(s3_env, tmp_path):
    client = s3_env.client()
    repo = S3Repository(s3_env.url(s3_env.bucket()), tmp_path / "cache", settle_s=3600)
    for name in ("astronaut", "digits"):
        upload(client, repo.location, ROOT / "models" / name)
    assert repo.scan() == {}  # just written: a sync may still be at it
    assert "written 0 s ago" in repo.index["astronaut"].held[1] and "INR_S3_SETTLE_S" in repo.index["astronaut"].held[1]

    repo.settler.settle_s = 1.0
    assert settled(repo, "astronaut") == (1,) and settled(repo, "digits") == (1,)
    assert sorted(repo.scan()) == ["astronaut", "digits"]
    folder = repo.folder("astronaut")
    record = read_version(folder, 1, need_file=False)
    model = repo.fetch("astronaut", 1, "model.onnx", record.onnx_sha256)  # checked against its metadata's sha256
    assert model.read_bytes() == (ROOT / "models/astronaut/1/model.onnx").read_bytes()

    # version 2 uploaded in key order and cut off: before model.onnx, then before preview.png
    v2 = tmp_path / "astronaut"
    shutil.copytree(ROOT / "models" / "astronaut" / "1", v2 / "2")
    files = sorted((v2 / "2").iterdir())  # body.onnx, metadata.json, model.onnx, preview.png
    upload(client, repo.location, v2, files[:2])
    assert settled(repo, "astronaut", 3) == (1,)
    assert "2/model.onnx is not uploaded" in repo.index["astronaut"].held[2]
    upload(client, repo.location, v2, files[2:3])
    assert settled(repo, "astronaut", 3) == (1,)
    assert "2/metadata.json names preview.png, not uploaded" in repo.index["astronaut"].held[2]
    assert not (repo.folder("astronaut") / "2").exists()  # nothing of it in the mirror
    upload(client, repo.location, v2, files[3:])
    assert settled(repo, "astronaut") == (1, 2)

    # a version with a writer's claim in it waits for its marker, however old
    claim = repo.location.key("digits", "2", ".claim-00000000000000000001-abcd")
    client.put_object(Bucket=repo.location.bucket, Key=claim, Body=b"")
    for path in sorted((ROOT / "models" / "digits" / "1").iterdir()):
        client.upload_file(str(path), repo.location.bucket, repo.location.key("digits", "2", path.name))
    time.sleep(2.5)
    repo.scan()
    assert repo.index["digits"].published == (1,) and "writer's claim" in repo.index["digits"].held[2]

    # served versions stay served through a new config.pbtxt; an object added to one withdraws it until it is quiet
    repo.settler.settle_s = 3600
    body = (ROOT / "models/astronaut/config.pbtxt").read_bytes()
    client.put_object(Bucket=repo.location.bucket, Key=repo.location.key("astronaut", "config.pbtxt"), Body=body)
    repo.scan()
    assert repo.index["astronaut"].published == (1, 2)
    client.put_object(Bucket=repo.location.bucket, Key=repo.location.key("astronaut", "2", "notes.txt"), Body=b"x")
    repo.scan()
    assert repo.index["astronaut"].published == (1,) and "written" in repo.index["astronaut"].held[2]
