"""The bundled models in models/ as the service serves them (in-process, the real folder): every image model at
its native size and aspect, and the bundled photo whole, non-square, licensed and within the size limit."""

from __future__ import annotations

import io
import json

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from modelrepo import sha256_file
from service.app import create_app
from service.settings import Settings
from tests.servers import ROOT

MODELS = ROOT / "models"
LIMIT = 8 * 1024 * 1024  # the most one bundled model may take in git
LICENCES = {"CC0-1.0", "CC-BY-4.0", "CC-BY-SA-3.0", "CC-BY-SA-4.0", "public-domain"}


def newest(folder):
    return max((p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def metadata(folder) -> dict:
    return json.loads((newest(folder) / "metadata.json").read_text())


IMAGE_MODELS = sorted(
    p.parent.name for p in MODELS.glob("*/metadata.json") if json.loads(p.read_text()).get("task") == "image"
)
PHOTOS = [name for name in IMAGE_MODELS if "photo" in metadata(MODELS / name).get("source", {})]


@pytest.fixture(scope="module")
def bundled():
    with TestClient(create_app(Settings(models=MODELS))) as c:
        yield c


def test_every_bundled_model_fits_in_8_mb():
    for folder in (p for p in MODELS.iterdir() if p.is_dir()):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        assert size <= LIMIT, f"{folder.name} takes {size:,} bytes, more than {LIMIT:,}"


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_a_bundled_image_model_serves_at_its_native_size_and_aspect(bundled, name):
    w, h = metadata(MODELS / name)["source"]["size"]
    info = bundled.get(f"/iiif/3/{name}/info.json").json()
    assert (info["width"], info["height"]) == (w, h)
    detail = bundled.get(f"/v1/models/{name}").json()
    assert (detail["width"], detail["height"]) == (w, h)
    width = max(8, w // 10)
    r = bundled.get(f"/v1/models/{name}/render", params={"width": width, "format": "png"})
    assert r.status_code == 200, r.text
    assert Image.open(io.BytesIO(r.content)).size == (width, round(width * h / w)), "a render with only width"


def test_a_real_photo_is_bundled_whole_non_square_licensed_and_regenerable():
    assert PHOTOS, "no bundled image model records a source photo (source.photo)"
    for name in PHOTOS:
        meta = metadata(MODELS / name)
        source, photo = meta["source"], meta["source"]["photo"]
        w, h = source["size"]
        assert w * h >= 2_000_000 and w != h, f"{name}: {w}×{h}"
        assert photo["licence"] in LICENCES and photo["author"] and photo["package"] and photo["downscale"]
        # fitted at the committed file's own size, from the committed file (`make models` needs no network)
        path = ROOT / source["image"]
        assert sha256_file(path) == photo["sha256"]
        with Image.open(path) as im:
            assert im.size == (w, h)
        assert f"{meta['metrics']['full_psnr']:.2f} dB" in meta["description"]
        assert meta["description"] == json.loads((MODELS / name / "metadata.json").read_text())["description"]
        assert path.stat().st_size < LIMIT
