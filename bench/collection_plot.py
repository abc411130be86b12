"""The plot of docs/benchmarks.md, collection: tile latency against the memory budget, from `bench.collection tiles
--json`.

    python -m bench.collection_plot /tmp/tiles.json docs/img/collection-tiles-budget.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from commandline import parse_bytes

from .common import pyplot


def plot(doc: dict, out: Path) -> None:
    plt = pyplot()
    rows = doc["result"]["median"]
    rounds = doc["result"]["rounds"]
    budgets = [parse_bytes(r["budget"]) / 2**30 for r in rows]
    fig, (lat, hit) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        values = [r[key] for r in rows]
        spread = [[r[key] for r in rnd] for rnd in rounds]
        low = [v - min(s[i] for s in spread) for i, v in enumerate(values)]
        high = [max(s[i] for s in spread) - v for i, v in enumerate(values)]
        lat.errorbar(budgets, values, yerr=[low, high], marker="o", capsize=3, label=f"tile {label}")
    lat.set_xscale("log", base=2)
    lat.set_yscale("log")
    lat.set_xlabel("memory budget (GiB)")
    lat.set_ylabel("512² tile latency (ms)")
    lat.set_xticks(budgets, [r["budget"] for r in rows])
    lat.legend()
    lat.grid(alpha=0.3, which="both")
    hit.plot(budgets, [r["hit_rate"] * 100 for r in rows], marker="o", label="hit rate (%)")
    hit.set_xscale("log", base=2)
    hit.set_xticks(budgets, [r["budget"] for r in rows])
    hit.set_xlabel("memory budget (GiB)")
    hit.set_ylabel("requests whose model was resident (%)")
    hit.grid(alpha=0.3)
    models = rows[0]["models"]
    fig.suptitle(f"{models} photo models, Zipf(1.1) over models, 512² IIIF tiles (medians of {len(rounds)})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    plot(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
