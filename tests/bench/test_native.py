"""bench.native small: a native fit and its plot, the ceiling of a photo's resampled luma and chroma, the native
level's refit and the PSNR by step, each on a real small photo and a real grid fit. Timing is never asserted."""

import json

import pytest

from bench import native
from tests.fits import photo


def test_the_native_scenarios_measure_a_real_photo_and_write_their_results(tmp_path):
    image = tmp_path / "small.png"
    photo(64, 48, seed=1).save(image)
    out = ["--out-dir", str(tmp_path)]
    opts = ["--presets", "grid", "--steps", "4", "--every", "2", "--checkpoints", "0", "--threads", "1"]
    fit = native.main(["native_fit", "--image", str(image), *opts, "--name", "native_fit_small_r1", *out])
    (row,) = fit["rows"]
    assert (row["width"], row["height"], row["steps"]) == (64, 48, 4) and row["model_bytes"] > 0
    assert [c["format"] for c in row["codecs"]] == ["JPEG", "WEBP"] and 10 < row["full_psnr"] < 100
    assert row["curve"] and row["curve"][0][0] == 1  # the checkpoint at 0 s: after the first step
    table = native.main(["plot", str(tmp_path / "native_fit_small_r1.json"), "--out", str(tmp_path / "plot.png")])
    assert "| native_fit_small | 64×48 | grid |" in table and (tmp_path / "plot.png").stat().st_size > 0
    ceiling = native.main(["native_ceiling", str(image), *out])["small"]
    assert list(ceiling) == [f"luma {a}, chroma {b}" for a, b in native.PAIRS]
    assert all(10 < v < 100 for v in ceiling.values())
    # more cells for luma and chroma alike hold more of the photo
    assert ceiling["luma 0.74, chroma 0.74"] < ceiling["luma 0.86, chroma 0.86"] < ceiling["luma 0.92, chroma 0.92"]
    refit = native.main(["native_refit", "--image", str(image), "--quantiles", "0,1e-3", "--threads", "1", *out])
    assert set(refit) == {"float (head float16)", "no refit", "refit, quantile 0", "refit, quantile 0.001"}
    assert all(15 < v < 100 for v in refit.values())
    steps = native.main(["native_steps", "--image", str(image), "--steps", "4", "--every", "2", "--threads", "1", *out])
    assert [s for s, _ in steps["curve"]] == [1, 3, 4] and steps["curve"][-1][1] > steps["curve"][0][1]
    for name in ("native_ceiling", "native_refit", "native_steps", "native_fit_small_r1"):
        assert json.loads((tmp_path / f"{name}.json").read_text())["machine"]["cpu"]


def test_a_scenario_must_be_named_first(capsys):
    with pytest.raises(SystemExit) as e:
        native.main(["--image", "x.png"])
    assert e.value.code == 2 and "native_fit,native_ceiling,native_refit,native_steps,plot" in capsys.readouterr().err
