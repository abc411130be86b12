"""Large runs of an image model in pieces side by side (service/engine/split.py): the same answers as one run,
pieces on several threads, a caller that never waits for a busy run thread, errors raised, the heap trimmed after."""

import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from modelrepo import read_spec
from service.engine import split
from service.engine.runtime import ModelRuntime, RuntimeOptions
from service.engine.split import Splitter
from tests.servers import wait_for

ROOT = Path(__file__).resolve().parents[3]


def version_1(path: Path, options: RuntimeOptions) -> ModelRuntime:
    model = ModelRuntime(path, read_spec(path), 1, options)
    assert model.load()
    return model


@pytest.mark.parametrize(
    "threads, rows, n, pieces",
    [(2, 4096, 4096, 1), (2, 4096, 4097, 2), (2, 4096, 20_000, 6), (3, 4096, 20_000, 6), (1, 4096, 20_000, 5)]
    + [(2, 0, 20_000, 1), (4, 1000, 100, 1)],
)
def test_a_run_is_cut_into_pieces_only_over_the_rows_and_for_every_thread(threads, rows, n, pieces):
    assert Splitter(threads, rows).pieces(n) == pieces


@pytest.mark.parametrize("model", ["astronaut", "dandelion"])
def test_an_image_model_answers_a_large_query_in_pieces_as_onnxruntime_does_whole(model):
    """The bundled Fourier and grid photo models: rows are independent, so the pieces joined are the whole run's
    answer (onnxruntime, one thread, its arena on)."""
    folder = ROOT / "models" / model
    runtime = version_1(folder, RuntimeOptions(threads=2, render_threads=1, splitter=Splitter(2, 1000)))
    assert runtime.splitter is not None
    coords = np.random.default_rng(0).random((9_999, 2), dtype=np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    whole = ort.InferenceSession(str(folder / "1" / "model.onnx"), opts).run(["rgb"], {"coords": coords})[0]
    got = runtime.predict(coords)["rgb"]
    assert got.shape == whole.shape and np.abs(got - whole).max() <= 1e-6


def test_only_image_models_on_one_thread_sessions_are_cut(model_repo):
    splitter = Splitter(2, 1000)
    digits = version_1(model_repo / "digits", RuntimeOptions(threads=2, splitter=splitter))
    wide = version_1(model_repo / "astronaut", RuntimeOptions(threads=2, render_threads=2, splitter=splitter))
    assert digits.splitter is None and wide.splitter is None
    narrow = version_1(model_repo / "astronaut", RuntimeOptions(threads=2, render_threads=1, splitter=splitter))
    assert narrow.splitter is splitter
    narrow.unload()
    assert narrow.splitter is None


def test_pieces_run_side_by_side_on_the_run_threads():
    seen, lock = set(), threading.Lock()

    def run(rows):
        with lock:
            seen.add(threading.current_thread().name)
        time.sleep(0.01)
        return [rows * 2]

    x = np.arange(40_000, dtype=np.float32).reshape(-1, 2)
    [out] = Splitter(3, 1000).run(run, x)
    assert np.array_equal(out, x * 2)
    assert threading.current_thread().name in seen and sum(n.startswith("run-piece") for n in seen) == 2


def test_a_caller_does_its_own_pieces_when_the_run_threads_are_busy():
    splitter = Splitter(2, 1000)
    release = threading.Event()
    splitter.pool.submit(release.wait)  # the one run thread is taken
    names = []
    x = np.ones((5000, 2), np.float32)
    [out] = splitter.run(lambda rows: [names.append(threading.current_thread().name) or rows], x)
    release.set()
    assert np.array_equal(out, x) and set(names) == {threading.current_thread().name} and len(names) == 6


def test_a_failing_piece_fails_the_run_and_stops_the_other_pieces():
    calls = []

    def run(rows):
        calls.append(len(rows))
        raise ValueError("bad piece")

    with pytest.raises(ValueError, match="bad piece"):
        Splitter(2, 100).run(run, np.ones((10_000, 2), np.float32))
    assert len(calls) <= 2  # one piece each on the caller and the run thread, not the 100 of them


def test_the_heap_is_trimmed_once_after_the_last_large_run(monkeypatch):
    trims = []
    splitter = Splitter(2, 100)

    def trim():  # this splitter's trims (the other tests' splitters may still trim theirs)
        if threading.current_thread() is splitter.trimmer:
            trims.append(time.monotonic())

    monkeypatch.setattr(split, "trim", trim)
    monkeypatch.setattr(split, "TRIM_AFTER_S", 0.3)
    splitter.run(lambda rows: [rows], np.ones((50, 2), np.float32))  # not cut: nothing to give back
    time.sleep(0.6)
    assert trims == []
    for _ in range(3):
        splitter.run(lambda rows: [rows], np.ones((1000, 2), np.float32))
    ended = time.monotonic()
    wait_for(lambda: trims and trims[-1] >= ended, timeout=10, what="the trim after the last run")
    assert trims[-1] >= ended + 0.25  # not before TRIM_AFTER_S after the last run ended
    count = len(trims)
    time.sleep(0.8)
    assert len(trims) == count  # once: no run since


def test_close_stops_the_trimmer_and_a_closed_splitter_runs_every_piece_on_the_caller():
    splitter = Splitter(2, 100)
    splitter.run(lambda rows: [rows], np.ones((1000, 2), np.float32))
    splitter.close()
    splitter.trimmer.join(5)
    assert not splitter.trimmer.is_alive()
    names = []
    x = np.arange(2000, dtype=np.float32).reshape(-1, 2)
    [out] = splitter.run(lambda rows: [names.append(threading.current_thread().name) or rows], x)
    assert np.array_equal(out, x) and set(names) == {threading.current_thread().name} and len(names) == 10
