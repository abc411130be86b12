"""What a fit worker's log says, and in what order (issue 58): a fit in blocks logs each piece's end before its
version's, and libvips' notes ("threadpool completed with N workers", one per region cut out of the upload) stay
out of the worker's INFO log, which keeps the worker's own lines."""

from __future__ import annotations

import re

from fitstore import FitStore
from tests.fits import Worker, photo, png, wait_finished

W, H, BLOCK = 96, 48, 48  # two blocks and the overview: three pieces, one worker fits them in turn


def test_a_block_fit_logs_every_piece_before_its_version_and_no_libvips_notes(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    url = f"sqlite:///{tmp_path}/fits.sqlite"
    store = FitStore(url, stale_s=3)
    job = store.submit(
        name="blocks",
        options={
            "preset": "grid",
            "size": None,
            "steps": 40,
            "protocol": "full",
            "seed": 0,
            "block": BLOCK,
            "overlap": 8,
            "blocks": "always",
        },
        image_png=png(photo(W, H)),
        source={"filename": "blocks.png", "width": W, "height": H, "mode": "RGB", "frames": 1},
        deadline_s=300,
        max_running=1,
        queue_limit=4,
    )
    worker = Worker(url, models, tmp_path / "worker.log")
    try:
        rec = wait_finished(store, job["id"], timeout=300)
    finally:
        worker.stop()
        store.close()
    lines = worker.output().splitlines()
    assert rec["state"] == "succeeded", "\n".join(lines[-40:])
    pieces = [i for i, line in enumerate(lines) if re.search(r"fit \S+: piece \S+ done in ", line)]
    version = [i for i, line in enumerate(lines) if f"fit {job['id']}: blocks version 1 done in " in line]
    assert len(pieces) == 3 and len(version) == 1, "\n".join(lines)
    assert max(pieces) < version[0], "\n".join(lines[min(pieces) :])
    assert any(f"fit {job['id']}: split into 2 blocks" in line for line in lines), "\n".join(lines)
    assert [line for line in lines if "pyvips" in line or "threadpool" in line] == []
