"""The service runs on onnxruntime, numpy, FastAPI and Pillow: importing and serving never imports torch."""
import subprocess

from tests.servers import PY, ROOT

SCRIPT = """
import asyncio, sys
import httpx
import service, service.__main__
from service.app import create_app
from service.settings import Settings

async def main():
    app = create_app(Settings(models=sys.argv[1]))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            assert (await c.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]})).status_code == 200
            assert (await c.get("/v1/models/astronaut/render?width=8&height=8")).status_code == 200
            r = await c.post("/v1/models/digits/classify", json={"images": [[0.0] * 784]})
            assert r.status_code == 200, r.text

asyncio.run(main())
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("torch modules:", loaded)
sys.exit(1 if loaded else 0)
"""


def test_serving_requests_never_imports_torch(model_repo):
    r = subprocess.run([PY, "-c", SCRIPT, str(model_repo)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch modules: []" in r.stdout
