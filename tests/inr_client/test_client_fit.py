"""`python -m inr_client fit PATH...` against the real server, the real job store and a real worker: a folder goes
through a small fit queue (its 429s waited out) and each photo is fitted once; the same command again skips them
all by hash (also with `training` hidden: the client runs alone); a corrupt photo is reported and the others go on;
bad arguments are one line, exit 2; an unreachable service is retried, then reported per photo."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import time

import pytest

from fitstore import FitStore
from inr_client.cli import main
from tests.fits import Worker, photo, png
from tests.inr_client.test_client_alone import HIDDEN
from tests.servers import ROOT, Server
from tests.service.api.fitserver import KEY, api, fit_server, store  # noqa: F401

FAST = ["--preset", "fourier-small", "--size", "32", "--steps", "60", "--protocol", "paper"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The server (1 fit running + 1 queued at most, Retry-After 2 s) and one worker on one SQLite store."""
    repo = tmp_path_factory.mktemp("fit-client-models")
    shutil.copytree(ROOT / "models" / "digits", repo / "digits")
    url = f"sqlite:///{tmp_path_factory.mktemp('fit-client-store') / 'fits.sqlite'}"
    env = {"INR_FIT_STORE": url, "INR_FIT_STALE_S": "2", "INR_FIT_MAX_RUNNING": "1", "INR_FIT_QUEUE_LIMIT": "1"}
    srv = Server(repo, env=env).wait_ready()
    worker = Worker(url, repo, tmp_path_factory.mktemp("fit-client-log") / "worker.log", stale_s=2)
    store = FitStore(url, stale_s=2)
    try:
        deadline = time.monotonic() + 120  # the worker imports torch, then sends its first heartbeat
        while not store.workers() and time.monotonic() < deadline and worker.proc.poll() is None:
            time.sleep(0.2)
        assert store.workers(), worker.output()[-3000:]
        srv.repo, srv.store, srv.worker = repo, store, worker
        yield srv
    finally:
        store.close()
        worker.stop()
        srv.stop()


def cli(url: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        return main(["--url", url, *args], out=out), out.getvalue()
    except SystemExit as e:  # argparse errors exit from inside the parser
        return e.code, out.getvalue()


def rows(out: str) -> dict[str, list[str]]:
    """The summary table: {photo's file name: [model, job, state, psnr, note]}."""
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["PHOTO", "MODEL", "JOB", "STATE", "PSNR"], out
    table = {}
    for line in lines[1:-1]:
        path, model, job, state, psnr, *note = line.split(maxsplit=5)
        table[path.rsplit("/", 1)[-1]] = [model, job, state, psnr, " ".join(note)]
    return table


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_folder_is_fitted_once_through_a_full_queue_then_skipped_by_hash(stack, tmp_path, capsys):
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(4):
        (folder / f"p{i}.png").write_bytes(png(photo(40, 32, seed=i)))
    (folder / "notes.txt").write_text("not a photo")
    (folder / "._p0.png").write_bytes(b"macOS metadata")  # hidden: left out
    code, out = cli(stack.url, "fit", "--wait", *FAST, str(folder))
    err = capsys.readouterr().err
    assert code == 0, (out, err, stack.worker.output()[-3000:])
    table = rows(out)
    assert sorted(table) == [f"p{i}.png" for i in range(4)]
    assert all(r[2] == "succeeded" and float(r[3]) > 5 for r in table.values()), out  # PSNR: 60 steps, 32²
    assert "fit queue full" in err and "waited" in out.splitlines()[-1], (out, err)  # 429s, waited out
    jobs = stack.store.list()
    assert sorted(r["id"] for r in jobs) == sorted(r[1] for r in table.values())  # each photo fitted once
    assert sorted(r["source"]["sha256"] for r in jobs) == sorted(sha(p) for p in folder.glob("p*.png"))
    for name, job, *_ in table.values():
        meta = json.loads((stack.repo / name / "1" / "metadata.json").read_text())
        assert meta["source"]["sha256"] == stack.store.get(job)["source"]["sha256"]

    # the same photos again, by a glob, in a client that cannot import training, torch or the service
    again = subprocess.run(
        [sys.executable, "-c", HIDDEN, "--url", stack.url, "fit", "--no-progress", str(folder / "*.png")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and again.stderr == "", again.stderr
    skipped = rows(again.stdout)
    assert all(r[2] == "skipped" and "same bytes as job" in r[4] for r in skipped.values()), again.stdout
    assert {k: r[1] for k, r in skipped.items()} == {k: r[1] for k, r in table.items()}
    assert again.stdout.splitlines()[-1] == "4 photos: 0 fitted, 4 skipped, 0 failed"
    assert len(stack.store.list()) == 4


def test_a_corrupt_photo_is_reported_and_the_others_go_on(stack, tmp_path, capsys):
    folder = tmp_path / "mixed"
    folder.mkdir()
    good = png(photo(40, 32, seed=50))
    (folder / "a-broken.png").write_bytes(good[: len(good) // 2])
    (folder / "b-new.png").write_bytes(good)
    code, out = cli(stack.url, "fit", "--wait", "--no-progress", *FAST, str(folder))
    err = capsys.readouterr().err
    table = rows(out)
    assert code == 1 and err == "error: 1 of 2 photos failed; the table above says why\n", err
    assert table["a-broken.png"][2] == "failed" and "400" in table["a-broken.png"][4]
    assert "damaged or truncated" in table["a-broken.png"][4]
    assert table["b-new.png"][2] == "succeeded", (out, stack.worker.output()[-3000:])


@pytest.mark.parametrize(
    "args, problem",
    [
        (["nowhere/photo.png"], "no such file or folder 'nowhere/photo.png'"),
        (["EMPTY"], "has no image files"),
        (["EMPTY/*.jpg"], "no image files match"),
        (["--steps", "0", "x.png"], "--steps"),
        (["--header", "nokey", "x.png"], "NAME=VALUE"),
        (["--preset", "huge", "NEW"], "422: preset 'huge' is unknown"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(stack, tmp_path, capsys, args, problem):
    (tmp_path / "empty").mkdir()
    (tmp_path / "new.png").write_bytes(png(photo(20, 20, seed=77)))
    swap = {"EMPTY": str(tmp_path / "empty"), "NEW": str(tmp_path / "new.png")}
    args = [swap.get(a, a.replace("EMPTY", str(tmp_path / "empty"))) for a in args]
    code, out = cli(stack.url, "fit", *args)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and problem in err, err
    assert out == ""


def test_an_unreachable_service_is_retried_then_reported_per_photo(tmp_path, capsys):
    for i in range(2):
        (tmp_path / f"p{i}.png").write_bytes(png(photo(20, 20, seed=i)))
    start = time.monotonic()
    code, out = cli("http://127.0.0.1:9", "fit", "--retries", "1", str(tmp_path))
    assert code == 1 and time.monotonic() - start >= 2  # one retry after 1 s, for each photo
    err = capsys.readouterr().err
    assert err.endswith("error: 2 of 2 photos failed; the table above says why\n"), err
    for row in rows(out).values():
        assert row[2] == "failed" and "cannot talk to the service" in row[4] and "tried 2 times" in row[4], out


def test_a_restricted_fit_group_needs_its_key(fit_server, api, tmp_path, capsys):  # noqa: F811
    (tmp_path / "keyed.png").write_bytes(png(photo(20, 20, seed=91)))
    code, out = cli(fit_server.url, "fit", str(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "403" in err and "fit-key" in err, err
    key = f"fit-key={KEY['fit-key']}"
    code, out = cli(fit_server.url, "fit", "--header", key, "--no-progress", str(tmp_path))
    assert code == 0 and rows(out)["keyed.png"][2] == "queued", out  # no worker here: queued, not followed
    assert out.splitlines()[-1] == "1 photo: 0 fitted, 1 queued or running, 0 skipped, 0 failed"
