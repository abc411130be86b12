"""Replay a Dockerfile target outside Docker and check that it serves.

    python deploy/check_image_commands.py [--target runtime] [--keep] [--timeout 300]

No Docker engine runs on CI, so this runs the commands the image runs, read from the
Dockerfile itself (deploy/dockerfile_model.py), in a scratch directory that stands in for
each stage's filesystem (/opt/venv becomes SCRATCH/STAGE/opt/venv, and so on):

  * COPY copies from the build context, honouring .dockerignore, or from an earlier stage;
  * RUN runs with /bin/sh -c and the stage's ENV, `python` being this interpreter's base
    Python (the image's base provides `python` the same way); RUNs that only create the
    image's user (groupadd/useradd) are reported and skipped: they need root and would
    change this machine;
  * the target's CMD is started with the target's ENV and WORKDIR, like `docker run`, but with
    INR_PORT set to a free port (as `docker run -e INR_PORT=...` would), so parallel runs do
    not clash; a CMD that ignores INR_PORT fails the health check;
  * the target's HEALTHCHECK command runs until it passes, within the start period plus
    retries x interval, then /health/live is checked, `torch` must not be importable in the
    target's Python, `python -m service.client --help` and `models` must work there (without
    `training`), and the server must stop cleanly on SIGTERM (`docker stop`).

Exit code 0 when all of that holds; 1 with the reason otherwise. Needs PyPI for the install.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dockerfile_model import (DockerfileError, DockerIgnore, Stage, expand, parse, parse_copy,  # noqa: E402
                              parse_env, parse_healthcheck)

USER_SETUP = re.compile(r"^\s*(groupadd|useradd)\b")


class CheckFailed(RuntimeError):
    pass


def say(msg: str) -> None:
    print(f"[image-check] {msg}", flush=True)


class StageFS:
    """One stage's filesystem: image paths under /opt, /app, /src, ... live below `root`."""

    def __init__(self, root: Path, image_roots: set[str], base_bin: Path):
        self.root = root
        self.rx = re.compile(r"(?<![\w./-])/(" + "|".join(sorted(image_roots)) + r")(?=/|\b|$)")
        self.env: dict[str, str] = {"PATH": f"{base_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                                    "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
        self.workdir = root
        root.mkdir(parents=True)

    def native(self, text: str) -> str:
        return self.rx.sub(lambda m: f"{self.root}/{m.group(1)}", text)

    def path(self, image_path: str) -> Path:
        p = Path(image_path) if image_path.startswith("/") else None
        return Path(self.native(image_path)) if p else self.workdir / image_path


def image_roots(stages: list[Stage]) -> set[str]:
    """Top-level directories the stages write to (WORKDIR and COPY targets, venv paths)."""
    roots = set()
    for stage in stages:
        for instr in stage.instructions:
            if instr.keyword in ("WORKDIR", "COPY", "RUN", "ENV", "HEALTHCHECK", "CMD", "ENTRYPOINT"):
                roots.update(re.findall(r"(?<![\w./-])/(opt|app|src|srv|models|data)(?=/|\b)", instr.value))
    return roots or {"app"}


def copy_into(fs: StageFS, instr, context: Path, ignore: DockerIgnore, built: dict[str, StageFS]) -> None:
    spec = parse_copy(instr)
    dest = fs.path(expand(spec.dest, fs.env))
    into_dir = len(spec.sources) > 1 or spec.dest.endswith("/") or spec.dest == "."
    for src in spec.sources:
        origin = built[spec.from_stage].path(src) if spec.from_stage else context / src
        if not origin.exists():
            raise CheckFailed(f"line {instr.line}: COPY source '{src}' does not exist")
        if origin.is_dir():
            if spec.from_stage:
                shutil.copytree(origin, dest, symlinks=True, dirs_exist_ok=True)
                continue
            files = [p for p in sorted(origin.rglob("*"))
                     if p.is_file() and not ignore.excluded(os.path.relpath(p, context))]
            if not files:
                raise CheckFailed(f"line {instr.line}: COPY source '{src}' has no files left after .dockerignore")
            for f in files:
                target = dest / f.relative_to(origin)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)
        else:
            if not spec.from_stage and ignore.excluded(os.path.relpath(origin, context)):
                raise CheckFailed(f"line {instr.line}: COPY source '{src}' is excluded by .dockerignore")
            target = dest / origin.name if (into_dir or dest.is_dir()) else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)


def run_stage(stage: Stage, fs: StageFS, global_args: dict[str, str], context: Path, ignore: DockerIgnore,
              built: dict[str, StageFS]) -> dict:
    info: dict = {"healthcheck": None, "cmd": None, "expose": [], "user": None}
    args: dict[str, str] = {}   # a global ARG is visible in a stage only once the stage declares it
    for instr in stage.instructions:
        kw = instr.keyword
        if kw == "ARG":
            key, eq, default = instr.value.partition("=")
            args[key] = default if eq else global_args.get(key, "")
        elif kw == "ENV":
            for key, val in parse_env(instr):
                fs.env[key] = expand(fs.native(val), {**args, **fs.env})
        elif kw == "WORKDIR":
            fs.workdir = fs.path(expand(instr.value, {**args, **fs.env}))
            fs.workdir.mkdir(parents=True, exist_ok=True)
        elif kw == "COPY":
            copy_into(fs, instr, context, ignore, built)
        elif kw == "RUN":
            steps = [s for s in re.split(r"\s*&&\s*", instr.value) if s.strip()]
            if all(USER_SETUP.match(s) for s in steps):
                say(f"{stage.name}: skip line {instr.line} (creates the image's user; needs root)")
                continue
            command = fs.native(instr.value)
            say(f"{stage.name}: RUN {command}")
            result = subprocess.run(["/bin/sh", "-c", command], cwd=fs.workdir, env={**args, **fs.env})
            if result.returncode != 0:
                raise CheckFailed(f"line {instr.line}: RUN exited {result.returncode}: {instr.value}")
        elif kw == "USER":
            info["user"] = instr.value
        elif kw == "EXPOSE":
            info["expose"] += instr.value.split()
        elif kw == "HEALTHCHECK":
            info["healthcheck"] = parse_healthcheck(instr)
        elif kw in ("CMD", "ENTRYPOINT"):
            form = instr.exec_form()
            if form is None:
                raise CheckFailed(f"line {instr.line}: {kw} must use the exec (JSON) form")
            info[kw.lower()] = form
    return info


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_client(python: str, env: dict, cwd: Path, port: int) -> None:
    """`python -m service.client` runs in the target (where `training` is not installed)."""
    has = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                          "sys.exit(0 if u.find_spec('service') else 3)"], env=env, cwd=cwd, capture_output=True)
    if has.returncode == 3:
        say("no service package in the target: client check skipped")
        return
    for args in (["--help"], ["--url", f"http://127.0.0.1:{port}", "models"]):
        run = subprocess.run([python, "-m", "service.client", *args], env=env, cwd=cwd, capture_output=True,
                             text=True, timeout=60)
        if run.returncode != 0:
            raise CheckFailed(f"python -m service.client {' '.join(args)} exited with {run.returncode}: "
                              f"{(run.stderr or run.stdout).strip()[-500:]}")
    say("python -m service.client --help and `models` work in the target")


def serve_and_check(fs: StageFS, info: dict, timeout: float) -> None:
    user = info["user"] or "0"
    if user.split(":")[0] in ("0", "root"):
        raise CheckFailed("the target runs as root: add a USER instruction")
    if not info["cmd"] or not info["healthcheck"]:
        raise CheckFailed("the target needs a CMD and a HEALTHCHECK")
    image_port = fs.env.get("INR_PORT")
    if image_port not in info["expose"]:
        raise CheckFailed(f"EXPOSE {info['expose']} does not include INR_PORT={image_port}")
    port = free_port()
    env = {**fs.env, "INR_PORT": str(port)}
    argv = [fs.native(a) for a in info.get("entrypoint") or []] + [fs.native(a) for a in info["cmd"]]
    hc = info["healthcheck"]
    probe = [fs.native(a) for a in hc.command]
    say(f"start: {' '.join(argv)}  (cwd {fs.workdir}, INR_PORT={port}, image default {image_port})")
    log = open(fs.root / "server.log", "w+")
    proc = subprocess.Popen(argv, cwd=fs.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + min(timeout, hc.start_period + hc.retries * hc.interval)
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise CheckFailed(f"the server exited with {proc.returncode} before it was healthy")
            try:
                check = subprocess.run(probe, cwd=fs.workdir, env=env, capture_output=True, text=True,
                                       timeout=hc.timeout)
            except subprocess.TimeoutExpired:
                check = subprocess.CompletedProcess(probe, 1, "", f"timed out after {hc.timeout:g} s")
            if check.returncode == 0:
                say(f"healthy after {time.monotonic() - t0:.1f} s: {' '.join(hc.command)}")
                break
            if time.monotonic() > deadline:
                raise CheckFailed(f"not healthy within the HEALTHCHECK budget: {check.stderr.strip()}")
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as r:
            body = r.read()
        ready = json.loads(body) if body.strip().startswith(b"{") else {}
        if ready.get("models_failed"):
            raise CheckFailed(f"{ready['models_failed']} bundled model(s) failed to load: {ready}")
        if "models_ready" in ready:
            say(f"/health/ready: {ready['models_ready']} model(s) loaded, none failed")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/live", timeout=5) as r:
            if r.status != 200:
                raise CheckFailed(f"/health/live answered {r.status}")
        say("/health/live answered 200")
        python = shutil.which("python", path=env["PATH"])
        no_torch = subprocess.run([python, "-c", "import torch"], env=env, capture_output=True)
        if no_torch.returncode == 0:
            raise CheckFailed(f"torch is importable in the target's Python ({python})")
        say(f"torch is not installed in {python}")
        check_client(python, env, fs.workdir, port)
    except BaseException:
        log.seek(0)
        sys.stderr.write("---- server output ----\n" + log.read()[-4000:] + "\n")
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise CheckFailed("the server ignored SIGTERM for 10 s (docker stop would kill it)")
    say(f"stopped on SIGTERM with exit code {proc.returncode}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dockerfile", default=str(HERE.parent / "Dockerfile"))
    ap.add_argument("--context", default=str(HERE.parent))
    ap.add_argument("--target", default="runtime")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--timeout", type=float, default=300, help="cap on the wait for a healthy server")
    opts = ap.parse_args(argv)
    context = Path(opts.context).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="image-check-"))
    try:
        dockerfile = parse(Path(opts.dockerfile).read_text())
        chain = dockerfile.chain(opts.target)
        base = getattr(sys, "_base_executable", sys.executable)
        base_bin = scratch / "base-bin"
        base_bin.mkdir()
        for name in ("python", "python3"):
            (base_bin / name).symlink_to(os.path.realpath(base))
        m = re.search(r"python:(\d+\.\d+)", chain[-1].base)
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if m and m.group(1) != here:
            say(f"note: the image uses Python {m.group(1)}, this replay uses Python {here}")
        roots = image_roots(chain)
        ignore = DockerIgnore.load(context)
        built: dict[str, StageFS] = {}
        info: dict = {}
        for stage in chain:
            say(f"stage {stage.name} (FROM {stage.base})")
            fs = StageFS(scratch / stage.name, roots, base_bin)
            info = run_stage(stage, fs, dockerfile.args, context, ignore, built)
            built[stage.name] = fs
        serve_and_check(built[chain[-1].name], info, opts.timeout)
    except (CheckFailed, DockerfileError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    finally:
        if opts.keep:
            say(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    say(f"PASS: target '{opts.target}' installs, starts as its CMD and passes its HEALTHCHECK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
