"""Sharding by model in deploy/nginx/nginx.conf.template (docs/sharding.md, "Sharding"), run by the local nginx
in front of three stand-in replicas: every route that names a model goes to the replica its name hashes to
(the same one for v1, V2, the repository API and IIIF, with or without @VERSION); the models spread over the
replicas; requests that name none spread round-robin; a dead or draining replica's models go to the next
replica of the ring, with no failed request, while every other model stays where it was, and the servers
file without it (what 40-api-shards.sh writes, then a reload) sends them to the same replica. The script
itself is run on a stand-in DNS server. tests/containers/test_faults.py does the same with the real stack."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from .conftest import ROOT
from .nginxconf import LocalNginx

SCRIPT = ROOT / "deploy" / "nginx" / "40-api-shards.sh"
MODELS = [f"m{i:02d}" for i in range(60)]


class Replica(BaseHTTPRequestHandler):
    """Answers 200 with its name, or 503 while draining; records (replica, method, path) of each request."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str]] = []

    def log_message(self, *args):
        pass

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        name, draining = self.server.name, self.server.draining
        Replica.seen.append((name, self.command, self.path))
        body = name.encode() if self.command != "HEAD" else b""
        self.send_response(503 if draining else 200)
        self.send_header("Content-Length", str(len(name)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_HEAD = answer


def replica(name: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replica)
    server.name, server.draining = name, False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def replicas():
    made = {n: replica(n) for n in ("a", "b", "c")}
    yield made
    for s in made.values():
        s.shutdown()
        s.server_close()


def address(server: ThreadingHTTPServer) -> str:
    return f"127.0.0.1:{server.server_port}"


@pytest.fixture
def nginx(replicas, tmp_path):
    n = LocalNginx(tmp_path, [address(s) for s in replicas.values()])
    yield n
    n.stop()


def served_by(client: httpx.Client, method: str, path: str) -> str:
    r = client.request(method, path, content=b"{}" if method == "POST" else None)
    assert r.status_code == 200, (method, path, r.status_code, r.text)
    return Replica.seen[-1][0]


def routes(name: str) -> list[tuple[str, str]]:
    """Every kind of route that names model `name`."""
    return [
        ("GET", f"/v1/models/{name}"),
        ("POST", f"/v1/models/{name}/query"),
        ("GET", f"/v1/models/{name}/render?width=8&height=8"),
        ("POST", f"/v1/models/{name}/versions/2/render"),
        ("GET", f"/v1/models/{name}/versions"),
        ("GET", f"/v2/models/{name}"),
        ("GET", f"/v2/models/{name}/ready"),
        ("POST", f"/v2/models/{name}/infer"),
        ("POST", f"/v2/models/{name}/versions/3/infer"),
        ("GET", f"/v2/models/{name}/stats"),
        ("POST", f"/v2/repository/models/{name}/load"),
        ("GET", f"/iiif/3/{name}"),
        ("GET", f"/iiif/3/{name}/info.json"),
        ("HEAD", f"/iiif/3/{name}/info.json"),
        ("GET", f"/iiif/3/{name}@2/info.json"),
        ("GET", f"/iiif/3/{name}%402/full/32,/0/default.png"),
        ("GET", f"/iiif/3/{name}/manifest.json"),
    ]


def owners(client: httpx.Client, models=MODELS) -> dict[str, str]:
    return {m: served_by(client, "POST", f"/v1/models/{m}/query") for m in models}


def test_every_route_of_a_model_goes_to_one_replica_and_the_models_spread(nginx):
    with httpx.Client(base_url=nginx.url) as c:
        where = owners(c)
        for m in MODELS[:12]:
            got = {(method, path): served_by(c, method, path) for method, path in routes(m)}
            assert set(got.values()) == {where[m]}, got
        assert owners(c) == where, "the same replica each time"
    spread = Counter(where.values())
    assert set(spread) == {"a", "b", "c"}, spread  # 60 names: all on one or two of three is ~1e-10


@pytest.mark.parametrize(
    "path", ["/v1/models", "/health/ready", "/v2/models/stats", "/v2/repository/index", "/iiif/3/collection.json"]
)
def test_requests_that_name_no_model_spread_round_robin(nginx, path):
    with httpx.Client(base_url=nginx.url) as c:
        method = "POST" if path == "/v2/repository/index" else "GET"
        got = Counter(served_by(c, method, path) for _ in range(30))
    assert set(got) == {"a", "b", "c"}, got


def test_a_dead_replicas_models_move_to_the_next_on_the_ring_and_no_other_moves(nginx, replicas):
    with httpx.Client(base_url=nginx.url) as c:
        before = owners(c)
        victim = Counter(before.values()).most_common(1)[0][0]
        replicas[victim].shutdown()
        replicas[victim].server_close()  # connections refused, as to a killed replica: retried, none fails
        during = owners(c)
        rest = [address(s) for n, s in replicas.items() if n != victim]
        nginx.reload(rest)  # 40-api-shards.sh, once the name no longer resolves to it
        after = owners(c)
    assert victim not in during.values()
    moved = {m for m in MODELS if during[m] != before[m]}
    assert moved == {m for m in MODELS if before[m] == victim}, "only the dead replica's models move"
    assert after == during, "the retries went where the ring without it sends them"


def test_a_draining_replicas_models_are_answered_by_the_others(nginx, replicas):
    with httpx.Client(base_url=nginx.url) as c:
        before = owners(c)
        victim = Counter(before.values()).most_common(1)[0][0]
        replicas[victim].draining = True
        during = owners(c)
    assert victim not in during.values()
    assert {m for m in MODELS if during[m] != before[m]} == {m for m in MODELS if before[m] == victim}


def test_with_no_replica_nginx_answers_its_json_503(tmp_path):
    n = LocalNginx(tmp_path, [])  # what 40-api-shards.sh writes when the name has no address
    try:
        for path in ("/v1/models/astronaut/query", "/v1/models"):
            r = httpx.post(n.url + path, content=b"{}")
            assert r.status_code == 503 and "no api replica" in r.json()["error"], r.text
            assert r.headers["retry-after"] == "1"
    finally:
        n.stop()


# -- 40-api-shards.sh ------------------------------------------------------------------------------


class FakeDns:
    """A DNS server on loopback: A records for the names in `answers`, NXDOMAIN for others."""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = answers
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            i, labels = 12, []
            while query[i]:
                labels.append(query[i + 1 : i + 1 + query[i]].decode())
                i += 1 + query[i]
            qtype = struct.unpack(">H", query[i + 1 : i + 3])[0]
            name = ".".join(labels)
            ips = self.answers.get(name, []) if qtype == 1 else []
            flags = 0x8180 | (0 if name in self.answers else 3)
            records = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 1, 4) + socket.inet_aton(ip) for ip in ips)
            header = struct.pack(">HHHHHH", struct.unpack(">H", query[:2])[0], flags, 1, len(ips), 0, 0)
            self.sock.sendto(header + query[12 : i + 5] + records, peer)

    def close(self):
        self.sock.close()


def run_script(tmp_path, host: str, resolver: str) -> tuple[str, str]:
    out = tmp_path / "api.conf"
    env = {
        "PATH": os.environ["PATH"],
        "NGINX_API_HOST": host,
        "NGINX_RESOLVER": resolver,
        "NGINX_SHARDS_FILE": str(out),
    }
    done = subprocess.run(["sh", str(SCRIPT), "once"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return out.read_text(), done.stderr


def server_lines(text: str) -> list[str]:
    return [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("server ")]


def test_the_script_is_executable_for_the_entrypoint():
    assert SCRIPT.stat().st_mode & 0o111, "the image's entrypoint runs only executable *.sh"


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v busybox"]).returncode, reason="no busybox")
def test_the_script_writes_one_server_per_address_the_dns_server_gives(tmp_path):
    dns = FakeDns({"api": ["10.89.0.7", "10.89.0.5", "10.89.0.12"], "one": ["10.89.0.3"]})
    try:
        text, log = run_script(tmp_path, "api", f"127.0.0.1:{dns.port}")
        assert server_lines(text) == ["server 10.89.0.12:8000;", "server 10.89.0.5:8000;", "server 10.89.0.7:8000;"]
        assert "3 replica(s)" in log
        text, _ = run_script(tmp_path, "gone", f"127.0.0.1:{dns.port}")  # NXDOMAIN: no replica runs
        assert server_lines(text) == ["server 127.0.0.1:8000 down;"]
    finally:
        dns.close()


def test_nginx_accepts_what_the_script_writes(tmp_path):
    """The file as 40-api-shards.sh writes it, with and without replicas, included by the rendered template."""
    n = LocalNginx(tmp_path, [])
    try:
        for backends in (["10.89.0.5:8000", "10.89.0.7:8000"], []):
            lines = "".join(f"server {b};\n" for b in backends) or "server 127.0.0.1:8000 down;  # no address\n"
            n.shards.write_text("# written by 40-api-shards.sh\n" + lines)
            check = subprocess.run(["nginx", "-t", "-c", str(n.conf)], capture_output=True, text=True)
            assert check.returncode == 0, check.stderr
    finally:
        n.stop()
