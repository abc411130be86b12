"""fitstore.uploads: a kept upload is named after its job; `sweep` deletes, once they are older than the grace, the
files no job needs (its job ended, was split into blocks, or is unknown; a part file never finished) and nothing
else; a record's upload name never leads out of the folder."""

from __future__ import annotations

import time

import pytest

from fitstore import FitStore, new_id, uploads


def kept(store: FitStore, folder, state: str | None = "queued") -> str:
    """A job whose upload is kept as a file, left in `state` (None: no job at all)."""
    job_id = new_id()
    name = uploads.file_name(job_id, "tiff")
    (folder / name).write_bytes(b"II*\x00")
    if state is not None:
        rec = store.submit(
            name=f"n{job_id}",
            options={"preset": "grid", "steps": 1},
            image_png=b"",
            source={"filename": "a.tif", "width": 9000, "height": 9000, "upload": name},
            deadline_s=60,
            max_running=1,
            queue_limit=8,
            job_id=job_id,
        )
        assert rec["id"] == job_id and store.image(job_id) is None
        if state == "cancelled":
            store.cancel(job_id)
    return name


def test_sweep_deletes_old_files_no_job_needs_and_keeps_the_rest(tmp_path):
    store = FitStore(f"sqlite:///{tmp_path}/fits.sqlite")
    folder = tmp_path / "uploads"
    folder.mkdir()
    try:
        queued, cancelled, orphan = kept(store, folder), kept(store, folder, "cancelled"), kept(store, folder, None)
        (folder / f"{uploads.PART}0123").write_bytes(b"half")
        (folder / "notes.txt").write_text("not ours")
        assert uploads.sweep(store, folder) == [], "nothing is older than the grace"
        later = time.time() + uploads.GRACE_S + 1
        gone = uploads.sweep(store, folder, now=later)
        assert sorted(gone) == sorted([cancelled, orphan, f"{uploads.PART}0123"])
        assert sorted(p.name for p in folder.iterdir()) == sorted([queued, "notes.txt"])
        assert uploads.sweep(store, tmp_path / "missing") == []
    finally:
        store.close()


def test_a_records_upload_name_never_leads_out_of_the_folder(tmp_path):
    assert uploads.path_of(tmp_path, {}) is None
    assert uploads.path_of(tmp_path, {"upload": "0123456789ab.png"}) == tmp_path / "0123456789ab.png"
    for bad in ("../etc.png", "/etc/passwd", "0123456789ab.png/..", "0123456789AB.png", "0123456789ab.exe"):
        with pytest.raises(ValueError, match="not JOB.EXT"):
            uploads.path_of(tmp_path, {"upload": bad})
    (tmp_path / "0123456789ab.png").write_bytes(b"x")
    uploads.release(tmp_path, {"upload": "0123456789ab.png"})
    uploads.release(tmp_path, {"upload": "0123456789ab.png"})  # gone already: no error
    assert not list(tmp_path.iterdir())


def test_a_kept_upload_is_used_only_with_the_sha256_its_record_holds(tmp_path):
    """`fetch` hands the worker the kept file only when its bytes are those the API hashed (`source.sha256`); a file
    changed since is refused (UploadMismatch), and a record without a sha256 (written before it) is used as it is."""
    import hashlib

    (tmp_path / "0123456789ab.png").write_bytes(b"the bytes sent")
    source = {"upload": "0123456789ab.png", "sha256": hashlib.sha256(b"the bytes sent").hexdigest()}
    assert uploads.fetch(tmp_path, source, tmp_path / "tmp") == tmp_path / "0123456789ab.png"
    (tmp_path / "0123456789ab.png").write_bytes(b"other bytes")
    with pytest.raises(uploads.UploadMismatch, match="not the file the API received"):
        uploads.fetch(tmp_path, source, tmp_path / "tmp")
    assert uploads.fetch(tmp_path, {"upload": "0123456789ab.png"}, tmp_path / "tmp") == tmp_path / "0123456789ab.png"


def test_the_scratch_of_a_bucket_is_the_private_folder_given(tmp_path):
    """For a bucket, the API streams into the private folder it passes (never a name in TMPDIR); a folder stays
    itself."""
    assert uploads.scratch("s3://127.0.0.1:9/b/uploads", tmp_path / "private") == tmp_path / "private"
    assert uploads.scratch(str(tmp_path / "up"), tmp_path / "private") == tmp_path / "up"
