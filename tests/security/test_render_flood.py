"""Renders flooded by a few dear requests (issue 54, hole 3): on the real service with its default settings and the
bundled Fourier astronaut (an MLP of width 128 on 256² native pixels, ~2 µs of CPU a sample), a handful of anonymous
upscales of tiny regions (each a different region, so that no cache helps) held every render slot until the 60 s
timeout: a bystander's 256 px tile got 503 after 10 s, and the attackers' own 503s cached nothing, so the attack was
free to repeat.

The secure answer (service/render/admission.py): admission by estimated cost (output pixels × supersampling × the
model's measured CPU seconds a sample); a render over INR_RENDER_MAX_COST_S refused up front with 413 naming the
setting; cheap renders (a viewer's tiles) in a lane of their own, never queued behind dear ones; each caller (a key,
or an anonymous client by its address) at most INR_RENDER_CALLER_SHARE dear renders in flight or waiting, 429 with
Retry-After beyond; and a render's work stopped when its client goes away.
"""

from __future__ import annotations

import time

import httpx
import pytest

from bench.tiles import ATTACKERS
from bench.tiles import attack as flood
from tests.servers import ROOT, Server, in_flight, wait_for
from tests.service.engine.test_residency import copy_model

BYSTANDER_TILE = "/iiif/3/astronaut/0,0,256,256/256,256/{rotation}/default.jpg"  # a new rotation, no cache


@pytest.fixture(scope="module")
def fourier(tmp_path_factory):
    repo = tmp_path_factory.mktemp("flood")
    copy_model(ROOT / "models" / "astronaut", repo / "astronaut")
    with Server(repo).running() as srv:  # every render setting at its default
        assert httpx.get(f"{srv.url}/iiif/3/astronaut/full/64,/0/default.jpg", timeout=60).status_code == 200  # loaded
        yield srv


def attack(url: str, size: int) -> list[dict]:
    return flood(url, size, timeout=90)[0]


def bystander(url: str, rotation: int) -> tuple[int, float]:
    """Another anonymous client (another address: 127.0.0.2) asks for a 256 px tile: (status, seconds)."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as client:
        start = time.perf_counter()
        r = client.get(url + BYSTANDER_TILE.format(rotation=rotation))
        return r.status_code, time.perf_counter() - start


def under(url: str, rotation: int) -> float:
    """The bystander's bound: a second, or 3× its tile's idle time on a machine busier than that (a shared one)."""
    status, idle = bystander(url, rotation)
    assert status == 200
    return max(1.0, 3 * idle)


def test_upscales_over_the_cost_ceiling_are_refused_up_front_and_a_bystanders_tile_answers(fourier):
    bound = under(fourier.url, 180)
    results = attack(fourier.url, 4096)  # 16.7 M samples each: ~30 s of CPU on this model
    time.sleep(0.5)  # the attackers in flight (on a service without admission they hold every slot)
    status, seconds = bystander(fourier.url, 0)
    assert status == 200 and seconds < bound, (status, seconds, bound)
    wait_for(lambda: all(r for r in results), timeout=20, what="the attackers' answers")
    for r in results:
        assert r["status"] == 413 and "INR_RENDER_MAX_COST_S" in r["error"], r
        assert r["seconds"] < 5, r  # refused up front, not after holding a slot


def test_a_client_has_its_share_of_the_dear_renders_and_the_rest_get_429(fourier):
    """Upscales under the ceiling (1200²: ~3 s of CPU each) from one anonymous address: at most
    INR_RENDER_CALLER_SHARE (2) run, the others are told 429 with Retry-After at once; the bystander's tile still
    answers within a second while the admitted two keep both render workers busy; and when the attackers go away,
    their renders stop."""
    bound = under(fourier.url, 270)
    results = attack(fourier.url, 1200)
    wait_for(lambda: sum(bool(r) for r in results) >= ATTACKERS - 2, timeout=20, what="the refused attackers")
    refused = [r for r in results if r]
    assert all(r["status"] == 429 and "INR_RENDER_CALLER_SHARE" in r["error"] for r in refused), refused
    assert all(int(r["retry_after"]) >= 1 and r["seconds"] < 5 for r in refused), refused
    status, seconds = bystander(fourier.url, 90)
    assert status == 200 and seconds < bound, (status, seconds, bound)
    wait_for(lambda: all(r for r in results), timeout=60, what="the admitted renders")
    assert sorted(r["status"] for r in results) == [200, 200] + [429] * (ATTACKERS - 2), results


def test_a_dear_render_stops_when_its_client_goes_away(fourier):
    """A client that asks for a dear render and leaves frees the render workers within a second or so."""

    def leave() -> bool:
        try:
            httpx.get(f"{fourier.url}/iiif/3/astronaut/100,100,10,10/^1500,1500/0/default.jpg", timeout=1.0)
        except httpx.TimeoutException:
            return True  # gone, as the client meant, while its render ran
        return False

    assert leave(), "the render answered within a second: nothing to abandon"
    wait_for(lambda: in_flight(fourier.url) <= 1, timeout=3, what="the abandoned render to stop")
