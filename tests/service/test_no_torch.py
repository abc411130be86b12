"""The service runs on onnxruntime, numpy, FastAPI and Pillow: importing and serving (a fit queued included)
never imports torch or training/."""

import subprocess

from tests.servers import PY, ROOT

SCRIPT = """
import asyncio, io, sys
import httpx
from PIL import Image
import service, service.__main__
from service.app import create_app
from service.settings import Settings

async def main():
    app = create_app(Settings(models=sys.argv[1], fit_store="sqlite:///" + sys.argv[2]))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            assert (await c.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]})).status_code == 200
            assert (await c.get("/v1/models/astronaut/render?width=8&height=8")).status_code == 200
            r = await c.post("/v1/models/digits/classify", json={"images": [[0.0] * 784]})
            assert r.status_code == 200, r.text
            buf = io.BytesIO()
            Image.new("RGB", (8, 8)).save(buf, "PNG")
            r = await c.post("/v1/fits", files={"file": ("a.png", buf.getvalue())}, data={"steps": "2"})
            assert r.status_code == 202, r.text  # queued: the API never fits, workers do

asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "training"))
print("torch or training modules:", loaded)
sys.exit(1 if loaded else 0)
"""


def test_serving_requests_never_imports_torch(model_repo, tmp_path):
    r = subprocess.run(
        [PY, "-c", SCRIPT, str(model_repo), str(tmp_path / "fits.sqlite")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch or training modules: []" in r.stdout
