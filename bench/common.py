"""Shared helpers for the benchmarks: machine description, robust timing, result files.

Also what they read of a server's processes in /proc (tree, cpu_seconds, status_kib), counted the same way for
every server, and `free_port`: ports below the kernel's ephemeral range, each reserved by a lock file of this
user's until its process exits, so that servers started at once (xdist workers, two suites) never share one.
"""

from __future__ import annotations

import collections
import datetime as dt
import fcntl
import json
import logging
import os
import platform
import random
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
IMG = ROOT / "docs" / "img"
TREES = ROOT / "build" / "bench" / "trees"  # git refs given as --baseline, exported once each


LSCPU = {
    "cpu": "Model name",
    "cpus": "CPU(s)",
    "threads_per_core": "Thread(s) per core",
    "hypervisor": "Hypervisor vendor",
}


def lscpu() -> dict:
    """What lscpu says of the CPU: model, CPUs, threads per core, hypervisor, AVX flags."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    info = {key: fields[name] for key, name in LSCPU.items() if name in fields}
    info["avx"] = sorted(f for f in fields.get("Flags", "").split() if f.startswith("avx"))
    return info


def cpu_model() -> str:
    return lscpu().get("cpu") or platform.processor() or "unknown CPU"


def machine() -> dict:
    """What the numbers were measured on; written into every result file."""
    import numpy as np

    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gpu": "none",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return info


def time_calls(fn: Callable[[], object], repeats: int = 7, warmup: int = 1, min_seconds: float = 0.0) -> list[float]:
    """Seconds per call of fn(), `repeats` samples after `warmup` calls. With min_seconds, each
    sample loops fn until at least that long has passed and reports the mean per call."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_seconds:
                break
        samples.append(elapsed / n)
    return samples


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def mean_std(xs: list[float]) -> tuple[float, float]:
    return float(statistics.fmean(xs)), float(statistics.stdev(xs)) if len(xs) > 1 else 0.0


def write_json(name: str, payload: dict, out_dir: Path | None = None) -> Path:
    """Write results atomically to OUT_DIR/NAME.json (default bench/results)."""
    out_dir = Path(out_dir or RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
    log.info("wrote %s", path)
    return path


def ort_session(model, threads: int):
    """An onnxruntime CPU session (model: path or bytes) with `threads` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(
        model if isinstance(model, bytes) else str(model), sess_options=opts, providers=["CPUExecutionProvider"]
    )


def fit_image_config(argv: list[str]):
    """The FitConfig that `python -m training fit-image ARGV` would train."""
    from training.cli import OneLineParser
    from training.cli_image import add_image_options, fit_config

    parser = OneLineParser(prog="fit-image")
    add_image_options(parser)
    cfg = fit_config(parser.parse_args(argv))
    cfg.validate()
    return cfg


def named_options(values: list[str], parser, flag: str) -> dict[str, list[str]]:
    """`NAME=OPTIONS` arguments (fit-image options of one row or model) as {NAME: [options…]};
    a malformed one is the parser's one-line usage error."""
    out = {}
    for v in values:
        name, sep, options = v.partition("=")
        if not (sep and name and options.split()):
            parser.error(f"{flag} wants NAME=OPTIONS, got '{v}'")
        out[name] = options.split()
    return out


def finish(result: dict, plot_path: str | None, plot: Callable, table_md: Callable) -> dict:
    """Plot (when asked) and log the markdown table of a finished benchmark."""
    if plot_path:
        plot(result, plot_path)
    log.info("\n%s", table_md(result))
    return result


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def set_threads(n: int) -> None:
    """Pin torch's intra-op threads (0 = leave torch's default). On a shared 2-core VM one
    thread is 2-3× faster than two: the other tenants keep a core busy and OpenMP waits."""
    if n > 0:
        import torch

        torch.set_num_threads(n)


def setup_logging(verbose: bool = True) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def git(*args: str, cwd: Path = ROOT) -> str:
    env = {**os.environ, "TZ": "UTC"}  # dates in UTC, as every result file writes them
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env)
    return out.stdout.strip() if out.returncode == 0 else ""


def commit_of(tree: Path = ROOT) -> str:
    """The commit checked out in `tree`, with '+dirty' when tracked files differ from it."""
    sha = git("rev-parse", "--short=12", "HEAD", cwd=tree)
    if not sha:
        return "unknown"
    return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no", cwd=tree) else "")


def checkout(ref: str, trees: Path = TREES) -> tuple[Path, str]:
    """(folder, commit) of a --baseline: an existing folder as it is, else a git ref exported once under `trees`."""
    path = Path(ref).resolve()
    if path.is_dir():
        if path.parent == trees.resolve():  # a ref exported earlier: its folder is named by its commit
            return path, path.name
        top = git("rev-parse", "--show-toplevel", cwd=path)
        return path, commit_of(path) if top and Path(top).resolve() == path else "unknown"
    sha = (
        "" if ref.startswith("-") else git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    )
    if not sha:
        raise ValueError(f"--baseline {ref!r} is neither a folder nor a commit of this repository")
    tree = trees / sha[:12]
    if not tree.is_dir():
        trees.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=trees) as tmp:
            archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            Path(tmp).rename(tree)  # whole or not at all: a half-exported tree is never reused
            Path(tmp).mkdir()  # for TemporaryDirectory's cleanup
    return tree, sha[:12]


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (a server's worker processes), found through /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system, /proc/PID/stat fields 14 and 15) of the processes so far."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def status_kib(pid: int, key: str) -> int:
    """A memory line of /proc/PID/status in KiB (VmRSS, VmHWM, …); 0 when the process is gone or has no such line."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith(key + ":")), 0)


LOW, HIGH = 20_000, 32_000  # below the kernel's ephemeral range
KEEP = 256  # reservations one process holds; past that its oldest ends (that server is long gone)
_held: collections.deque[int] = collections.deque()  # the lock files' descriptors


def _folder() -> Path:
    d = Path(tempfile.gettempdir()) / f"inr-serve-ports-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    if d.is_symlink() or d.stat().st_uid != os.getuid():
        raise RuntimeError(f"{d} is not this user's own folder")
    return d


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(n: int = 1) -> int:
    """A port p such that p … p+n−1 are free now and no other process using this function will be given them."""
    folder, rng = _folder(), random.Random()
    for _ in range(2000):
        base = rng.randrange(LOW, HIGH - n)
        fds = []
        for p in range(base, base + n):
            fd = os.open(folder / str(p), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                break
            fds.append(fd)
            if not _bindable(p):
                break
        else:
            _held.extend(fds)
            while len(_held) > KEEP:
                os.close(_held.popleft())
            return base
        for fd in fds:
            os.close(fd)  # releases its lock
    raise RuntimeError(f"no {n} free consecutive ports in {LOW}–{HIGH}")
