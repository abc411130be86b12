"""The context code's decode (modelrepo/ctxcode.py, IRC2) at load: seconds per table, wall and CPU, one thread.

Each size is one channel of a native level as a photo fit leaves it (mostly zeros, ±1 and wider values near edges,
`level`), coded by this tree's encoder; it is decoded `--repeats` times by this tree's decoder (the compiled one,
modelrepo/_ctxcode.c, where setup.py built it), by its numpy fallback, and with `--baseline REF` by the decoder of
that commit (`baseline_decode`); the median is reported and every decode is checked against the table.

    python -m bench.ctxcode_decode --baseline HEAD~1 --sizes 0.5 2.3 4     # bench/results/ctxcode_decode.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def level(megapixels: float, seed: int = 0) -> np.ndarray:
    """A [1, 1, ry, rx] uint8 table of 16:9 about `megapixels`: deviations about 60 whose spread follows the edges of
    a smooth random field (zero almost everywhere, a few in ten ±1 or wider along its contours)."""
    rng = np.random.default_rng(seed)
    ry = int(round((megapixels * 1e6 * 9 / 16) ** 0.5))
    rx = int(round(megapixels * 1e6 / ry))
    coarse = rng.normal(size=(ry // 32 + 2, rx // 32 + 2))
    field = np.kron(coarse, np.ones((32, 32)))[:ry, :rx]
    edges = np.hypot(*np.gradient(field))  # steps of the blocky field: lines of edges, flat between
    spread = 0.25 + 2.0 * edges / (edges.max() + 1e-9)
    q = 60 + np.round(rng.laplace(0, spread))
    return np.clip(q, 0, 255).astype(np.uint8)[None, None]


def baseline_decode(ref: str):
    """The decode of git `ref`: its modelrepo/ctxdecode.py where it has one (with this tree's compiled decoder, if
    it uses one), else its modelrepo/ctxcode.py, imported into the package so that its relative imports resolve."""
    for name in ("ctxdecode", "ctxcode"):
        shown = subprocess.run(["git", "show", f"{ref}:modelrepo/{name}.py"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"ctxcode_decode: {ref} has no modelrepo/ctxcode.py")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}_baseline.py"
        path.write_text(shown.stdout)
        spec = importlib.util.spec_from_file_location(f"modelrepo.{name}_baseline", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.decode


def median_seconds(ways: dict, data: bytes, table: np.ndarray, repeats: int) -> dict[str, float]:
    """Each decoder's median seconds, wall and CPU (`WAY cpu`: this process's, which a busy machine inflates less),
    the decoders taking turns (a load that comes and goes weighs on all)."""
    times = {way: ([], []) for way in ways}
    for _ in range(repeats):
        for way, decode in ways.items():
            wall, cpu = time.perf_counter(), time.process_time()
            out = decode(data)
            times[way][0].append(time.perf_counter() - wall)
            times[way][1].append(time.process_time() - cpu)
            if not np.array_equal(out, table):
                raise SystemExit(f"ctxcode_decode: {way} decoded another table")
    out = {way: float(np.median(wall)) for way, (wall, _) in times.items()}
    return out | {f"{way} cpu": float(np.median(cpu)) for way, (_, cpu) in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.5, 2.3, 4.0], help="megapixels per table")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", help="a git ref whose modelrepo/ctxcode.py decodes beside this tree's")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ctxcode_decode.json"))
    args = parser.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    from modelrepo import ctxcode, ctxdecode

    compiled = ctxdecode._ctxcode

    def numpy_decode(data):
        ctxdecode._ctxcode = None
        try:
            return ctxcode.decode(data)
        finally:
            ctxdecode._ctxcode = compiled

    ways = {"this tree": ctxcode.decode, "this tree, numpy": numpy_decode}
    if compiled is None:
        del ways["this tree"]
    if args.baseline:
        ways[f"baseline {args.baseline}"] = baseline_decode(args.baseline)
    rows = []
    for mp in args.sizes:
        table = level(mp)
        data = ctxcode.encode(table)
        row = {"megapixels": table.size / 1e6, "shape": list(table.shape), "bytes": len(data)}
        row.update(median_seconds(ways, data, table, args.repeats))
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
