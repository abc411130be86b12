"""Liveness and readiness over HTTP; readiness is 503 until the models have loaded."""

import asyncio

import httpx

from service.app import create_app
from service.settings import Settings


def test_live_answers_200(client):
    r = client.get("/health/live")
    assert r.status_code == 200 and r.json() == {"status": "live"}


def test_ready_counts_ready_and_failed_models(client):
    r = client.get("/health/ready")
    assert r.status_code == 200 and r.json() == {"status": "ready", "models_ready": 2, "models_failed": 7}


def test_ready_is_503_and_live_is_200_before_the_models_load(model_repo):
    # the real app, before its lifespan has run: nothing is loaded yet
    app = create_app(Settings(models=model_repo))

    async def probe():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return (
                await c.get("/health/ready"),
                await c.get("/health/live"),
                await c.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]]}),
            )

    ready, live, query = asyncio.run(probe())
    assert ready.status_code == 503 and ready.json() == {"error": "models are still loading"}
    assert live.status_code == 200
    assert query.status_code == 503 and "loading" in query.json()["error"]
