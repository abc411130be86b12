"""A PSNR target on a fit in blocks (docs/fits.md, `target_psnr`), over HTTP to two real workers: the target is the
whole image's. Each block meets it over its crop raised by its overlap's share (training/blocks.py, `block_target`),
so the whole image's PSNR, the record's and the served render's, meets it; the overview meets it where its fit can,
else keeps its finest rounding and the job still succeeds; a block that cannot meet it fails the job, naming it. A
byte target with blocks is refused (422), before any upload is kept."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from modelrepo.blocks import BlockLayout
from tests.fits import photo, png
from tests.service.api.test_fits_blocks import BLOCK, FIT, H, W, psnr, served, stack, upload, wait_done
from training.blocks import blend_weights, block_target

__all__ = ["stack"]  # the module's fixture: the API and two workers (test_fits_blocks.py)
LAYOUT = BlockLayout.plan(W, H, BLOCK, 12)


def events(client, job: str) -> list[dict]:
    """The job's stored events, read from its stream (which ends with the job's end)."""
    out, kind = [], None
    with client.stream("GET", f"/v1/fits/{job}/events", timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                out.append({"event": kind, **json.loads(line[6:])})
    return out


def fitted(client, store, name: str, img: Image.Image, target: float) -> tuple[dict, dict]:
    rec = wait_done(client, upload(client, name, img, target_psnr=str(target)))
    assert rec["state"] == "succeeded", rec
    return rec, {c["piece"]: c for c in store.children(store.get(rec["id"]))}


def test_each_block_meets_the_psnr_target_and_so_does_the_whole_image(stack):
    client, store, _, _ = stack
    img, target = photo(W, H, seed=3), 20.0
    rec, kids = fitted(client, store, "targeted", img, target)
    assert len(kids) == 7 and {c["options"]["target_psnr"] for c in kids.values()} == {target}
    for b in LAYOUT.blocks:  # over its crop, at least the target raised by its overlap's share
        need = block_target(target, blend_weights(LAYOUT, b.file))
        assert need > target and kids[b.file]["metrics"]["full_psnr"] >= need, (b.file, need, kids[b.file])
    assert kids["overview"]["metrics"]["full_psnr"] >= target  # within its reach here
    whole = rec["metrics"]["full_psnr"]
    assert whole >= target and rec["psnr"] == whole, rec  # the record's PSNR is the whole image's
    assert rec["metrics"]["block_psnr_min"] >= target
    final = events(client, rec["id"])[-1]
    assert final["event"] == "succeeded" and final["psnr"] == whole, final
    truth = np.asarray(img, np.float64) / 255
    assert psnr(served(client, "targeted"), truth) >= target  # the bound holds for the blended render
    assert client.get("/v1/models/targeted").json()["metadata"]["blocks"]["grid"] == [3, 2]


def test_an_overview_that_cannot_reach_the_target_keeps_its_finest_rounding_and_the_job_succeeds(stack):
    """The overview (the whole image at a quarter of its side) draws only the coarse views and is harder to fit
    than the blocks: a target every block meets but it cannot reach does not fail the blocks' work."""
    client, store, _, _ = stack
    img, target = photo(W, H, seed=3), 24.0
    rec, kids = fitted(client, store, "overview-short", img, target)
    overview = kids["overview"]["metrics"]["full_psnr"]
    assert overview < target and rec["metrics"]["overview_psnr"] == overview, rec
    served(client, "overview-short")  # loaded: its metadata is the published version's
    rate = client.get("/v1/models/overview-short").json()["metadata"]["training"]["native_refit"]["rate"]
    assert rate["native_levels"] == 255 and rate["target_psnr_missed"] is True, rate  # the finest step, recorded
    assert rec["metrics"]["full_psnr"] >= target and rec["psnr"] == rec["metrics"]["full_psnr"]


def test_a_block_that_cannot_meet_the_target_fails_the_job_naming_it(stack):
    client, store, _, _ = stack
    rec = wait_done(client, upload(client, "too-high", photo(W, H, seed=3), target_psnr="60"))
    assert rec["state"] == "failed", rec
    assert "block blocks/r" in rec["error"] and "for the whole image to reach 60" in rec["error"], rec["error"]
    assert client.get("/v1/models/too-high").status_code == 404  # nothing published


def test_a_byte_target_with_blocks_is_refused_before_anything_is_queued(stack):
    client, store, _, _ = stack
    before = len(client.get("/v1/fits").json()["fits"])
    body = png(photo(W, H, seed=3))
    for fields in ({"blocks": "always"}, {}):  # FIT's block_size asks for blocks too
        r = client.post(
            "/v1/fits",
            files={"file": ("b.png", body, "image/png")},
            data={**FIT, **fields, "name": "bytes", "target_bytes": "50000"},
        )
        assert r.status_code == 422 and "target_psnr" in r.json()["error"], r.text
    r = client.post(
        "/v1/fits",
        files={"file": ("b.png", body, "image/png")},
        data={**FIT, "name": "bytes", "target_psnr": "20", "target_bytes": "50000"},
    )
    assert r.status_code == 422 and "one target" in r.json()["error"], r.text
    for bad in ("0", "-3", "101", "nan", "inf", "x"):
        r = client.post(
            "/v1/fits", files={"file": ("b.png", body, "image/png")}, data={**FIT, "name": "b", "target_psnr": bad}
        )
        assert r.status_code == 422 and "target_psnr" in r.json()["error"], (bad, r.text)
    assert len(client.get("/v1/fits").json()["fits"]) == before
