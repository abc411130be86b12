"""bench.codecs rd small: one real grid fit of a small photo finished in both table codes at the default and a PSNR
target, and trained for rate at two λ, beside each codec; BD-rates by the documented function. Timing is never
asserted."""

import json
import math

from bench import codecs
from tests.fits import photo


def test_bd_rate_is_the_mean_log_bytes_gap_over_the_shared_range():
    anchor = [(1000 * 2 ** (p / 6), p) for p in range(30, 50, 2)]  # bytes double every 6 dB
    assert codecs.bd_rate(anchor, [(b * 0.7, p) for b, p in anchor], 34, 46) == -30.0
    assert codecs.bd_rate(anchor, [(b * 2, p) for b, p in anchor], 34, 46) == 100.0
    shifted = [(b, p + 3) for b, p in anchor]  # 3 dB more at the same bytes: 2^(-3/6) the bytes at equal PSNR
    assert math.isclose(codecs.bd_rate(anchor, shifted, 34, 46), (2**-0.5 - 1) * 100, abs_tol=0.1)
    assert codecs.bd_rate(anchor, [(b, p) for b, p in anchor if p < 35], 34, 46) is None  # less than 1 dB in common


def test_rd_reports_both_codes_and_every_codec(tmp_path):
    image = tmp_path / "small.png"
    photo(192, 128, seed=3).save(image)
    argv = ["--photos", str(image), "--work", str(tmp_path / "work"), "--out", str(tmp_path), "--steps", "20"]
    argv += ["--targets", "25", "--qualities", "30,60,90", "--range", "20,50", "--plot", str(tmp_path / "p.png")]
    argv += ["--lambdas", "1e-4,1e-2", "--rd-steps", "20"]
    codecs.main(["rd", *argv])
    doc = json.loads((tmp_path / "rd.json").read_text())
    (result,) = doc["photos"]
    kinds = {r["kind"] for r in result["rows"]}
    assert {"jpeg444", "jpeg420", "webp", "avif", "j2k", "jxl", "grid-rice", "grid-ans", "grid-rd"} <= kinds
    grid = {(r["kind"], r["target_psnr"]): r for r in result["rows"] if r["kind"] in ("grid-rice", "grid-ans")}
    fine, coarse = (r for r in result["rows"] if r["kind"] == "grid-rd")  # trained for rate: larger λ, fewer bytes
    assert (fine["lambda"], coarse["lambda"]) == (1e-4, 1e-2) and coarse["bytes"] < fine["bytes"]
    for target in (None, 25.0):  # the same rounding, coded two ways: the context code no larger
        rice, ans = grid[("grid-rice", target)], grid[("grid-ans", target)]
        assert ans["bytes"] <= rice["bytes"] and abs(ans["psnr"] - rice["psnr"]) < 0.5
    assert grid[("grid-rice", 25.0)]["psnr"] >= 25 - 0.5 and set(result["bd_rate"]) >= {"grid-rice", "grid-ans"}
    assert (tmp_path / "p.png").stat().st_size > 10_000
