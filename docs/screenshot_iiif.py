"""Take docs/img/iiif-deep-zoom.png: /iiif.html in headless Chromium, OpenSeadragon zoomed to
`--zoom` screen pixels per native image pixel (past 1 OpenSeadragon magnifies, up to its
maxZoomPixelRatio of 4) on a real service over the bundled models.

    .venv/bin/python docs/screenshot_iiif.py [--models models] [--model astronaut] [--zoom 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.serving import Server  # noqa: E402  (the one server helper; run from anywhere)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="models")
    ap.add_argument("--model", default="astronaut")
    ap.add_argument("--zoom", type=float, default=1.0, help="screen pixels per native image pixel (≤ 4)")
    ap.add_argument("--centre", default="0.62,0.30", help="the point to zoom at, in unit coordinates")
    ap.add_argument("--out", default="docs/img/iiif-deep-zoom.png")
    args = ap.parse_args()
    server = Server(Path(args.models), "screenshot", log_level="warning").wait(60)
    url = server.url
    try:
        cx, cy = (float(v) for v in args.centre.split(","))
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1000, "height": 700})
            page.set_default_timeout(600_000)
            page.goto(f"{url}/iiif.html?id={args.model}")
            loaded = (
                "window.iiifViewer && iiifViewer.world.getItemCount() === 1 && "
                "iiifViewer.world.getItemAt(0).getFullyLoaded()"
            )
            page.wait_for_function(loaded)
            page.evaluate(f"""(() => {{ const v = iiifViewer.viewport, t = iiifViewer.world.getItemAt(0);
                const w = t.getContentSize().x;   // the native width (info.json)
                v.zoomTo(t.imageToViewportZoom({args.zoom}), null, true);
                v.panTo(t.imageToViewportCoordinates({cx} * w, {cy} * t.getContentSize().y), true); }})()""")
            page.wait_for_timeout(500)
            page.wait_for_function(loaded)
            page.screenshot(path=args.out)
            sys.stdout.write(f"{args.out}: {page.locator('#readout').text_content()}\n")
            browser.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
