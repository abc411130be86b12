"""The API's scratch folder for uploads to a bucket (issue 54, hole 2, the API's side of fitstore/uploads.py).

With INR_FIT_UPLOADS=s3://…, the API streamed each upload into `$TMPDIR/inr-fit-uploads` before putting it into the
bucket: another local user who owns TMPDIR or made that folder first could read the upload or swap it before it was
decoded and kept. The secure answer: the API streams into its private folder `$XDG_CACHE_HOME/inr-serve/fit-uploads`
(else under `~/.cache`), made 0700, and writes nothing in TMPDIR; a folder another user owns or can write refuses the
start in one line naming it and XDG_CACHE_HOME, exit code 2.
"""

from __future__ import annotations

import httpx

from tests.fits import photo, png
from tests.security.test_cache_folders import snapshot, theirs
from tests.servers import Server
from tests.service.test_startup_errors import one_line, run_cli


def test_the_api_streams_an_upload_for_the_bucket_into_its_private_folder(s3_server, tmp_path):
    """TMPDIR is another user's (1777) with `inr-fit-uploads` made first by them (0777): a large upload to a bucket
    is kept (put into the bucket) and nothing is written in TMPDIR; the private scratch folder is 0700."""
    shared = theirs(tmp_path / "shared", 0o1777)
    (theirs(shared / "inr-fit-uploads", 0o777) / "planted").write_bytes(b"x")
    before = snapshot(shared / "inr-fit-uploads")
    bucket, store = s3_server.bucket(), f"sqlite:///{tmp_path / 'fits.sqlite'}"
    env = {
        **s3_server.env,
        "TMPDIR": str(shared),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "INR_FIT_STORE": store,
        "INR_FIT_UPLOADS": s3_server.url(bucket, "uploads"),
        "INR_MAX_UPLOAD_PIXELS": "1000",
    }
    (tmp_path / "models").mkdir()
    with Server(tmp_path / "models", env=env).running() as srv:
        r = httpx.post(
            f"{srv.url}/v1/fits",
            files={"file": ("big.png", png(photo(48, 40)), "image/png")},
            data={"preset": "grid", "steps": "10"},
            timeout=60,
        )
    assert r.status_code == 202, r.text
    name = r.json()["source"]["upload"]
    assert [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]] == [f"uploads/{name}"]
    assert snapshot(shared / "inr-fit-uploads") == before
    assert (tmp_path / "xdg" / "inr-serve" / "fit-uploads").stat().st_mode & 0o777 == 0o700


def test_a_scratch_folder_another_user_made_refuses_the_start_in_one_line(tmp_path):
    folder = tmp_path / "xdg" / "inr-serve" / "fit-uploads"
    folder.parent.mkdir(parents=True, mode=0o700)
    theirs(folder, 0o777)
    r = run_cli(
        "--models", str(tmp_path), "--port", "0",
        env={"XDG_CACHE_HOME": str(tmp_path / "xdg"), "INR_FIT_UPLOADS": "s3://127.0.0.1:9/bkt/uploads",
             "INR_MODEL_CACHE": str(tmp_path / "mc")},
    )  # fmt: skip
    one_line(r, 2, "error: ")
    assert f"the cache folder {folder} belongs to uid 65534" in r.stderr and "XDG_CACHE_HOME" in r.stderr, r.stderr
