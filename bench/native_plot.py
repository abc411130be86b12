"""The native fits' plot and medians (docs/benchmarks.md, native_fit): PSNR over all pixels against fitting time, from
bench.native_fit results.

Each result file holds one run (one photo, one or more presets); runs of the same photo and variant are
rounds. The plot draws every round's curve (one colour per variant, one line style per photo); the table
gives, per photo and variant, the median over rounds of the final PSNR, held-out PSNR, steps and bytes
per pixel.

    python -m bench.native_plot bench/results/native_fit_*.json --out docs/img/native-fit-psnr-time.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def variant(row: dict) -> str:
    argv = row["argv"].split()
    extra = []
    if "--init" in argv:
        extra.append(f"{argv[argv.index('--init') + 1]} start")
    if "--protocol" in argv and argv[argv.index("--protocol") + 1] == "paper":
        extra.append("trained on pixels [::2, ::2]")
    if "--grid-finest-features" in argv:
        extra.append(f"finest level {argv[argv.index('--grid-finest-features') + 1]} feature on the native pixels")
    if "--encoding" in argv and row["preset"] != "grid":
        extra.append(argv[argv.index("--encoding") + 1])
    return row["preset"] + (f" ({', '.join(extra)})" if extra else "")


def load(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        result = json.loads(Path(p).read_text())
        for row in result["rows"]:
            rows.append(
                {
                    **row,
                    "photo": Path(result["image"]).stem,
                    "variant": variant(row),
                    "budget": result["budget_s"],
                    "load": (result.get("load_before", [None])[0], result.get("load_after", [None])[0]),
                }
            )
    return rows


def fit_key(rows: list[dict]) -> str:
    """The fit's seconds: training and the finish (newer results), else training alone (older ones)."""
    return "fit_seconds" if all("fit_seconds" in r for r in rows) else "train_seconds"


def medians(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["photo"], r["variant"], r["budget"])].append(r)
    lines = [
        "| photo | W×H | variant | budget s | rounds | fit s | steps (about) | PSNR all px (median) | held-out "
        "| B/px | JPEG / WebP same bytes |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (photo, name, budget), rs in sorted(groups.items()):
        med = lambda k: statistics.median(r[k] for r in rs if r.get(k) is not None)  # noqa: E731
        codecs = " / ".join(f"{c['psnr']:.2f}" if c.get("psnr") else "–" for c in rs[0]["codecs"])
        held = [r["test_psnr"] for r in rs if r.get("test_psnr") is not None]
        runs = ", ".join(f"{r['full_psnr']:.2f}" for r in rs)
        held_text = f"{statistics.median(held):.2f}" if held else "–"
        lines.append(
            f"| {photo} | {rs[0]['width']}×{rs[0]['height']} | {name} | {budget:.0f} | {len(rs)} "
            f"| {med(fit_key(rs)):.1f} "
            f"| {med('steps'):.0f} | **{med('full_psnr'):.2f}** ({runs}) | {held_text} "
            f"| {med('bytes_per_pixel'):.3f} | {codecs} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = sorted({r["variant"] for r in rows})
    photos = sorted({r["photo"] for r in rows})
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        pts = [(0.0, None)] + [(t, db) for _, t, db in r["curve"]] + [(r[fit_key([r])], r["full_psnr"])]
        xs, ys = zip(*[(t, db) for t, db in pts if db is not None])
        ax.plot(
            xs,
            ys,
            styles[photos.index(r["photo"]) % 4],
            marker="o",
            ms=3,
            color=f"C{variants.index(r['variant'])}",
            alpha=0.8,
        )
    for i, v in enumerate(variants):
        ax.plot([], [], color=f"C{i}", label=v)
    for i, p in enumerate(photos):
        ax.plot([], [], styles[i % 4], color="grey", label=p)
    ax.axhline(38, color="k", lw=0.5)
    ax.axvline(60, color="k", lw=0.5)
    ax.set_xlabel("fitting time, s (2 threads; the PSNR probes excluded)")
    ax.set_ylabel("PSNR over all pixels, dB")
    ax.set_title("Real photos at native resolution (4 MP): PSNR against time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(prog="python -m bench.native_plot", description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="bench.native_fit result files")
    p.add_argument("--out", default="docs/img/native-fit-psnr-time.png")
    a = p.parse_args(argv)
    rows = load(a.results)
    plot(rows, Path(a.out))
    table = medians(rows)
    print(table)  # noqa: T201 - a benchmark script's report
    return table


if __name__ == "__main__":
    main()
