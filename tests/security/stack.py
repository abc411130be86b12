"""The attack suite's target (docs/security.md): the real service as `make serve` runs it (poll mode, fits open to
anyone), a second process of it with fits for keys only (INR_FIT_ACCESS=key), one real fit worker, one SQLite job
store, the uploads folder and a keys file, over a model repository made by the training code.

The repository: `open` (public), `secret` (restricted to the scope `staff`), `thumb` (restricted, its substitute 16
px on the long side), copies of the tiny astronaut model of tests/servers.py. Keys, made by the real key store:
`admin`, `staff` (reads `secret`), `fit` (queues fits, reads nothing restricted), `other` (fit, another client),
`limited` (admin of `open` only). Each test that writes makes its own model names, so tests do not depend on their
order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from fitstore import FINISHED, FitStore
from service.auth.keys import KeyStore
from service.auth.tokens import Signer
from tests.fits import Worker, photo, png
from tests.servers import Server
from tests.service.engine.test_residency import copy_model

SECRET = "attack-suite-signing-key-of-32-bytes-or-more"
FAST = {"preset": "fourier-small", "size": "32", "steps": "40", "protocol": "paper"}
RESTRICTED = 'parameters { key: "access" value { string_value: "restricted" } }\n'


def param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'


def restrict(folder: Path, *extra: str) -> None:
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + RESTRICTED + "".join(extra))


@dataclass
class Stack:
    open_url: str  # fits for anyone (INR_FIT_ACCESS=open, the default)
    key_url: str  # fits for keys with the scope fit (INR_FIT_ACCESS=key)
    repo: Path
    store_url: str
    keys_path: Path
    keys: dict = field(default_factory=dict)  # role → the key's secret
    ids: dict = field(default_factory=dict)  # role → the key's id
    logs: list = field(default_factory=list)  # the servers, for their output

    def auth(self, role: str | None) -> dict:
        return {"Authorization": f"Bearer {self.keys[role]}"} if role else {}

    def token(self, scopes=("staff",), ttl: int = 60, models=None, sub: str = "tester") -> str:
        return Signer(SECRET.encode()).issue(sub, scopes, ttl, "access", models)[0]

    def fit(self, name: str | None, role: str | None = None, url: str | None = None, **fields) -> httpx.Response:
        data = {**FAST, **({"name": name} if name else {}), **{k: str(v) for k, v in fields.items()}}
        return httpx.post(
            f"{url or self.open_url}/v1/fits",
            files={"file": (f"{name or 'photo'}.png", png(photo(40, 32, hash(name) % 1000)), "image/png")},
            data=data,
            headers=self.auth(role),
            timeout=60,
        )

    def finished(self, job: str, timeout: float = 240) -> dict:
        """The job's record in the store once it has ended (read there: whoever may see it over HTTP)."""
        store = FitStore(self.store_url)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                rec = store.get(job)
                if rec["state"] in FINISHED:
                    return rec
                time.sleep(0.2)
        finally:
            store.close()
        raise AssertionError(f"fit {job} did not end in {timeout} s")

    def served(self, name: str, version: int, timeout: float = 60) -> None:
        """Wait until the service's poll serves `version` of `name` (asked as an admin)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = httpx.get(f"{self.open_url}/v2/models/{name}/versions/{version}/ready", headers=self.auth("admin"))
            if r.status_code == 200:
                return
            time.sleep(0.2)
        raise AssertionError(f"{name} version {version} not served in {timeout} s")


def build(tmp: Path, model_repo: Path) -> tuple[Stack, list]:
    """Start it all; returns the stack and what to stop."""
    repo = tmp / "models"
    repo.mkdir()
    for name in ("open", "secret", "thumb"):
        copy_model(model_repo / "astronaut", repo / name)
    restrict(repo / "secret", param("access_scopes", "staff"))
    restrict(repo / "thumb", param("access_substitute", "16"))
    keys_path, uploads = tmp / "keys.json", tmp / "uploads"
    store_url = f"sqlite:///{tmp / 'fits.sqlite'}"
    stack = Stack("", "", repo, store_url, keys_path)
    ks = KeyStore(keys_path)
    for role, scopes, models in (
        ("admin", ["admin"], None),
        ("staff", ["staff"], None),
        ("fit", ["fit"], None),
        ("other", ["fit"], None),
        ("limited", ["admin"], ["open"]),
    ):
        stack.keys[role], record = ks.create(role, scopes, models)
        stack.ids[role] = record.id
    env = {
        "INR_ACCESS_SECRET": SECRET,
        "INR_ACCESS_KEYS": str(keys_path),
        "INR_FIT_STORE": store_url,
        "INR_FIT_UPLOADS": str(uploads),
        "INR_FIT_QUEUE_LIMIT": "40",
        "INR_FIT_STALE_S": "5",
        "INR_FIT_ANONYMOUS_MAX_PIXELS": "1000000",
        "INR_MAX_UPLOAD_PIXELS": "4000000",
    }
    poll = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
    started = []
    try:
        open_srv = Server(repo, *poll, env=env).wait_ready()
        started.append(open_srv)
        key_srv = Server(repo, *poll, env={**env, "INR_FIT_ACCESS": "key"}).wait_ready()
        started.append(key_srv)
        worker = Worker(store_url, repo, tmp / "worker.log", "--uploads", str(uploads))
        started.append(worker)
        store = FitStore(store_url)
        deadline = time.monotonic() + 180  # the worker imports torch, then sends its first heartbeat
        while not store.workers() and time.monotonic() < deadline and worker.proc.poll() is None:
            time.sleep(0.2)
        alive = bool(store.workers())
        store.close()
        assert alive, worker.output()[-3000:]
    except BaseException:
        for s in started:
            s.stop()
        raise
    stack.open_url, stack.key_url = open_srv.url, key_srv.url
    stack.logs = [open_srv, key_srv, worker]
    return stack, started
