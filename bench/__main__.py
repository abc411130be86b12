"""`python -m bench`: run a scenario beside other checkouts and keep its results in one store.

    python -m bench list                                  # the scenarios, by family
    python -m bench peers --baseline HEAD~3 --rounds 3    # ours at HEAD~3 beside this tree, 3 interleaved rounds
    python -m bench floor --baseline /tmp/before -- --loads classify   # after `--`: the harness's own options
    python -m bench import                                # bench/results/*.json, *.jsonl into the store
    python -m bench report                                # the generated blocks of docs/benchmarks*.md, from the store

Why not asv or pytest-benchmark: both time a function inside one process per commit (asv builds an environment
and runs each commit in turn), while these scenarios run several servers side by side, interleaving rounds and
counting each server's processes' CPU from /proc (bench.serving.Server) in one run, which neither can express.

A --baseline is a folder (a checkout) or a git ref, which is exported once (`git archive`) to build/bench/trees/SHA
(bench.common.checkout, which the harnesses use too).
The harness runs as `python -m bench.MODULE` in this tree; every result file it writes or rewrites under
bench/results (or --watch) becomes a row of bench/results/store.jsonl (bench.store) with the scenario, this tree's
commit, the baselines' commits, the machine (lscpu), the date and the command.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from commandline import OneLineParser

from . import FAMILIES, SCENARIOS, store
from .common import RESULTS, ROOT, TREES, checkout

PAGES = [ROOT / "docs" / "benchmarks.md", *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]


def snapshot(folder: Path) -> dict[Path, tuple[int, int]]:
    files = sorted(folder.glob("*.json")) + sorted(folder.glob("*.jsonl"))
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.name != store.STORE.name}


def harness_command(sc, trees: list[tuple[str, Path, str]], rounds: int | None, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", f"bench.{sc.module}", *sc.args]
    for _, tree, _ in trees:
        cmd += ["--baseline", str(tree)]
    if rounds is not None:
        cmd += ["--rounds", str(rounds)]
    return cmd + extra


def run(args, parser) -> int:
    sc = SCENARIOS.get(args.scenario)
    if sc is None:
        parser.error(f"unknown scenario '{args.scenario}'; `python -m bench list` names them")
    if len(args.baseline) > sc.max_baselines:
        parser.error(f"scenario '{sc.name}' takes at most {sc.max_baselines} --baseline (it has {len(args.baseline)})")
    if args.rounds is not None and (not sc.rounds or args.rounds < 1):
        parser.error(f"--rounds: scenario '{sc.name}' " + ("has no rounds" if not sc.rounds else "needs at least 1"))
    missing = [p for p in sc.needs if not shutil.which(p)]
    if missing and not args.dry_run:
        parser.error(f"scenario '{sc.name}' needs {', '.join(missing)} on PATH (apt-get install {' '.join(missing)})")
    trees = []
    for ref in args.baseline:
        try:
            trees.append((ref, *checkout(ref, Path(args.trees))))
        except (ValueError, subprocess.CalledProcessError) as e:
            parser.error(str(e))
    cmd = harness_command(sc, trees, args.rounds, args.extra)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    watch = Path(args.watch).resolve()
    before = snapshot(watch)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if rc != 0:
        print(f"bench: {sc.module} exited with {rc}; nothing stored", file=sys.stderr)
        return rc
    typed = shlex.join(["python", "-m", "bench", *args.argv])
    rows = []
    for path, stamp in snapshot(watch).items():
        if before.get(path) == stamp:
            continue
        text = path.read_text(encoding="utf-8")
        try:
            lines = [x for x in text.splitlines() if x.strip()]
            figures = [json.loads(x) for x in lines] if path.suffix == ".jsonl" else json.loads(text)
        except json.JSONDecodeError as e:
            parser.error(f"{sc.module} wrote {path}, which is not JSON ({e.msg}); nothing stored")
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        row = store.make_row(sc.name, path.stem, figures, typed, rel, digest=store.digest_of(text))
        row["family"], row["harness"] = sc.family, shlex.join(["python", *cmd[1:]])
        row["baselines"] = {ref: sha for ref, _, sha in trees}
        rows.append(row)
    if not rows:
        print(f"bench: {sc.module} wrote no result file under {watch}; nothing stored", file=sys.stderr)
        return 1
    store.append(rows, Path(args.store))
    print(f"bench: {len(rows)} result(s) of {sc.name} stored in {args.store}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    head = argv[: argv.index("--")] if "--" in argv else argv
    p = OneLineParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("scenario", help="a scenario (`list` names them), or: list, import, report")
    p.add_argument("--baseline", action="append", default=[], help="a checkout folder or git ref (repeatable)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (the harness's default if not given)")
    p.add_argument("--store", default=str(store.STORE), help="the results store (JSON lines)")
    p.add_argument("--watch", default=str(RESULTS), help="where the harness writes its result files")
    p.add_argument("--doc", action="append", default=[], help="report: a page to regenerate (default: all)")
    p.add_argument("--trees", default=str(TREES), help="where a git ref --baseline is exported")
    p.add_argument("--dry-run", action="store_true", help="print the harness's command, run nothing")
    args = p.parse_args(head)
    args.extra, args.argv = extra, argv
    if args.scenario == "list":
        for fam, what in FAMILIES.items():
            names = [s.name + ("*" if s.baseline else "") for s in SCENARIOS.values() if s.family == fam]
            print(f"{fam} ({what}):\n  {' '.join(names)}")
        print("* takes --baseline")
        return 0
    try:
        if args.scenario == "import":
            n = store.import_results(Path(args.watch), Path(args.store))
            print(f"bench: {n} row(s) imported into {args.store}", file=sys.stderr)
            return 0
        if args.scenario == "report":
            from .store import regenerate

            docs = [Path(d) for d in args.doc] or PAGES
            changed = regenerate(docs, store.read(Path(args.store)))
            print(f"bench: {changed} block(s) regenerated in {len(docs)} page(s)", file=sys.stderr)
            return 0
    except (ValueError, OSError) as e:  # a store line or result file that is not JSON, a block with no row
        p.error(str(e))
    return run(args, p)


if __name__ == "__main__":
    sys.exit(main())
