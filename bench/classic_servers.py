"""The classic IIIF server beside ours (bench/classic.py): iipsrv behind nginx over a libvips pyramidal TIFF, the
tile list a deep-zoom viewer asks for, and the photos' pixels.

iipsrv is Debian's `iipimage-server` (a FastCGI program, `/usr/lib/iipimage-server/iipsrv.fcgi`), nginx
passes it the requests (`fastcgi_pass`), as the IIPImage docs set it up; both run on free ports of 127.0.0.1, in
a temporary folder, with no cache (`MAX_IMAGE_CACHE_SIZE=0`). The pyramid is libvips'
`tiffsave --tile --pyramid --compression jpeg --Q 90` through pyvips (the project's own dependency).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np

from .procs import status_kib
from .serving import Server, free_port

IIPSRV = Path("/usr/lib/iipimage-server/iipsrv.fcgi")
NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  fastcgi_temp_path {tmp}/fastcgi;
  proxy_temp_path {tmp}/proxy;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    location /fcgi-bin/iipsrv.fcgi {{
      fastcgi_pass 127.0.0.1:{fcgi};
      fastcgi_param PATH_INFO $fastcgi_script_name;
      fastcgi_param REQUEST_METHOD $request_method;
      fastcgi_param QUERY_STRING $query_string;
      fastcgi_param CONTENT_TYPE $content_type;
      fastcgi_param CONTENT_LENGTH $content_length;
      fastcgi_param SERVER_PROTOCOL $server_protocol;
      fastcgi_param REQUEST_URI $request_uri;
      fastcgi_param HTTPS $https if_not_empty;
    }}
  }}
}}
"""


def missing_classic() -> str:
    """Why iipsrv cannot run here ('' when it can): the Debian packages the bench needs."""
    if not IIPSRV.is_file():
        return f"{IIPSRV} is not installed (apt-get install iipimage-server)"
    if shutil.which("nginx") is None:
        return "nginx is not installed (apt-get install nginx-light)"
    return ""


def rgb_pixels(photo: Path) -> np.ndarray:
    """The photo as [H, W, 3] uint8 (alpha flattened over white), through libvips."""
    import pyvips

    img = pyvips.Image.new_from_file(str(photo), access="sequential")
    if img.hasalpha():
        img = img.flatten(background=[255, 255, 255])
    if img.bands == 1:
        img = img.bandjoin([img, img])
    img = img.colourspace("srgb").cast("uchar")[:3]
    return np.ndarray(buffer=img.write_to_memory(), dtype=np.uint8, shape=(img.height, img.width, 3)).copy()


def write_pyramid(pixels: np.ndarray, path: Path, quality: int = 90) -> None:
    """`vips tiffsave --tile --pyramid --compression jpeg --Q quality` of the pixels."""
    import pyvips

    h, w, _ = pixels.shape
    img = pyvips.Image.new_from_memory(np.ascontiguousarray(pixels).data, w, h, 3, "uchar")
    img.tiffsave(str(path), tile=True, pyramid=True, compression="jpeg", Q=quality)


def pyramid_level0(path: Path) -> np.ndarray:
    import pyvips

    img = pyvips.Image.new_from_file(str(path), page=0)
    return np.ndarray(buffer=img.write_to_memory(), dtype=np.uint8, shape=(img.height, img.width, img.bands))[..., :3]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    err = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if err == 0 else float(10 * math.log10(255.0**2 / err))


def tile_regions(width: int, height: int, tile: int = 512, scales: tuple[int, ...] = (1, 2, 4)) -> list[tuple]:
    """The IIIF tiles a deep-zoom viewer (OpenSeadragon) asks for at the scale factors 1/s: regions of tile·s image
    pixels, row by row, each (x, y, w, h, its width when scaled)."""
    out = []
    for s in scales:
        side = tile * s
        for y in range(0, height, side):
            for x in range(0, width, side):
                w, h = min(side, width - x), min(side, height - y)
                out.append((x, y, w, h, math.ceil(w / s)))
    return out


def iiif_path(region: tuple, prefix: str) -> str:
    x, y, w, h, sw = region
    return f"{prefix}/{x},{y},{w},{h}/{sw},/0/default.jpg"


class Classic(Server):
    """iipsrv (FastCGI) and nginx in front of it, over the pyramids in `images`; `cpu_seconds` (Server's, over
    iipsrv's process tree) is iipsrv's own, `nginx_cpu_seconds` nginx's."""

    def __init__(self, images: Path, tmp: Path, quality: int = 90):
        self.name, self.fcgi, self.port = "iipsrv", free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "FILESYSTEM_PREFIX": f"{images}/",
            "MAX_IMAGE_CACHE_SIZE": "0",
            "JPEG_QUALITY": str(quality),
            "VERBOSITY": "0",
            "LOGFILE": str(tmp / "iipsrv.log"),
        }
        self.proc = subprocess.Popen(
            [str(IIPSRV), "--bind", f"127.0.0.1:{self.fcgi}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, port=self.port, fcgi=self.fcgi))
        self.nginx = subprocess.Popen(
            ["nginx", "-c", str(conf), "-p", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.nginx_tree = Server.__new__(Server)
        self.nginx_tree.proc = self.nginx

    def tile_prefix(self, file: str) -> str:
        return f"/fcgi-bin/iipsrv.fcgi?IIIF={file}"

    def wait(self, timeout: float = 30) -> "Classic":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in (self.proc, self.nginx):
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"iipsrv or nginx exited with {p.returncode}")
            try:
                if httpx.get(f"{self.url}/fcgi-bin/iipsrv.fcgi", timeout=1).status_code < 500:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("iipsrv behind nginx did not answer")

    def nginx_cpu_seconds(self) -> float:
        return self.nginx_tree.cpu_seconds()

    def stop(self) -> None:
        for p in (self.nginx, self.proc):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def rss_bytes(proc: subprocess.Popen) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, bytes; (0, 0) when it is gone."""
    return status_kib(proc.pid, "VmRSS") * 1024, status_kib(proc.pid, "VmHWM") * 1024
