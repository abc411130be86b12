"""The results store: one JSON line per run of a scenario, bench/results/store.jsonl.

A row: {"scenario", "run" (the result's name), "commit" (the commit measured, or the one that recorded an
imported file), "machine" (lscpu's model, cores, the versions), "date" (UTC, "YYYY-MM-DD HH:MM UTC"),
"command", "source" (the result file it came from, if any), "figures" (the harness's results as written)}.
Rows are only ever appended; the latest row of a scenario (or run) is its current result.

`python -m bench report` fills the generated blocks of docs/benchmarks.md and docs/benchmarks/*.md from it:
`<!-- bench: SCENARIO [RUN] -->` … `<!-- /bench -->`, the run's date, machine, commit and command, then its table
(RENDER: the harness's own markdown function on the stored figures); `<!-- bench: latest -->` is every
scenario's latest row.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import re
from pathlib import Path

from . import FAMILIES, SCENARIOS
from .common import RESULTS, ROOT, commit_of, git, lscpu, machine

STORE = RESULTS / "store.jsonl"


def machine_now() -> dict:
    """This machine for a row: bench.common.machine()'s versions and date, and lscpu's description."""
    return {**machine(), "lscpu": lscpu()}


def make_row(scenario: str, run: str, figures, command: str, source: str = "", **known) -> dict:
    """A row for a run made now on this machine (`known` overrides commit, machine, date)."""
    info = known.get("machine") or machine_now()
    return {
        "scenario": scenario,
        "run": run,
        "commit": known.get("commit") or commit_of(),
        "machine": info,
        "date": known.get("date") or info.get("date", ""),
        "command": command,
        "source": source,
        "digest": known.get("digest") or digest_of(json.dumps(figures, sort_keys=True)),
        "figures": figures,
    }


def append(rows: list[dict], path: Path = STORE) -> int:
    """Append rows under an exclusive lock (a long run and a report may share the store); returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(text)
        f.flush()
    return len(rows)


def read(path: Path = STORE) -> list[dict]:
    """Every row, oldest first; a line that is not a JSON object names the file and line."""
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or "scenario" not in row:
            raise ValueError(f"{path}:{n}: not a store row (no 'scenario')")
        rows.append(row)
    return rows


def latest(rows: list[dict], scenario: str, run: str | None = None) -> dict | None:
    """The scenario's (and run's, if given) row of the latest date; of one date, the last appended."""
    found = [(row.get("date") or "", i) for i, row in enumerate(rows) if row["scenario"] == scenario]
    found = [(d, i) for d, i in found if run is None or rows[i].get("run") == run]
    return rows[max(found)[1]] if found else None


# -- importing the result files written before the store -------------------------------------------------------


def scenario_of(stem: str, names: list[str]) -> str:
    """The scenario or harness that wrote bench/results/STEM.json: the longest name STEM starts with, '-' and '_'
    alike ('peers-issue56' → peers, 'collection-cold-x' → collection-cold), else the stem's first word."""
    key = stem.replace("-", "_")
    fits = [n for n in names if key == n.replace("-", "_") or key.startswith(n.replace("-", "_") + "_")]
    return max(fits, key=len, default="") or key.split("_")[0]


def recorded(path: Path) -> tuple[str, str]:
    """(commit, date) of the first commit that has a result file (a merge that brought it in counts); ('', '') if it
    was never committed."""
    when = "--date=format-local:%Y-%m-%d %H:%M UTC"
    out = git("log", "--reverse", "--format=%h %cd", when, "--", str(path))
    if not out:
        return "", ""
    sha, _, date = out.splitlines()[0].partition(" ")
    return sha, date


def _date(payload) -> str:
    if isinstance(payload, dict):
        m = payload.get("machine")
        if isinstance(m, dict) and m.get("date"):
            return str(m["date"])
        if isinstance(payload.get("date"), str):
            return payload["date"]
    return ""


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def import_results(results: Path = RESULTS, store: Path = STORE, names: list[str] | None = None) -> int:
    """Rows for every bench/results/*.json and every line of *.jsonl not yet in the store (a file whose
    content changed comes in again); their own dates where they recorded one, else the commit's."""
    names = names or sorted({p.stem for p in (ROOT / "bench").glob("*.py")} | set(SCENARIOS))
    have = {(r.get("source"), r.get("digest")) for r in read(store)}
    rows = []
    for path in sorted(results.glob("*.json")) + sorted(results.glob("*.jsonl")):
        if path.resolve() == store.resolve():
            continue
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        sha, committed = recorded(path)
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for n, line in enumerate(lines, 1):
            if not line.strip() or (rel, digest_of(line)) in have:
                continue
            try:
                payload = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{rel}:{n}: not JSON ({e.msg})") from None
            info = payload.get("machine") if isinstance(payload, dict) else None
            row = {
                "scenario": scenario_of(path.stem, names),
                "run": path.stem,
                "commit": sha or commit_of(),
                "machine": info if isinstance(info, dict) else {},
                "date": _date(payload) or committed,
                "command": "",
                "source": rel,  # with the digest, what import_results checks before adding a row again
                "digest": digest_of(line),
                "figures": payload,
            }
            rows.append(row)
    return append(rows, store) if rows else 0


MARK = re.compile(r"<!-- bench: (?P<scenario>[\w-]+)(?: (?P<run>[\w.-]+))? -->\n.*?<!-- /bench -->", re.S)
# scenario → (module, function, how to call it on the figures)
RENDER = {
    "peers": ("peers", "side_by_side", lambda fn, f: fn(f["rows"], baselines_of(f["rows"]))),
    "peers-large": ("peers", "side_by_side", lambda fn, f: fn(f["rows"], baselines_of(f["rows"]))),
    "serving": ("peers", "rows_table", lambda fn, f: fn(f["rows"])),
    "json_path": ("latency", "json_path_table", lambda fn, f: fn(f)),
    "floor": ("latency", "floor_table", lambda fn, f: fn(f)),
    "warmup": ("latency", "warmup_table", lambda fn, f: fn(f)),
    "bigimage": ("giants", "bigimage_table", lambda fn, f: fn(f)),
    "fourier_table": ("fits", "fourier_md", lambda fn, f: fn(f)),
    "time_to_quality": ("fits", "ttq_md", lambda fn, f: fn(f)),
    "sinekan_speed": ("fits", "speed_md", lambda fn, f: fn(f)),
    "roofline": ("kernels", "table_md", lambda fn, f: fn(f)),
    "native_fit": ("native", "fit_md", lambda fn, f: fn(f)),
    "model_bytes": ("codecs", "bytes_table", lambda fn, f: fn(f)),
    "rd": ("codecs", "rd_table", lambda fn, f: fn(f)),
}


def baselines_of(rows: list[dict]) -> dict[str, str]:
    from .peers import TITLES

    return {r["server"]: r["server"] for r in rows if r["server"] not in TITLES}


def machine_line(m: dict) -> str:
    cpu = m.get("lscpu", {}).get("cpu") or m.get("cpu") or "unknown CPU"
    cores = m.get("lscpu", {}).get("cpus") or m.get("cores")
    return f"{cpu}, {cores} cores" if cores else cpu


def table_of(row: dict) -> str:
    figures = row["figures"]
    if row["scenario"] in RENDER:
        module, name, call = RENDER[row["scenario"]]
        fn = getattr(importlib.import_module(f"bench.{module}"), name)
        return call(fn, figures).strip()
    if isinstance(figures, dict) and isinstance(figures.get("table"), str):
        return figures["table"].strip()
    raise ValueError(f"no table for scenario '{row['scenario']}': add it to bench.store.RENDER")


def block(row: dict) -> str:
    command = f" Command: `{row['command']}`." if row.get("command") else ""
    base = row.get("baselines") or {}
    against = "; beside " + ", ".join(f"`{sha}` ({ref})" for ref, sha in base.items()) if base else ""
    head = (
        f"*Run `{row['run']}`, {row['date']}, {machine_line(row.get('machine') or {})}, commit `{row['commit']}`"
        f"{against}.{command} Generated by `python -m bench report` from the results store.*"
    )
    return f"{head}\n\n{table_of(row)}\n"


def family_of(row: dict) -> str:

    sc = SCENARIOS.get(row["scenario"])
    return row.get("family") or (sc.family if sc else "other")


def latest_table(rows: list[dict]) -> str:
    """Every scenario's latest row, by family (in bench' order) and name."""

    order = {f: i for i, f in enumerate([*FAMILIES, "other"])}
    last = {name: latest(rows, name) for name in {row["scenario"] for row in rows}}
    lines = ["| family | scenario | latest run | date | machine | commit |", "|---|---|---|---|---|---|"]
    for name, row in sorted(last.items(), key=lambda kv: (order.get(family_of(kv[1]), len(order)), kv[0])):
        m = row.get("machine") or {}
        cells = [family_of(row), name, f"`{row['run']}`", row["date"], machine_line(m), f"`{row['commit']}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(doc: Path, rows: list[dict]) -> tuple[str, int]:
    """`doc`'s text with every block filled from `rows`, and how many; a block naming a run the store lacks is an
    error naming it."""
    text = doc.read_text(encoding="utf-8")
    count = 0

    def fill(m: re.Match) -> str:
        nonlocal count
        opening = m.group(0).split("\n", 1)[0]
        count += 1
        if m["scenario"] == "latest":
            return f"{opening}\n{latest_table(rows)}\n<!-- /bench -->"
        row = latest(rows, m["scenario"], m["run"])
        if row is None:
            raise ValueError(f"{doc}: block '{m['scenario']} {m['run'] or ''}' has no row in the store")
        return f"{opening}\n{block(row)}<!-- /bench -->"

    return MARK.sub(fill, text), count


def regenerate(docs: list[Path], rows: list[dict]) -> int:
    """Rewrite the blocks of every page from `rows`, all or none: every page is rendered before any is written."""
    rendered = [(doc, *render(doc, rows)) for doc in docs]
    for doc, text, _ in rendered:
        if text != doc.read_text(encoding="utf-8"):
            tmp = doc.with_suffix(".md.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(doc)
    return sum(count for _, _, count in rendered)
