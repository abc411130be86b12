"""deploy/nginx/nginx.conf.template rendered as the image's entrypoint renders it, and run by the local nginx
(`apt-get install nginx-light`) in front of stand-in backends: the upstream's `server` lines, which
40-api-shards.sh writes in the container, are written here by the test."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from bench.common import free_port

from .conftest import ROOT

TEMPLATE = ROOT / "deploy" / "nginx" / "nginx.conf.template"
SHARDS = "/etc/nginx/shards/api.conf"  # where the template includes the upstream's servers from


def rendered(resolver: str = "127.0.0.11", api_host: str = "api") -> str:
    """The template with its NGINX_* variables substituted (the entrypoint substitutes only those)."""
    return TEMPLATE.read_text().replace("${NGINX_RESOLVER}", resolver).replace("${NGINX_API_HOST}", api_host)


def servers(addresses: list[str]) -> str:
    """The upstream's servers as 40-api-shards.sh writes them."""
    return "".join(f"server {a};\n" for a in addresses) or "server 127.0.0.1:9 down;\n"


class LocalNginx:
    """The rendered template on loopback ports, its temp files and servers file in `folder`."""

    def __init__(self, folder: Path, backends: list[str]):
        if shutil.which("nginx") is None:
            pytest.skip("nginx is not installed (apt-get install nginx-light)")
        self.folder, self.port = folder, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.shards = folder / "shards.conf"
        self.conf = folder / "nginx.conf"
        conf = (
            rendered("127.0.0.1")
            .replace("/tmp/", f"{folder}/")
            .replace(SHARDS, str(self.shards))
            .replace("listen 8080;", f"listen 127.0.0.1:{self.port};")
            .replace("listen 8081 http2;", f"listen 127.0.0.1:{free_port()} http2;")
        )
        # as root, nginx's workers would run as nobody and could not use temp folders under pytest's own
        self.conf.write_text("daemon off;\n" + ("user root;\n" if os.geteuid() == 0 else "") + conf)
        self.set_backends(backends)
        self.proc = subprocess.Popen(
            ["nginx", "-c", str(self.conf), "-e", str(folder / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(self.url + "/nginx-health", timeout=1)
                break
            except httpx.TransportError:
                assert self.proc.poll() is None and time.monotonic() < deadline, self.proc.stderr.read().decode()
                time.sleep(0.1)

    def set_backends(self, backends: list[str]) -> None:
        tmp = self.shards.with_suffix(".tmp")
        tmp.write_text(servers(backends))
        tmp.replace(self.shards)

    def reload(self, backends: list[str]) -> None:
        """What 40-api-shards.sh does when the replicas change: rewrite the servers, `nginx -s reload`."""
        self.set_backends(backends)
        pids = self.workers()
        subprocess.run(["nginx", "-c", str(self.conf), "-s", "reload"], check=True, capture_output=True)
        deadline = time.monotonic() + 10
        while set(self.workers()) & set(pids):  # the old workers finish; the new ones have the new servers
            assert time.monotonic() < deadline, "nginx's old workers did not exit after the reload"
            time.sleep(0.1)

    def workers(self) -> list[int]:
        """The master's children (its workers), from /proc."""
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                found.append(int(stat.parent.name))
        return found

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
