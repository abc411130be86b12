"""`python -m training worker` as real subprocesses on a real SQLite store: a fit end to end, cancel,
a worker killed mid-fit (retried once, then failed), two workers racing, SIGTERM, the deadline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from fitstore import FitStore
from tests.fits import ROOT, Worker, photo, png, submit, wait_finished, wait_for

LONG = {"steps": 1_000_000}  # never finishes: caught mid-fit by construction (20,000 was minutes here, at
#                              ~130 steps/s under load, but seconds on a fast CPU)


@pytest.fixture
def place(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    url = f"sqlite:///{tmp_path}/fits.sqlite"
    workers: list[Worker] = []

    def start(*args, **kw) -> Worker:
        w = Worker(url, models, tmp_path / f"worker{len(workers)}.log", *args, **kw)
        workers.append(w)
        return w

    yield FitStore(url, stale_s=3), models, start
    for w in workers:
        w.stop(timeout=30)


def running_past(store, job_id, step=1, timeout=240):
    return wait_for(store, job_id, lambda r: r["state"] == "running" and r["step"] >= step, timeout, f"step {step}")


def test_a_worker_fits_an_uploaded_image_with_ordered_progress_and_previews(place):
    store, models, start = place
    job = submit(store, "upload")
    worker = start()
    rec = wait_finished(store, job["id"])
    assert rec["state"] == "succeeded", worker.output()[-3000:]
    assert rec["version"] == 1 and rec["step"] == 60 and rec["metrics"]["train_psnr"] > 15
    events = store.events(job["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["queued", "started"] and kinds[-1] == "succeeded" and set(kinds[2:-1]) == {"progress"}
    steps = [e["step"] for e in events if e["type"] == "progress"]
    assert steps == sorted(steps) and steps[-1] == 60 and len(steps) >= 10
    assert all(e["psnr"] > 0 for e in events[2:-1])
    # the ETA counts from the pace after the first step: none before (the first event may come at it)
    assert all(e["eta_s"] >= 0 if k or e["step"] > 1 else e["eta_s"] is None for k, e in enumerate(events[2:-1]))
    previews = [e["seq"] for e in events if e.get("preview")]
    assert len(previews) >= 2 and previews[-1] == events[-2]["seq"]  # the last progress has one
    with Image.open(__import__("io").BytesIO(store.preview(job["id"], previews[-1]))) as im:
        assert im.size == (64, 54)  # the whole 48×40 upload, its longer side capped at size 32: 32×27, in aspect
    # the version is a complete model folder: metadata names the upload, the ONNX answers
    meta = json.loads((models / "upload" / "1" / "metadata.json").read_text())
    assert meta["source"]["kind"] == "upload" and meta["source"]["job"] == job["id"]
    assert meta["source"]["size"] == [32, 27]
    rgb = ort.InferenceSession(str(models / "upload" / "1" / "model.onnx")).run(
        None, {"coords": np.array([[0.5, 0.5]], np.float32)}
    )[0]
    assert rgb.shape == (1, 3)
    assert store.image(job["id"]) is None  # the upload is dropped once the job is done
    # the same name again: the next version
    again = wait_finished(store, submit(store, "upload")["id"])
    assert again["version"] == 2 and (models / "upload" / "2" / "model.onnx").exists()


def test_the_grid_preset_fits_a_non_square_upload_whole_at_its_native_size(place):
    store, models, start = place
    start()
    job = submit(store, "wide", image=png(photo(60, 24)), preset="grid", size=None, steps=30)
    rec = wait_finished(store, job["id"])
    assert rec["state"] == "succeeded", rec
    meta = json.loads((models / "wide" / "1" / "metadata.json").read_text())
    assert meta["source"]["size"] == [60, 24] and meta["encoding"]["name"] == "grid"
    assert meta["encoding"]["image_size"] == [60, 24] and meta["export"]["weights"].startswith("float16")
    session = ort.InferenceSession(str(models / "wide" / "1" / "model.onnx"))
    props = session.get_modelmeta().custom_metadata_map
    assert (props["image_width"], props["image_height"]) == ("60", "24")
    assert session.run(None, {"coords": np.array([[0.5, 0.5]], np.float32)})[0].shape == (1, 3)
    previews = [e["seq"] for e in store.events(job["id"]) if e.get("preview")]
    with Image.open(__import__("io").BytesIO(store.preview(job["id"], previews[-1]))) as im:
        assert im.size == (64, 26)


def test_a_job_keeps_its_psnr_target_and_one_it_cannot_meet_keeps_the_closest_model_with_a_warning(place):
    """target_psnr and target_bytes (POST /v1/fits) reach fit-image's rate control through the worker: the model's
    training PSNR at least the target, its choice in metadata; a byte budget below the smallest file, or a PSNR above
    the finest rounding, keeps the closest model (the smallest file, the finest rounding) and the job says so, where
    the command line fails (tests/training/test_grid_rate.py): an upload's fit is not lost to a target."""
    store, models, start = place
    start()
    ok = submit(store, "aimed", image=png(photo(60, 24)), preset="grid", size=None, steps=30, target_psnr=20.0)
    rec = wait_finished(store, ok["id"])
    assert rec["state"] == "succeeded", rec
    rate = json.loads((models / "aimed" / "1" / "metadata.json").read_text())["training"]["native_refit"]["rate"]
    assert rate["target_psnr"] == 20.0 and rate["psnr_train"] >= 20.0
    job = submit(store, "tiny", image=png(photo(60, 24)), preset="grid", size=None, steps=30, target_bytes=2000)
    rec = wait_finished(store, job["id"])
    assert rec["state"] == "succeeded", rec
    rate = json.loads((models / "tiny" / "1" / "metadata.json").read_text())["training"]["native_refit"]["rate"]
    assert rate["target_bytes_missed"] is True and rate["native_levels"] == 1
    size = (models / "tiny" / "1" / "model.onnx").stat().st_size
    assert rate["file_bytes"] == size > 2000
    assert rec["warning"].startswith("target_bytes 2000 is below the smallest file this grid makes: the smallest, ")
    assert f"{size} bytes at" in rec["warning"]
    job = submit(store, "high", image=png(photo(60, 24)), preset="grid", size=None, steps=30, target_psnr=99.0)
    rec = wait_finished(store, job["id"])
    assert rec["state"] == "succeeded" and "target_psnr 99 is beyond this fit: it reaches" in rec["warning"], rec
    rate = json.loads((models / "high" / "1" / "metadata.json").read_text())["training"]["native_refit"]["rate"]
    assert rate["native_levels"] == 255 and rate["target_psnr_missed"] is True


def test_a_job_with_a_quality_is_trained_for_rate_through_the_worker(place):
    """rd_lambda (POST /v1/fits) reaches fit-image's rate–distortion fine-tune (grid_rd.py) through the worker: the
    model's metadata records it, and a larger λ makes fewer table bytes."""
    store, models, start = place
    start()
    sizes = {}
    for name, lam in (("fine", 1e-4), ("coarse", 1e-2)):
        job = submit(store, name, image=png(photo(60, 24)), preset="grid", size=None, steps=30, rd_lambda=lam)
        rec = wait_finished(store, job["id"])
        assert rec["state"] == "succeeded", rec
        training = json.loads((models / name / "1" / "metadata.json").read_text())["training"]
        assert training["rd"]["lambda"] == lam and "native_refit" not in training
        sizes[name] = training["rd"]["estimated_bits_per_pixel"]
    assert sizes["coarse"] < sizes["fine"]


def test_cancel_of_a_running_fit_writes_nothing(place):
    store, models, start = place
    start()
    job = submit(store, "gone", **LONG)
    running_past(store, job["id"], 2)
    assert store.cancel(job["id"])["cancel_requested"]
    rec = wait_finished(store, job["id"], timeout=60)
    assert rec["state"] == "cancelled" and not (models / "gone").exists()


def test_a_worker_killed_mid_fit_is_retried_once_then_the_job_fails(place):
    store, models, start = place
    first = start()
    job = submit(store, "killed", **LONG)
    running_past(store, job["id"], 2)
    first.kill()
    second = start()  # its heartbeat thread reaps the dead worker's job and it takes attempt 2
    rec = wait_for(
        store,
        job["id"],
        lambda r: r["attempt"] == 2 and r["state"] == "running" and r["step"] >= 2,
        what="attempt 2 running",
    )
    assert rec["worker"] != store.events(job["id"])[1]["worker"] and rec["failures"] == 1
    retry = [e for e in store.events(job["id"]) if e["type"] == "retrying"]
    assert len(retry) == 1 and "stopped answering" in retry[0]["reason"]
    second.kill()
    start()
    rec = wait_finished(store, job["id"], timeout=120)
    assert rec["state"] == "failed" and "already retried once" in rec["error"], rec
    assert not (models / "killed").exists()


def test_two_workers_racing_run_each_job_once(place):
    store, models, start = place
    start(), start()
    job = submit(store, "raced", max_running=2)
    store.enqueue(job["id"], 1)  # a duplicate message for the same attempt, as a retry race could leave
    store.enqueue(job["id"], 1)
    rec = wait_finished(store, job["id"])
    assert rec["state"] == "succeeded"
    assert [e["type"] for e in store.events(job["id"])].count("started") == 1
    assert sorted(p.name for p in (models / "raced").iterdir() if p.is_dir()) == ["1"]


def test_sigterm_hands_the_job_back_and_another_worker_finishes_it(place):
    store, models, start = place
    first = start()
    job = submit(store, "handed", steps=3000)
    running_past(store, job["id"], 2)
    assert first.stop() == 0
    rec = store.get(job["id"])
    assert rec["state"] == "queued" and rec["attempt"] == 2 and rec["failures"] == 0
    assert "SIGTERM" in store.events(job["id"])[-1]["reason"]
    start()
    assert wait_finished(store, job["id"])["state"] == "succeeded"


def test_a_fit_past_its_deadline_fails_naming_the_setting(place):
    store, models, start = place
    start()
    job = submit(store, "slow", deadline_s=2, **LONG)
    rec = wait_finished(store, job["id"], timeout=120)
    assert rec["state"] == "failed" and "INR_FIT_DEADLINE_S" in rec["error"] and not (models / "slow").exists()


def test_a_fit_never_writes_into_a_digits_model(place):
    store, models, start = place
    shutil.copytree(ROOT / "models" / "digits", models / "digits")
    before = sorted(p.name for p in (models / "digits").iterdir())
    start()
    rec = wait_finished(store, submit(store, "digits")["id"])
    assert rec["state"] == "failed" and "is a digits model" in rec["error"]
    assert sorted(p.name for p in (models / "digits").iterdir()) == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--store", "mysql://x/y"], "unknown job store"),
        (["--threads", "0"], "--threads"),
        (["--nice", "40"], "--nice"),
        (["--memory", "lots"], "--memory: expected a size such as 2GiB"),
        (["--memory", "0"], "--memory: expected a size of more than 0 bytes"),
    ],
)
def test_bad_worker_options_are_one_line_and_exit_2(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "training", "worker", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_kept_upload_missing_from_the_uploads_folder_fails_naming_the_setting(tmp_path):
    """A worker whose --uploads is not the API's INR_FIT_UPLOADS: the job fails saying so, not with a traceback."""
    from training.errors import UsageError
    from training.worker.job import JobContext, upload_file

    ctx = JobContext(store=None, models=tmp_path, worker="w", uploads=tmp_path / "elsewhere")
    rec = {"id": "0123456789ab", "source": {"upload": "0123456789ab.tif"}}
    with pytest.raises(UsageError, match=r"not in the uploads folder .*elsewhere.*INR_FIT_UPLOADS.*must share"):
        upload_file(ctx, rec, tmp_path)
