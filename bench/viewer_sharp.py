"""Time to a sharp view in Chromium (docs/benchmarks.md, viewer_sharp): the main viewer (`/?model=NAME`) and the
deep-zoom page (`/iiif.html?id=NAME`, OpenSeadragon) on image models, against the real service.

    python -m bench.viewer_sharp --repo DIR --models dandelion kleiber --rounds 5
    python -m bench.viewer_sharp --repo DIR --fit kleiber=/tmp/photos/test_kleiber.png   # fit it first if absent

DIR is a model repository (copy `models/dandelion` into it); `--fit NAME=PHOTO` fits PHOTO at its native size
with the grid preset (fitstore.PRESETS["grid"]) for `--fit-steps` steps (50: the cost of a render does
not depend on the weights) into DIR/NAME when that folder does not exist yet.

Each round opens a fresh browser context (no HTTP cache) on the service with its render cache off
(INR_RENDER_CACHE_BYTES=0, so every round renders) and measures, from the page's own signal, the performance
mark "inr-sharp" that both pages leave when a view is sharp (service/static/viewer.js: the sharp render of the
whole canvas drawn; iiif.js: OpenSeadragon settled with every tile of the view drawn):
- `load_s`: navigation start → the first sharp view;
- `zoom_s`: the last wheel event (its timeStamp in the page) → the next sharp view. The viewer gets one wheel
  notch that zooms 2× (deltaY −462: exp(462 · 0.0015)); OpenSeadragon gets 4 notches 80 ms apart (it drops
  notches closer than its minScrollDeltaTime, 50 ms; 1.2⁴ = 2.07×, its zoomPerScroll), and its time includes
  its zoom animation (animationTime 1.2 s). A round whose zoom factor is not the one asked for (a notch
  lost) is kept in the file with `zoomed_as_asked: false` and left out of the medians.
Medians of the rounds, with the load average around each and the requests each phase sent, go to
bench/results/viewer_sharp.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, machine, write_json
from bench.serving import Server

log = logging.getLogger("bench.viewer_sharp")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
PAGES = {  # page → (URL template, the element that carries its state, wheel notches, deltaY, zoom factor)
    "viewer": ("/?model={name}", "#view", 1, -462, 2.0),
    "osd": ("/iiif.html?id={name}", "#osd", 4, -100, 1.2**4),
}
# The page's zoom: the viewer's camera zoom (1 at home), OpenSeadragon's device px per native image px.
ZOOM = "(sel) => Number(document.querySelector(sel).dataset.zoom || document.querySelector(sel).dataset.imageZoom)"
# Sharp marks after `since` (ms on the page's clock), with their detail.
MARKS = (
    "(since) => performance.getEntriesByName('inr-sharp').filter(m => m.startTime > since)"
    ".map(m => ({t: m.startTime, detail: m.detail}))"
)
WHEEL_HOOK = (
    "window.__wheel = null; window.__wheels = 0; addEventListener('wheel', (e) => { "
    "window.__wheel = e.timeStamp; window.__wheels += 1; }, {capture: true, passive: true});"
)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def fit(repo: Path, name: str, photo: Path, steps: int) -> None:
    """The grid preset's fit of `photo` at its native size into repo/name (the command a user runs)."""
    from fitstore import PRESETS

    cmd = [
        sys.executable,
        "-m",
        "training",
        "fit-image",
        "--image",
        str(photo),
        "--protocol",
        "full",
        *PRESETS["grid"]["argv"],
        "--steps",
        str(steps),
        "--no-progress",
        "--out",
        str(repo / name),
    ]
    log.info("fitting %s: %s", name, " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "OMP_NUM_THREADS": "2"})


def wait_marks(page, since: float, timeout_s: float) -> list[dict]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        marks = page.evaluate(MARKS, since)
        if marks:
            return marks
        page.wait_for_timeout(20)
    state = page.evaluate(
        "[...document.querySelectorAll('#view, #osd, #readout, .message')]"
        ".map(e => e.id + ' ' + JSON.stringify(e.dataset) + ' ' + e.textContent.trim())"
    )
    raise TimeoutError(f"no sharp view within {timeout_s} s: {state}")


def one_round(browser, url: str, name: str, which: str, size: tuple[int, int], timeout_s: float) -> dict:
    path, selector, notches, delta, factor = PAGES[which]
    context = browser.new_context(viewport={"width": size[0], "height": size[1]}, device_scale_factor=1)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/render" in r.url or "/iiif/3/" in r.url else None)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.add_init_script(WHEEL_HOOK)
        load0 = os.getloadavg()[0]
        page.goto(url + path.format(name=name))
        first = wait_marks(page, 0.0, timeout_s)[0]
        loaded = len(requests)
        page.wait_for_timeout(300)  # let the page go idle (OpenSeadragon's last frames)
        box = page.locator(selector).bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        home = page.evaluate(ZOOM, selector)
        for i in range(notches):
            if i:
                page.wait_for_timeout(80)
            page.mouse.wheel(0, delta)
        page.wait_for_function(f"window.__wheels >= {notches}")
        wheel = page.evaluate("window.__wheel")
        zoomed = wait_marks(page, wheel, timeout_s)[0]
        reached = page.evaluate(ZOOM, selector) / home
        state = page.evaluate(
            f"(() => {{ const e = document.querySelector('{selector}'); return {{...e.dataset, "
            "width: e.width || e.clientWidth, height: e.height || e.clientHeight}; })()"
        )
        return {
            "load_s": first["t"] / 1000,
            "zoom_s": (zoomed["t"] - wheel) / 1000,
            "zoom_factor": reached,
            "zoomed_as_asked": abs(reached / factor - 1) < 0.02,
            "load_requests": loaded,
            "zoom_requests": len(requests) - loaded,
            "state": state,
            "load_average": [load0, os.getloadavg()[0]],
            "errors": errors,
        }
    finally:
        context.close()


def median(xs):
    return float(statistics.median(xs)) if xs else None


def run(args) -> dict:
    from playwright.sync_api import sync_playwright

    repo = Path(args.repo)
    for spec in args.fit:
        name, _, photo = spec.partition("=")
        if not (repo / name).exists():
            fit(repo, name, Path(photo), args.fit_steps)
        if name not in args.models:
            args.models.append(name)
    env = {"INR_RENDER_CACHE_BYTES": "0"}
    command = " ".join(["python -m bench.viewer_sharp", *sys.argv[1:]])
    out = {
        "machine": machine(),
        "uptime_start": uptime(),
        "command": command,
        "env": env,
        "browser_viewport": list(args.size),
        "rounds": args.rounds,
        "models": {},
    }
    server = Server(repo, "viewer_sharp", env).wait()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for name in args.models:
                meta = json.loads(next((repo / name).glob("[0-9]*/metadata.json")).read_text())
                entry = out["models"][name] = {"native_size": meta.get("source", {}).get("size"), "pages": {}}
                for which in args.pages:
                    rounds = []
                    for i in range(args.rounds):
                        r = one_round(browser, server.url, name, which, tuple(args.size), args.timeout)
                        log.info(
                            "%s %s round %d: load %.2f s, zoom %.2f s (×%.3f; load average %.1f)",
                            name,
                            which,
                            i + 1,
                            r["load_s"],
                            r["zoom_s"],
                            r["zoom_factor"],
                            r["load_average"][1],
                        )
                        rounds.append(r)
                    entry["pages"][which] = {
                        "median_load_s": median([r["load_s"] for r in rounds]),
                        "median_zoom_s": median([r["zoom_s"] for r in rounds if r["zoomed_as_asked"]]),
                        "rounds": rounds,
                    }
            browser.close()
    finally:
        server.stop()
    out["uptime_end"] = uptime()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="model repository the service serves")
    ap.add_argument("--models", nargs="*", default=["dandelion"], help="image models to open (default: dandelion)")
    ap.add_argument(
        "--fit",
        action="append",
        default=[],
        metavar="NAME=PHOTO",
        help="fit PHOTO into REPO/NAME with the grid preset when absent, and open it",
    )
    ap.add_argument("--fit-steps", type=int, default=50)
    ap.add_argument("--pages", nargs="*", default=list(PAGES), choices=list(PAGES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--size",
        type=int,
        nargs=2,
        default=[1600, 1000],
        metavar=("W", "H"),
        help="browser viewport in CSS px, device scale 1",
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one sharp view")
    ap.add_argument("--out", default="viewer_sharp", help="result name under bench/results")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = run(args)
    write_json(args.out, out)
    for name, entry in out["models"].items():
        for which, r in entry["pages"].items():
            log.info("%s %s: median load %s s, zoom %s s", name, which, r["median_load_s"], r["median_zoom_s"])


if __name__ == "__main__":
    main()
