"""docker-compose.yml as written (or another compose file of the repository, such as docker-compose.s3.yml),
brought up by the engine's compose tool in a scratch project folder.

The folder holds a byte-for-byte copy of the compose file, the nginx files it mounts and the bundled
models (the `train` profile writes new versions there; the repository stays clean). Every request
of the suite goes to nginx's published port, as a user's would; the replicas are reached only
through the engine (`exec`), to read their own counters.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.common import free_port

from .engine import PREFIX, ROOT, Engine, EngineError, run

# 60 s: a replica busy optimising its first model on a loaded CI machine once took more than 5 s to answer
METRICS = (
    'python -c "import urllib.request; '
    "print(urllib.request.urlopen('http://127.0.0.1:8000/metrics', timeout=60).read().decode())\""
)


class Stack:
    def __init__(self, engine: Engine, folder: Path, name: str, file: str = "docker-compose.yml"):
        self.engine, self.dir, self.project = engine, folder, f"{PREFIX}{name}"
        self.file = file
        self.profiles: tuple[str, ...] = ()  # compose profiles besides the default services (`up`)
        shutil.copy2(ROOT / file, folder / file)
        for mounted in ("nginx", "s3"):  # what the compose files mount or build from
            shutil.copytree(ROOT / "deploy" / mounted, folder / "deploy" / mounted)
        shutil.copytree(ROOT / "models", folder / "models")
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "INR_HTTP_PORT": str(self.port),
            "INR_GRPC_HOST_PORT": str(self.grpc_port),
            "HOST_UID": str(os.getuid()),
            "HOST_GID": str(os.getgid()),
            "INR_FIT_ACCESS": "open",  # the tests fit without keys; the files' default is `key`
        }

    @property
    def models(self) -> Path:
        return self.dir / "models"

    def compose(self, *args: str, timeout: float = 600, check: bool = True):
        return run(
            [*self.engine.compose, "-f", self.file, "-p", self.project, *args],
            cwd=self.dir,
            env=self.env,
            timeout=timeout,
            check=check,
        )

    def up(self, replicas: int = 1, profiles: tuple[str, ...] = (), scale: str | None = None) -> float:
        """Start the default services and those of `profiles` (`--no-build`: the suite built the images), with
        `replicas` api replicas, or `scale` (SERVICE=N: podman-compose takes one --scale); seconds until
        every api replica is healthy and nginx answers ready."""
        self.profiles = profiles
        t0 = time.monotonic()
        self.compose(*self.profile_args(), "up", "-d", "--no-build", "--scale", scale or f"api={replicas}")
        self.wait_healthy(replicas)
        return time.monotonic() - t0

    def profile_args(self) -> list[str]:
        return [arg for p in self.profiles for arg in ("--profile", p)]

    def down(self) -> None:
        self.compose(*self.profile_args(), "down", "-v", "-t", "5", check=False)
        # replicas added by --scale are not always known to `down` (podman-compose): remove by label
        left = self.containers(None, all_states=True)
        if left:
            self.engine("rm", "-f", "-t", "0", *left, check=False)
        if self.engine.cli == "podman":
            self.engine("pod", "rm", "-f", f"pod_{self.project}", check=False)

    # -- containers ----------------------------------------------------------------------------
    def containers(self, service: str | None = "api", all_states: bool = False) -> list[str]:
        args = ["ps", "--filter", f"label=com.docker.compose.project={self.project}", "--format", "{{.Names}}"]
        if service:
            args[1:1] = ["--filter", f"label=com.docker.compose.service={service}"]
        if all_states:
            args.insert(1, "-a")
        return sorted(self.engine(*args).stdout.split())

    def health(self, container: str) -> str:
        """Run the image's HEALTHCHECK now (Podman 4.3 schedules it with systemd timers, which these
        machines lack; Docker runs it itself) and return the container's health status."""
        if self.engine.cli == "podman":
            self.engine("healthcheck", "run", container, check=False)
        state = self.engine.inspect(container)["State"]
        return (state.get("Health") or state.get("Healthcheck") or {}).get("Status", "none")

    def wait_healthy(self, replicas: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            names = self.containers()
            if len(names) >= replicas and all(self.health(n) == "healthy" for n in names):
                if self.status("/health/ready") == 200:
                    return
            time.sleep(1)
        logs = "\n".join(self.engine("logs", "--tail", "30", n, check=False).stderr for n in self.containers(None))
        raise EngineError(f"{replicas} healthy replica(s) behind nginx not reached in {timeout} s\n{logs}")

    def replica_metrics(self, container: str) -> dict[tuple, float]:
        """The replica's own /metrics, read inside its container (not through nginx)."""
        text = self.engine("exec", container, "sh", "-c", METRICS).stdout
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def address(self, container: str) -> str:
        """The container's addresses on its networks (a restarted container may get a new one)."""
        return self.engine(
            "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", container, check=False
        ).stdout.strip()

    def diagnose(self, path: str) -> str:
        """What a failed check needs: the answer through nginx, each container's state and log tail."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                answer = f"{r.status} {r.read(300)!r}"
        except urllib.error.HTTPError as e:
            answer = f"{e.code} {e.read(300)!r}"
        except OSError as e:
            answer = repr(e)
        lines = [f"GET {path} -> {answer}"]
        for name in self.containers(None, all_states=True):
            state = self.engine.inspect(name)["State"]
            ip = self.address(name)
            logs = self.engine("logs", "--tail", "15", name, check=False)
            lines += [f"--- {name}: {state.get('Status')} ip={ip}", logs.stdout[-2000:], logs.stderr[-2000:]]
        for name in self.containers("nginx"):  # what nginx's resolver would answer for the replicas
            dns = self.engine("exec", name, "getent", "hosts", "api", check=False)
            lines.append(f"--- getent hosts api in {name}: rc={dns.returncode} {dns.stdout.strip()!r}")
        return "\n".join(lines)

    # -- through nginx -------------------------------------------------------------------------
    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0


@dataclass
class Settling:
    """How nginx came back after the replicas restarted, in seconds from the restart: the first 200, the
    last non-200 before `stable_s` of unbroken 200s (None if none followed the first 200), and the
    answers that failed after the first 200 (stale addresses), each with how long it took."""

    first_ok: float | None = None
    last_bad: float | None = None
    stale: list = field(default_factory=list)
    stable: bool = False

    @property
    def stale_window(self) -> float:
        """From the first 200 to the end of the last failed answer after it: how long some requests still
        went to a dead address."""
        return 0.0 if self.last_bad is None or self.first_ok is None else round(self.last_bad - self.first_ok, 2)


def settle(stack: "Stack", path: str, deadline_s: float, stable_s: float, every_s: float = 0.1) -> Settling:
    """Poll `path` through nginx, a new connection each time (so both nginx workers answer), until it has
    answered 200 without a break for `stable_s`, or `deadline_s` has passed. A first 200 is not enough:
    each nginx worker caches the replicas' addresses for the resolver's `valid=` time."""
    t0 = time.monotonic()
    out = Settling()
    ok_since = None
    while time.monotonic() - t0 < deadline_s:
        sent = time.monotonic()
        code = stack.status(path)
        now = time.monotonic()
        if code == 200:
            out.first_ok = out.first_ok if out.first_ok is not None else now - t0
            ok_since = ok_since if ok_since is not None else now
            if now - ok_since >= stable_s:
                out.stable = True
                return out
        else:
            ok_since = None
            if out.first_ok is not None:
                out.last_bad = now - t0
                out.stale.append((code, round(now - sent, 2)))
        time.sleep(every_s)
    return out


def metric(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n in (name, f"{name}_total") and want <= set(ls))
