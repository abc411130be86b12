"""What the documentation's examples run against (tests/docs/test_examples.py): a fresh clone, the service and a fit
worker started with the commands `make serve` and `make worker` run, and the files a user brings.

* **The clone.** The repository's files (`git ls-files`: tracked and untracked, not ignored), copied to a folder of
  their own, with `../shared` beside it as in CI and the test's virtual environment as `.venv`: what `make setup`
  leaves on a fresh clone. What an example writes stays there.
* **The stack.** `make -n serve PORT=… GRPC_PORT=…` and `make -n worker` say the commands; they run in the clone (the
  `pip install` lines are left out: the environment is the test's own). The one change to an example is its ports
  (8000 and 8001, which another service on this machine may hold), and `INR_SERVICE_URL` for the client's default.
* **The user's files.** The examples name files a user would have: `photo.jpg`, a folder `photos/`, `a.jpg`,
  `b.png`, `trip/…`. Small ones are made from the bundled photo.
* **What fails an example.** A non-zero exit (shell blocks run with `set -e -o pipefail`); a request it made that the
  service answered 4xx or 5xx (from the service's access log), unless the block's marker allows that status; a file
  with an image's extension that is no image (`curl -o x.jpg` of a JSON error); a file written outside `build/`
  (the repository stays clean, `models/` included: fits go to `build/fitted/`, INR_FIT_MODELS). A Python example
  runs where only what the extras `make serve` installs can be imported (tests/docs/pyexample.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import httpx
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from PIL import Image

from bench.common import free_port

from .examples import Example

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's own copy of tomli
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".tif", ".tiff", ".bmp"}
WRITABLE = ("build/",)  # where an example may write (fits: build/fitted); anything else would dirty a clone
STATUS = re.compile(r'"[A-Z]+ (\S+) HTTP/[\d.]+" (\d{3})')
EXAMPLE_TIMEOUT_S = 420


def clone(dest: Path) -> Path:
    """The repository's files in `dest/repo`, `.venv` and `../shared` linked: a fresh clone after `make setup`."""
    repo = dest / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            (repo / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name.decode())
    (repo / ".venv").symlink_to(Path(sys.prefix))
    shared = ROOT.parent / "shared"
    if shared.exists():
        (dest / "shared").symlink_to(shared.resolve())
    return repo


def user_files(repo: Path) -> set[str]:
    """The photos the examples name, made small from the bundled one (data/photos/dandelion.jpg, CC0)."""
    photo = Image.open(repo / "data" / "photos" / "dandelion.jpg").convert("RGB")
    made = {
        "photo.jpg": photo.resize((192, 108)),
        "photos/meadow.jpg": photo.crop((600, 200, 1400, 800)).resize((128, 96)),
        "photos/seed-head.png": photo.crop((800, 100, 1300, 600)).resize((96, 96)),
        "a.jpg": photo.crop((0, 0, 960, 540)).resize((128, 72)),
        "b.png": photo.crop((960, 540, 1920, 1080)).resize((128, 72)),
        "trip/day-1/c.jpg": photo.crop((480, 270, 1440, 810)).resize((128, 72)),
    }
    for name, img in made.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        img.save(repo / name, quality=92)
    return set(made)


def make_dry_run(repo: Path, target: str, **variables: str) -> str:
    """What `make -n TARGET` prints, as a user's shell outside make runs it."""
    return subprocess.run(
        ["make", "--no-print-directory", "-n", target, *(f"{k}={v}" for k, v in variables.items())],
        cwd=repo,
        env=outside_make(os.environ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def make_commands(repo: Path, target: str, **variables: str) -> list[str]:
    """The command lines `make TARGET` runs (`make -n`), without its `pip install`s."""
    out = make_dry_run(repo, target, **variables)
    return [line for line in out.splitlines() if line.strip() and "pip install" not in line]


def serve_extras(repo: Path) -> set[str]:
    """The extras `make serve` installs: `pip install -e '.[a,b]'`."""
    out = make_dry_run(repo, "serve")
    found = re.search(r"pip install .*\.\[([\w,-]+)\]", out)
    return set(found.group(1).split(",")) if found else set()


def outside_make(env) -> dict:
    """ENV as a shell outside make has it: the suite may run under `make test`, whose MAKEFLAGS and MAKELEVEL
    a nested make reads (its "Entering directory" lines, the -j server), which a user's shell has not."""
    return {k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}


def user_env(port: int) -> dict:
    """A user's shell: no virtual environment active, none of the test run's INR_* settings."""
    venv_bins = {str(Path(sys.prefix) / "bin"), str(ROOT / ".venv" / "bin")}
    env = {
        k: v
        for k, v in outside_make(os.environ).items()
        if not k.startswith(("INR_", "OTEL_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p not in venv_bins)
    env["INR_SERVICE_URL"] = f"http://127.0.0.1:{port}"  # the client's default, on the port it was moved to
    return env


@dataclass
class Stack:
    """The clone, with the service and a worker running in it as `make serve` and `make worker` start them."""

    root: Path
    repo: Path = field(init=False)
    port: int = field(init=False)
    grpc_port: int = field(init=False)
    procs: list = field(default_factory=list)

    def __post_init__(self):
        self.repo = clone(self.root)
        self.brought = user_files(self.repo)
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = user_env(self.port)
        self.scripts = self.root / "scripts"
        self.scripts.mkdir()

    def start(self) -> "Stack":
        serve = make_commands(self.repo, "serve", PORT=str(self.port), GRPC_PORT=str(self.grpc_port))
        worker = make_commands(self.repo, "worker")
        assert len(serve) == 1 and len(worker) == 1, (serve, worker)
        self.service_log = self.root / "service.log"
        self.worker_log = self.root / "worker.log"
        for cmd, log in ((serve[0], self.service_log), (worker[0], self.worker_log)):
            self.procs.append(
                subprocess.Popen(
                    f"exec {cmd}",
                    shell=True,
                    cwd=self.repo,
                    env=self.env,
                    stdout=open(log, "ab"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        end = time.monotonic() + 180
        while time.monotonic() < end:
            for p, log in zip(self.procs, (self.service_log, self.worker_log)):
                if p.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited with {p.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the service did not get ready: {self.service_log.read_text()[-3000:]}")

    def stop(self) -> None:
        """The service, the worker and whatever an example left running in their sessions."""
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    # -- an example ---------------------------------------------------------------------------------
    def as_run(self, code: str) -> str:
        """The example with its ports moved to the stack's."""
        code = re.sub(r"\b(localhost|127\.0\.0\.1):8000\b", rf"\g<1>:{self.port}", code)
        return re.sub(r"\b(localhost|127\.0\.0\.1):8001\b", rf"\g<1>:{self.grpc_port}", code)

    def run(self, example: Example) -> list[str]:
        """Run one example; what went wrong (one line each, the output with the first), nothing when it passed."""
        before, offset = self.files(), self.service_log.stat().st_size
        code = self.as_run(example.code)
        if example.lang == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            script = self.scripts / f"{example.path.replace('/', '_')}_{example.line}.py"
            script.write_text(code)
            python = str(self.repo / ".venv" / "bin" / "python")
            cmd = [python, str(ROOT / "tests" / "docs" / "pyexample.py"), str(script), str(self.blocked())]
        proc = subprocess.Popen(
            cmd, cwd=self.repo, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            out, _ = proc.communicate(timeout=EXAMPLE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return [f"still running after {EXAMPLE_TIMEOUT_S} s: {out.decode(errors='replace')[-2000:]}"]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # nothing it started in the background outlives it
        output = out.decode(errors="replace")[-2000:]
        wrong = [] if proc.returncode == 0 else [f"exit code {proc.returncode}; its output:\n{output}"]
        time.sleep(0.2)  # the access log's last lines
        log = self.service_log.read_bytes()[offset:].decode(errors="replace")
        for path, status in STATUS.findall(log):
            if int(status) >= 400 and int(status) not in example.statuses:
                wrong.append(f"{path} answered {status} (a marker `<!-- example: status {status} -->` allows it)")
        wrong += self.written(before)
        if wrong and proc.returncode == 0:
            wrong.append(f"its output:\n{output}")
        return wrong

    def files(self) -> dict[str, tuple[int, int]]:
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.repo):
            dirnames[:] = [d for d in dirnames if d not in (".venv", "__pycache__")]
            for name in filenames:
                p = os.path.join(dirpath, name)
                st = os.stat(p)
                out[os.path.relpath(p, self.repo)] = (st.st_mtime_ns, st.st_size)
        return out

    def written(self, before: dict) -> list[str]:
        """Files the example wrote that no clone should get, and images that are not images."""
        wrong = []
        for rel, stamp in self.files().items():
            if before.get(rel) == stamp or rel in self.brought:
                continue
            if not rel.startswith(WRITABLE):
                wrong.append(f"it wrote {rel} into the repository (write under build/)")
            if Path(rel).suffix.lower() in IMAGE_SUFFIXES:
                try:
                    with Image.open(self.repo / rel) as img:
                        img.verify()
                except Exception:  # noqa: BLE001 - whatever PIL says, it is no image
                    head = (self.repo / rel).read_bytes()[:200]
                    wrong.append(f"{rel} is no image: {head!r}")
        return wrong

    def blocked(self) -> Path:
        """A file listing the top-level modules of every distribution here that `make serve`'s extras do not bring
        (tests/docs/pyexample.py keeps a Python example from importing them)."""
        path = self.scripts / "blocked.json"
        if not path.exists():
            allowed = installed_by(self.repo, serve_extras(self.repo))
            blocked = [
                module
                for module, dists in metadata.packages_distributions().items()
                if module not in sys.stdlib_module_names and not {canonicalize_name(d) for d in dists} & allowed
            ]
            path.write_text(json.dumps(sorted(blocked)))
        return path


def installed_by(repo: Path, extras: set[str]) -> set[str]:
    """The distributions `pip install -e '.[EXTRAS]'` in `repo` brings, as installed here (canonical names)."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    wanted = list(project.get("dependencies", []))
    for extra in extras:
        wanted += project.get("optional-dependencies", {}).get(extra, [])
    seen: set[str] = set()
    todo = [Requirement(line) for line in wanted]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in req.extras | {""}):
                todo.append(sub)
    return {name for name, _ in seen} | {canonicalize_name(project["name"])}
