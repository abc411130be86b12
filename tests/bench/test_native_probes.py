"""bench.native_probes small: the ceiling of a photo's resampled luma and chroma, the native level's refit and the
PSNR by step, each on a real small photo and a real grid fit. Timing is never asserted."""

import json

import pytest

from bench import native_probes
from tests.fits import photo


def test_the_three_probes_measure_a_real_photo_and_write_their_results(tmp_path):
    image = tmp_path / "small.png"
    photo(64, 48, seed=1).save(image)
    out = ["--out-dir", str(tmp_path)]
    ceiling = native_probes.main(["ceiling", str(image), *out])["small"]
    assert list(ceiling) == [f"luma {a}, chroma {b}" for a, b in native_probes.PAIRS]
    assert all(10 < v < 100 for v in ceiling.values())
    # more cells for luma and chroma alike hold more of the photo
    assert ceiling["luma 0.74, chroma 0.74"] < ceiling["luma 0.86, chroma 0.86"] < ceiling["luma 0.92, chroma 0.92"]
    refit = native_probes.main(["refit", "--image", str(image), "--quantiles", "0,1e-3", "--threads", "1", *out])
    assert set(refit) == {"float (head float16)", "no refit", "refit, quantile 0", "refit, quantile 0.001"}
    assert all(15 < v < 100 for v in refit.values())
    steps = native_probes.main(["steps", "--image", str(image), "--steps", "4", "--every", "2", "--threads", "1", *out])
    assert [s for s, _ in steps["curve"]] == [1, 3, 4] and steps["curve"][-1][1] > steps["curve"][0][1]
    for name in ("native_ceiling", "native_refit", "native_steps"):
        assert json.loads((tmp_path / f"{name}.json").read_text())["machine"]["cpu"]


def test_a_probe_must_be_named_first(capsys):
    with pytest.raises(SystemExit) as e:
        native_probes.main(["--image", "x.png"])
    assert e.value.code == 2 and "ceiling,refit,steps" in capsys.readouterr().err
