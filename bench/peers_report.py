"""The tables of `python -m bench.peers`: each round's numbers into rows (medians, ratios per round), and the rows
into markdown."""

from __future__ import annotations

from .peers_loads import Workload
from .serving import median, summary

PEERS = ("kserve", "litserve", "bentoml")
TITLES = {
    "inr": "here",
    "inr2": "here, 2 workers",
    "kserve": "KServe",
    "litserve": "LitServe",
    "bentoml": "BentoML",
}


def title(name: str, baselines: dict[str, str]) -> str:
    """A server's column title; a baseline's is `--baseline` and its folder's name."""
    return TITLES.get(name) or f"--baseline {baselines[name]}"


def rate(rps: float) -> str:
    return f"{rps:.0f}" if rps >= 100 else f"{rps:.1f}"


def per_round(ours: list[dict], theirs: list[float]) -> list[float]:
    return [a["rps"] / b if b > 0 else float("inf") for a, b in zip(ours, theirs)]


def rows_from(results: dict[tuple, list], servers, loads: list[Workload], concurrency) -> list[dict]:
    """One row per workload, concurrency and server: medians of the rounds; on ours, per round, the ratio over
    the best peer, over each baseline, and for a large request over bare onnxruntime (runs/s, default threads)."""
    rows = []
    for load in loads:
        for c in concurrency(load):
            names = [n for n in load.paths if n in servers]
            peers = [n for n in names if n in PEERS]
            for name in names:
                rs = results[(load.label, c, name)]
                row = {
                    "load": load.label,
                    "concurrency": c,
                    "server": name,
                    **summary(rs),
                    "cores": median([r["rps"] * r["cpu_ms_per_req"] / 1000 for r in rs]),
                    "model_cpu_ms": median(results[(load.label, "model")]),
                    "max_abs_diff": load.checks[name],
                }
                if name == "inr" and peers:  # per round: ours over the best peer of that round
                    best = [max(results[(load.label, c, p)][r]["rps"] for p in peers) for r in range(len(rs))]
                    ratios = per_round(rs, best)
                    row["ratio_rounds"] = [round(x, 2) for x in ratios]
                    row["ratio_best_peer"] = median(ratios)
                    if not load.large:
                        row["target"] = 2.0 if load.coordinates else 1.0
                if name == "inr":
                    for base in (n for n in names if n.startswith("base")):
                        row.setdefault("ratio_baseline", {})[base] = median(
                            per_round(rs, [r["rps"] for r in results[(load.label, c, base)]])
                        )
                if load.large:
                    bare = results[(load.label, "bare")]
                    row["bare_rps"] = median(bare)
                    row["ratio_bare"] = median(per_round(rs, bare))
                    if name == "inr" and c == 1:
                        row["target_bare"] = load.bare_target
                rows.append(row)
    return rows


def table(rows: list[dict], baselines: dict[str, str]) -> str:
    lines = [
        "| workload | clients | server | req/s | p50 ms | p99 ms | CPU ms/req | cores busy | here ÷ best peer |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r['ratio_best_peer']:.2f}×" if "ratio_best_peer" in r else ""
        if "target" in r:
            ratio += f" (target {r['target']:g}×)"
        errors = f" ({r['errors']} errors)" if r["errors"] else ""
        lines.append(
            f"| {r['load']} | {r['concurrency']} | {title(r['server'], baselines)} | {rate(r['rps'])}{errors} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_ms_per_req']:.2f} | {r['cores']:.2f} | {ratio} |"
        )
    return "\n".join(lines)


def side_by_side(rows: list[dict], baselines: dict[str, str]) -> str:
    """One line per workload and concurrency: every server's req/s (CPU ms/req), ours over the best peer, over
    each baseline and, for a large request, bare onnxruntime's runs/s and ours over it."""
    names = [n for n in [*TITLES, *baselines] if any(r["server"] == n for r in rows)]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["load"], r["concurrency"]), {})[r["server"]] = r
    heads = [title(n, baselines) for n in names] + ["here ÷ best peer", "target"]
    heads += [f"here ÷ {b}" for b in baselines.values()] + ["bare onnxruntime, runs/s", "here ÷ bare (target)"]
    heads += ["CPU: best peer ÷ here", "model alone, CPU ms"]
    lines = ["| workload | clients | " + " | ".join(heads) + " |", "|---|---:|" + "---:|" * len(heads)]
    for (load, c), by in cells.items():
        vals = [f"{rate(by[n]['rps'])} ({by[n]['cpu_ms_per_req']:.1f})" if n in by else "–" for n in names]
        ours = by["inr"]
        vals.append(f"{ours['ratio_best_peer']:.2f}×" if "ratio_best_peer" in ours else "–")
        vals.append(f"≥ {ours['target']:g}×" if "target" in ours else "–")
        vals += [f"{ours.get('ratio_baseline', {}).get(b, float('nan')):.2f}×" for b in baselines]
        vals.append(f"{ours['bare_rps']:.1f}" if "bare_rps" in ours else "–")
        goal = f" (≥ {ours['target_bare']:g}×)" if ours.get("target_bare") else ""
        vals.append(f"{ours['ratio_bare']:.2f}×{goal}" if "ratio_bare" in ours else "–")
        peer_cpu = [r["cpu_ms_per_req"] for n, r in by.items() if n in PEERS]
        vals.append(f"{min(peer_cpu) / ours['cpu_ms_per_req']:.2f}×" if peer_cpu else "–")
        vals.append(f"{ours['model_cpu_ms']:.2f}")
        lines.append(f"| {load} | {c} | " + " | ".join(vals) + " |")
    return "\n".join(lines)
