"""First-request latency after a reload, with and without config.pbtxt `model_warmup` (docs/benchmarks.md, warmup).

A poll-mode server serves a copy of the bundled astronaut model; `--clients` clients send V2 binary infer
requests of `--coords` coordinates in a loop; version 2 appears on disk and the poll swaps it in. Reported:
the latency of the first request version 2 answered, the warm p50 of version 1 under the same load, their
ratio, and every non-200 answer. Run once with the model's warmup, once with it removed from config.pbtxt.

    python -m bench.warmup                 # both, 3 clients, 2,000 coordinates
    python -m bench.warmup --rounds 3      # the median ratio over 3 reloads each
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as th

from .serving import Server

ROOT = Path(__file__).resolve().parents[1]


def add_version(model: Path) -> int:
    """Copy the highest version to the next number, renamed into place (a writer's atomic publish)."""
    last = max(int(p.name) for p in model.iterdir() if p.name.isdigit())
    tmp = model / f".{last + 1}.tmp"
    shutil.copytree(model / str(last), tmp)
    meta = json.loads((tmp / "metadata.json").read_text())
    (tmp / "metadata.json").write_text(json.dumps({**meta, "version": last + 1}))
    os.rename(tmp, model / str(last + 1))
    return last + 1


def reload_under_load(
    source: Path, workdir: Path, warmup: bool, clients: int = 3, coords: int = 2000, settle_s: float = 3.0
) -> dict:
    """One reload of a copy of model folder `source` under load; see the module docstring."""
    repo = workdir / "models"
    model = repo / source.name
    shutil.copytree(source, model)
    if not warmup:
        cfg = model / "config.pbtxt"
        cfg.write_text(re.sub(r"model_warmup \{.*?\n\}\n", "", cfg.read_text(), flags=re.S))
    srv = Server(repo, "reload", args=("--model-control-mode", "poll", "--repository-poll-secs", "0.3")).wait()
    x = np.random.default_rng(0).random((coords, 2), dtype=np.float32)
    answers: list[tuple[float, float, str, int]] = []  # (start, seconds, version, status)
    stop = threading.Event()

    def client() -> None:
        c = th.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=60)
        t = th.InferInput("coords", list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                version, status = c.infer(source.name, [t]).get_response()["model_version"], 200
            except Exception as e:  # InferenceServerException carries the HTTP status
                version, status = "", int(getattr(e, "status", lambda: 0)() or 0)
            answers.append((t0, time.perf_counter() - t0, version, status))
        c.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    try:
        for t in threads:
            t.start()
        time.sleep(settle_s)
        add_version(model)
        end = time.monotonic() + 60
        while not any(v == "2" for _, _, v, _ in answers) and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        srv.stop()
    warm = sorted(s for _, s, v, _ in answers[len(answers) // 4 :] if v == "1")
    v2 = [a for a in answers if a[2] == "2"]
    first = min(v2, key=lambda a: a[0])[1] if v2 else float("nan")
    p50 = warm[len(warm) // 2] if warm else float("nan")
    return {
        "warmup": warmup,
        "requests": len(answers),
        "non_200": [a[3] for a in answers if a[3] != 200],
        "first_ms": first * 1e3,
        "warm_p50_ms": p50 * 1e3,
        "ratio": first / p50,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.warmup", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "astronaut")
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--coords", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    rows = []
    for warm in (True, False):
        runs = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(reload_under_load(args.model, Path(tmp), warm, args.clients, args.coords))
        runs.sort(key=lambda r: r["ratio"])
        rows.append(runs[len(runs) // 2])
    out = [
        "| warmup | first request after the reload | warm p50 | ratio | requests | non-200 |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| {'yes' if r['warmup'] else 'no'} | {r['first_ms']:.1f} ms | {r['warm_p50_ms']:.1f} ms | "
        f"{r['ratio']:.2f}× | {r['requests']} | {len(r['non_200'])} |"
        for r in rows
    ]
    print("\n".join(out))  # noqa: T201  (a command's result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
