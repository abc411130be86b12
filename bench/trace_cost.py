"""The trace budget (docs/benchmarks.md, trace_cost): what OpenTelemetry tracing costs one-digit classify at 8 clients.

`bench.floor`'s harness, run on three services side by side, round by round:
  - `adaptive`: this tree, tracing off (the default);
  - `traced`: this tree exporting every span (`OTEL_TRACES_EXPORTER=otlp`, sampler `always_on`) over OTLP
  (`--protocol`, gRPC by
    default) to a real receiver in this process (bench/otlp.py), which counts what arrives;
  - `sampled`: the same, sampling one trace in 1/`--ratio` (parentbased_traceidratio);
  - `before` (with `--baseline DIR`): a checkout without the tracing code, for "off costs nothing";
  - `traced-old` and `sampled-old` (with `--compare DIR`): another checkout traced the same two ways, for a
    change to the tracing code measured beside the code it replaces.
The target: traced ≥ 0.95× adaptive in req/s. The receiver shares the machine, so the servers' CPU per
request (from /proc) is the cleaner figure; both are in the table.

    python -m bench.trace_cost --baseline ../before --rounds 3      # bench/results/trace_cost.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import floor
from .otlp import Receiver
from .serving import ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.trace_cost", description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="a checkout without tracing, run beside it as 'before'")
    p.add_argument("--compare", type=Path, help="a checkout with other tracing code, traced beside this one")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--gap",
        type=float,
        default=6.0,
        help="rest after each run: longer than the exporter's 5 s "
        "schedule, so that the next server does not share the machine with the last one's export",
    )
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--concurrency", default="8")
    p.add_argument(
        "--protocol", default="grpc", choices=("grpc", "http/protobuf"), help="OTLP protocol of the traced one"
    )
    p.add_argument("--ratio", type=float, default=0.05, help="also a service sampling this share of traces (0: not)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "trace_cost.json")
    a = p.parse_args(argv)
    receiver = Receiver().start()
    try:
        url = receiver.grpc_url if a.protocol == "grpc" else receiver.http_url
        otlp = (
            f"OTEL_TRACES_EXPORTER=otlp,OTEL_EXPORTER_OTLP_PROTOCOL={a.protocol},"
            f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={url}"
        )
        variants = [f"traced:{otlp},OTEL_TRACES_SAMPLER=always_on"]
        if a.ratio:  # what an operator does with a busy service: trace one request in 1/ratio
            variants.append(
                f"sampled:{otlp},OTEL_TRACES_SAMPLER=parentbased_traceidratio,OTEL_TRACES_SAMPLER_ARG={a.ratio}"
            )
        if a.compare:
            variants += [v.replace(":", f"-old@{a.compare}:", 1) for v in variants]
        args = [
            "--loads",
            "classify",
            "--policies",
            "adaptive",
            "--concurrency",
            a.concurrency,
            "--rounds",
            str(a.rounds),
            "--duration",
            str(a.duration),
            "--gap",
            str(a.gap),
            "--out",
            str(a.out),
        ]
        for v in variants:
            args += ["--variant", v]
        floor.main(args + (["--baseline", str(a.baseline)] if a.baseline else []))
    finally:
        receiver.stop()
    result = json.loads(a.out.read_text())
    result["spans_received"], result["export_requests"] = len(receiver.spans), receiver.requests
    rows = {(r["load"], r["clients"], r["server"]): r for r in result["rows"]}
    result["ratios"] = []
    for (load, clients, server), r in rows.items():
        off = rows.get((load, clients, "adaptive"))
        if server != "adaptive" and off and server != "floor":
            result["ratios"].append(
                {
                    "load": load,
                    "clients": clients,
                    "server": server,
                    "rps_over_off": round(r["rps"] / off["rps"], 3),
                    "cpu_over_off": round(r["cpu_ms_per_req"] / off["cpu_ms_per_req"], 3),
                }
            )
    a.out.write_text(json.dumps(result, indent=1))
    for q in result["ratios"]:
        print(
            f"{q['load']} c={q['clients']} {q['server']}: {q['rps_over_off']:.3f}x the req/s of tracing off, "  # noqa: T201
            f"{q['cpu_over_off']:.3f}x its CPU per request"
        )
    print(f"spans received: {result['spans_received']} in {result['export_requests']} exports")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
